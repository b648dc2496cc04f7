"""Records and the tables rendered from them (serving/records): a region is replaced and
nothing else, a table's cells come from the record's figures, and the committed page is
what `dsv4-serve generate` renders from the committed records."""

import json

import pytest

from serving.chart import derived_files
from serving.gateway import route_doc
from serving.records import disaggregation_table, forward_table, reliability_table, store
from serving.records.regions import BEGIN, END, with_region


def test_a_region_is_replaced_and_the_prose_kept():
    text = f"intro\n{BEGIN.format('t')}\nold\n{END.format('t')}\noutro\n"
    out = with_region(text, "t", "new | row\n")
    assert out == f"intro\n{BEGIN.format('t')}\nnew | row\n{END.format('t')}\noutro\n"
    assert with_region(out, "t", "new | row") == out
    for broken in ("no markers", f"{END.format('t')}\n{BEGIN.format('t')}", text + text):
        with pytest.raises(ValueError, match="expected one region"):
            with_region(broken, "t", "x")


def test_a_record_is_written_only_where_asked_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.delenv(store.RECORD_DIR_ENV, raising=False)
    assert store.write("r", {"a": 1}, "make r") is None
    monkeypatch.setenv(store.RECORD_DIR_ENV, str(tmp_path))
    path = store.write("r", {"a": 1}, "make r")
    record = store.load("r", tmp_path)
    assert path == tmp_path / "r.json" and record.figures == {"a": 1}
    assert record.command == "make r" and record.commit and "cores" in record.machine
    (tmp_path / "bad.json").write_text(json.dumps({"name": "bad"}))
    with pytest.raises(ValueError, match="bad.json"):
        store.load("bad", tmp_path)


def test_the_reliability_table_counts_what_the_record_holds():
    records = {name: store.load(name) for name in reliability_table.RECORDS}
    figures = records["reliability"].figures
    # A 5xx in the record shows in the table, not hidden by a summary written by hand.
    figures["bad_input"]["malformed-json"] = 500
    text = reliability_table.table(records)
    kinds = len(figures["bad_input"])
    (row,) = [line for line in text.splitlines() if line.startswith(f"| bad input, {kinds} kinds")]
    assert row.rstrip(" |").endswith("; 1 5xx")
    assert f"API answering again {figures['recovery_s']} s after the kill" in text
    assert all(r.commit in text for r in records.values())


def test_the_route_counts_are_the_route_table_s():
    from serving.gateway.routes import ROUTES

    text = reliability_table.table()
    assert f"the table classifies {len(ROUTES)} routes" in text


def test_the_disaggregation_table_shows_what_the_record_holds():
    record = store.load(disaggregation_table.RECORD)
    figures = record.figures
    # A failed transfer and a text that parted far from a tie show, not a summary by hand.
    figures["kv"]["failed"] = 3.0
    figures["texts"]["long"] = {"parted_at": 7, "max_gap": 6.1}
    text = disaggregation_table.table(record)
    assert "; 3 failed" in text
    assert "long parted at token 7, every token within 6.10 of the top log-prob" in text
    equal = sum(1 for t in figures["texts"].values() if not t.get("parted_at"))
    assert equal < len(figures["texts"]) and f"{equal} of {len(figures['texts'])} equal" in text
    assert record.commit in text and record.command in text


def test_the_forward_table_divides_figures_of_one_machine():
    summary = json.loads((derived_files.ROOT / forward_table.SUMMARY).read_text())
    summary["served_tokens_per_s_same_machine"]["0"]["1"] = 441.75
    row = next(r for r in summary["rows"] if r["k"] == 0 and r["concurrency"] == 1)
    row["step_s"], row["tokens_per_step"] = 0.001, 1.0  # a ceiling of 1000 tok/s
    (line,) = [x for x in forward_table.table(summary).splitlines() if x.startswith("| 0 | 1 |")]
    assert line == "| 0 | 1 | 1.00 | 1.00 | 1,000 | 442 | 0.44 |"


