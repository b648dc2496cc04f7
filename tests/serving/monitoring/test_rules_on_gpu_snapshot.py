"""The dsv4 rules and alerts under promtool on a scraped snapshot of the real app.

A snapshot is the ``scrape-N.prom`` files ``tests/gpu/serve_smoke.py`` writes: every
metrics endpoint of `dsv4-serve up` in three rounds. ``tests.support.scrape_snapshot`` turns
one into a promtool unit test whose expected values it computes from the scraped samples
alone. Snapshots: the H200 run of ``up gpu-golden`` in tests/support/scrape-gpu-golden
(2026-12-02); a CPU run of ``up cpu-tiny`` (tests/support/scrape-cpu-tiny); and any
directory in ``DSV4_SCRAPE_SNAPSHOTS`` (``os.pathsep``-separated).
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from serving.chart import derived_files
from serving.config.preset import load_preset
from tests.support import scrape_snapshot as snap
from tests.support.paths import ROOT

PROMTOOL = shutil.which("promtool")
CPU_SNAPSHOT = ROOT / "tests" / "support" / "scrape-cpu-tiny"
GPU_SNAPSHOT = ROOT / "tests" / "support" / "scrape-gpu-golden"
EXTRA = [Path(p) for p in os.environ.get("DSV4_SCRAPE_SNAPSHOTS", "").split(os.pathsep) if p]
SNAPSHOTS = [d for d in (GPU_SNAPSHOT, CPU_SNAPSHOT, *EXTRA) if d.is_dir()]
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run `make deps`")
ACCEPTANCE = "dsv4:spec_decode_acceptance_rate:ratio5m"


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@pytest.fixture(scope="module", params=SNAPSHOTS, ids=_id)
def snapshot(request: pytest.FixtureRequest) -> snap.Snapshot:
    return snap.load(request.param)


@pytest.fixture(scope="module")
def unit_test(snapshot: snap.Snapshot) -> dict:
    return snap.unit_test(snapshot, derived_files.RULES_FILE)


def promtool(unit_test: dict, directory: Path) -> subprocess.CompletedProcess:
    path = directory / "snapshot.test.yaml"
    path.write_text(yaml.safe_dump(unit_test, sort_keys=False, width=1000))
    return subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=300
    )


def expr_test(unit_test: dict, expr_starts: str) -> dict:
    tests = unit_test["tests"][0]["promql_expr_test"]
    return next(t for t in tests if t["expr"].startswith(expr_starts))


def test_the_stored_snapshots_are_there_and_complete():
    """The committed snapshots are what the cases below run on: one deleted or cut short
    fails here rather than leaving its cases out."""
    for directory in (GPU_SNAPSHOT, CPU_SNAPSHOT):
        assert directory.is_dir(), f"{directory} is gone"
        assert len(snap.round_files(directory)) >= 2, directory


def test_snapshot_holds_every_series_the_rules_read(snapshot: snap.Snapshot):
    assert snap.missing_series(snapshot, derived_files.RULES_FILE) == {}


@needs_promtool
def test_promtool_evaluates_the_rules_as_computed_from_the_scrape(unit_test: dict, tmp_path):
    tests = unit_test["tests"][0]
    records = {r["record"] for r in snap.rules_in(derived_files.RULES_FILE) if "record" in r}
    alerts = {r["alert"] for r in snap.rules_in(derived_files.RULES_FILE) if "alert" in r}
    assert {t["alertname"] for t in tests["alert_rule_test"]} == alerts
    tested = {t["expr"].split("(")[1].split(" ")[0] for t in tests["promql_expr_test"]}
    assert records <= tested
    out = promtool(unit_test, tmp_path)
    assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-4000:]
    assert "SUCCESS" in out.stdout


def test_recorded_acceptance_is_delta_accepted_over_delta_drafted(
    snapshot: snap.Snapshot, unit_test: dict
):
    """What promtool checks the acceptance rule against is the counters' own increase
    from the first scrape to the last, per model."""
    samples = expr_test(unit_test, f"round({ACCEPTANCE} ")["exp_samples"]
    assert samples, "no acceptance recorded: the snapshot holds no spec-decode traffic"
    for sample in samples:
        model = sample["labels"].split('model_name="')[1].split('"')[0]
        accepted, drafted = (
            snap.counter_increase(snapshot, f"ray_vllm_spec_decode_num_{n}_total", model_name=model)
            + snap.counter_increase(snapshot, f"vllm:spec_decode_num_{n}_total", model_name=model)
            for n in ("accepted_tokens", "draft_tokens")
        )
        assert drafted > 0
        assert sample["value"] == snap.prom_round(accepted / drafted, snap.SCALE)


def test_thresholds_are_the_served_presets(snapshot: snap.Snapshot, unit_test: dict):
    summary = snapshot.directory / "summary.json"
    if not summary.exists():
        pytest.skip("no summary.json beside the scrape: the preset is unknown")
    preset = load_preset(yaml.safe_load(summary.read_text())["preset"])
    for field, value in preset.monitoring.model_dump().items():
        samples = expr_test(unit_test, f"round(dsv4:threshold:{field} ")["exp_samples"]
        assert [s["value"] for s in samples] == [snap.prom_round(value, snap.SCALE)], field


@needs_promtool
def test_a_wrong_rule_fails_against_the_scrape(tmp_path):
    """The same expectations against rules whose acceptance divides by drafts."""
    rules = derived_files.RULES_FILE.read_text()
    right = "dsv4:accepted_tokens:rate5m / dsv4:draft_tokens:rate5m"
    assert right in rules
    wrong = tmp_path / "wrong-rules.yaml"
    wrong.write_text(rules.replace(right, "dsv4:accepted_tokens:rate5m / dsv4:drafts:rate5m"))
    test = snap.unit_test(snap.load(CPU_SNAPSHOT), derived_files.RULES_FILE, str(wrong))
    out = promtool(test, tmp_path)
    assert out.returncode != 0
    report = out.stdout + out.stderr
    assert ACCEPTANCE in report and "FAILED" in report


def test_a_series_missing_from_the_scrape_is_named(tmp_path):
    dropped = "ray_vllm_request_queue_time_seconds_bucket"
    for path in snap.round_files(CPU_SNAPSHOT):
        lines = path.read_text().splitlines(keepends=True)
        (tmp_path / path.name).write_text("".join(x for x in lines if not x.startswith(dropped)))
    missing = snap.missing_series(snap.load(tmp_path), derived_files.RULES_FILE)
    assert list(missing) == [f"vllm:request_queue_time_seconds_bucket|{dropped}"]
    assert set(missing[f"vllm:request_queue_time_seconds_bucket|{dropped}"]) == {
        "dsv4:queue_seconds:quantile5m",
        "dsv4:queue_seconds:role_quantile5m",
    }
