"""The CPU kernel libraries table (serving/records/kernel_libraries_table.py): its cells are the
committed report's native levels and `figures.kernel_libraries`, and a report it cannot read
whole is refused."""

import json

import pytest

from serving.records import kernel_libraries_table as kl
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _report() -> dict:
    return json.loads((ROOT / kl.SUMMARY).read_text())


def _entry(report: dict, target: str, c: int) -> dict:
    (row,) = [
        x
        for x in report["figures"]["kernel_libraries"]
        if x["target"] == target and x["concurrency"] == c
    ]
    return row


def test_the_cells_are_the_report_s_levels_and_ratios():
    report = _report()
    text = kl.table(report)
    k0, k2 = _entry(report, "vllm-k0@avx2", 8), _entry(report, "vllm-k2@avx2", 8)
    assert row_starting(text, "| `_C_AVX2` (fallbacks) | 8 |") == (
        f"| `_C_AVX2` (fallbacks) | 8 | {k0['tokens_per_s']:.1f} | {k2['tokens_per_s']:.1f} "
        f"| {k0['throughput_ratio']:.2f} | {k2['throughput_ratio']:.2f} |"
    )
    # The native row is the level each fallback's ratio was taken against.
    native = row_starting(text, "| `_C` (native) | 8 |")
    assert native.startswith(f"| `_C` (native) | 8 | {k0['baseline_tokens_per_s']:.1f} |")
    assert kl.SUMMARY in text and "machine not recorded" in text


def test_a_changed_figure_shows():
    report = _report()
    _entry(report, "vllm-k2@avx512", 1)["throughput_ratio"] = 0.555
    _entry(report, "vllm-k0@avx512", 1)["tokens_per_s"] = 1234.56
    line = row_starting(kl.table(report), "| `_C_AVX512` (fallbacks) | 1 |")
    assert "| 1234.6 |" in line and line.endswith("| 0.56 |")


def test_a_report_without_an_entry_or_a_figure_is_refused():
    report = _report()
    report["figures"]["kernel_libraries"].remove(_entry(report, "vllm-k2@avx2", 1))
    with pytest.raises(ValueError, match=r"bench\.json: no figures\.kernel_libraries entry for"):
        kl.table(report)
    report = _report()
    del _entry(report, "vllm-k0@avx512", 8)["throughput_ratio"]
    with pytest.raises(ValueError, match=r"vllm-k0@avx512 at c = 8: no throughput_ratio"):
        kl.table(report)
    report = _report()
    report["levels"] = [x for x in report["levels"] if x["target"] != "vllm-k0"]
    with pytest.raises(ValueError, match=r"no levels entry for vllm-k0 at c = 1"):
        kl.table(report)