def test_the_committed_pages_are_rendered_from_the_committed_records():
    pages = derived_files.docs_tables()
    sources = derived_files.docs_table_sources()
    assert {reliability_table, disaggregation_table, forward_table, route_doc} <= set(sources)
    for source in sources:
        page = derived_files.ROOT / source.DOC
        assert pages[page] == page.read_text(), f"{source.DOC}: run `dsv4-serve generate`"
    # benchmarks.md holds two regions: both rendered into the one page.
    benchmarks = pages[derived_files.ROOT / "docs/benchmarks.md"]
    assert "generated: forward-vs-served" in benchmarks and "generated: cold-start" in benchmarks


def test_the_cold_start_table_reads_each_runs_summary():
    from serving.records import cold_start_table

    runs = [json.loads((store.ROOT / path).read_text()) for path in cold_start_table.SUMMARIES]
    imported = runs[-1]["imported_engine"]
    imported["ready_s"] = 88.8
    imported["kernels_compiled_during_traffic"] = {"deep_gemm": 0, "triton": 0}
    runs[1]["imported_engine"]["kernels_compiled_during_traffic"] = {"deep_gemm": 3}
    text = cold_start_table.table(runs)
    (ready,) = [line for line in text.splitlines() if line.startswith("| 12-layer engine")]
    assert "| 88.8 from the imported cache" in ready
    (traffic,) = [line for line in text.splitlines() if line.startswith("| kernel files compiled")]
    # Each run's own counts; zero compiles said as none.
    prenorm = cold_start_table.SUMMARIES.index("docs/bench-cold-start/h100-prenorm-jobs.json")
    assert traffic.split(" | ")[1:3] == ["not counted", "deep_gemm 3"]
    assert traffic.split(" | ")[1 + prenorm] == "deep_gemm 1"  # that run's own count
    assert traffic.endswith("| none |")
    (k0,) = [line for line in text.splitlines() if line.startswith("| k = 0 engine")]
    engine = runs[prenorm]["imported_engines"]["k0"]
    cells = k0.strip("|").split(" | ")[1:]
    assert cells[prenorm] == (
        f"{engine['ready_s']:.1f};"
        f" {engine['rounds_tok_per_s']['c8'][0]} / {engine['rounds_tok_per_s']['c8'][1]};"
        f" {engine['rounds_tok_per_s']['c64'][0]} / {engine['rounds_tok_per_s']['c64'][1]}"
    )
    assert [c.strip() for i, c in enumerate(cells) if i != prenorm] == ["not run"] * (len(runs) - 1)
    assert all(path in text for path in cold_start_table.SUMMARIES)


def _record_targets() -> dict[str, list[str]]:
    """The Makefile's record-NAME targets and the test modules each one runs."""
    import re

    makefile = (store.ROOT / "Makefile").read_text()
    found = re.findall(r"^(record-[\w-]+):.*\n\t\$\(call record,([^)]*)\)", makefile, re.M)
    return {target: files.split() for target, files in found}


@pytest.mark.parametrize("path", sorted(store.RECORDS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_record_is_newer_than_the_tests_that_measure_it(path):
    """A record measured by an older version of its tests shows figures the tests no longer
    produce (`generate --check` compares pages with records, not records with tests)."""
    import subprocess

    record = store.load(path.stem)
    targets = _record_targets()
    target = record.command.removeprefix("make ")
    assert target in targets, f"{path.name}: '{record.command}' is not a `make record-*` target"
    commit = record.commit.removesuffix("-dirty")
    changed = subprocess.run(
        ["git", "log", "--format=%h %s", f"{commit}..HEAD", "--", *targets[target]],
        cwd=store.ROOT,
        capture_output=True,
        text=True,
    )
    assert changed.returncode == 0, f"{path.name}: commit {commit} not in history: {changed.stderr}"
    assert not changed.stdout, (
        f"{path.name} was measured at {commit}; its tests changed since "
        f"(run `{record.command}`):\n{changed.stdout}"
    )
