"""docs/speculation.md's golden draft-sampling table: the CPU record and each GPU run's arms,
every row's rates from its own counts beside its own design."""

import json

from serving.records import draft_sampling_table
from serving.records.store import ROOT, load


def _row(text: str, run: str, method: str) -> list[str]:
    found = [line for line in text.splitlines() if line.startswith(f"| {run}") and method in line]
    assert len(found) == 1, (run, method, found)
    return [cell.strip() for cell in found[0].strip("|").split("|")]


def test_each_run_s_rows_divide_its_own_counts_by_its_own_draft_steps():
    text = draft_sampling_table.table()
    cpu = load(draft_sampling_table.RECORD)
    (path,) = draft_sampling_table.GPU_RUNS
    gpu = json.loads((ROOT / path).read_text())
    runs = [(f"CPU, vLLM {cpu.vllm}", cpu.figures)] + [
        (f"{gpu['gpu']['name']} ({arm})", golden["figures"])
        for arm, golden in gpu["golden"].items()
    ]
    for run, figures in runs:
        for method, counts in figures["methods"].items():
            cells = _row(text, run, f"| {method} |")
            first = counts["accepted_per_pos"][0] / counts["drafts"]
            assert cells[2] == f"{counts['drafts']:,}"
            assert cells[3].startswith(f"{first:.3f} / ")
    # The GPU run's verdict is said beside its figures: a failed check would show.
    assert all(golden["result"] in text for golden in gpu["golden"].values())


def test_an_arm_that_never_finished_is_said_in_the_sources_without_rows():
    (path,) = draft_sampling_table.GPU_RUNS
    run = json.loads((ROOT / path).read_text())
    verdict = "no pytest result; no record"
    run["golden"]["default"] = {"result": verdict, "vllm": None, "figures": None}
    text = draft_sampling_table.table(gpu_runs=[run])
    assert f"the test: {verdict};" in text
    assert not [
        line for line in text.splitlines() if line.startswith("| NVIDIA") and "(default)" in line
    ]
