"""The per-position acceptance rules and DSV4MTPAcceptanceCollapsedAtPosition under promtool
on two small scrape snapshots of Ray's metrics export (the ``scrape-N.prom`` format of
``tests.support.scrape_snapshot``: three rounds 30 s apart, each Ray node's export and a
gateway's thresholds, names and labels as the H200 run's export in scrape-gpu-golden).
Both are written by hand for this test, not recorded from an engine; served model
DeepSeek-V4-Pro with k=2, a replica per node:

- tests/support/scrape-position-collapse: a9x2kq1m, position 1's counter stands still while
  position 0 gains 0.85 a draft; b4m7zp2c, drafts flow and no position moves (the
  engine-wide shape); d2n6hv3f, position 1 never accepted, so Ray exports no series for it;
  c8r1wd5e healthy (0.85 and 0.6 a draft).
- tests/support/scrape-position-healthy: two healthy replicas and an idle one (counters from
  earlier traffic that no longer move, its gauge expired).

Evaluated 5 minutes after the first round, as the other snapshots are: a 5m rate there is
the counters' increase over the rounds, so the recorded rates are ratios of increases. The
alert cannot fire inside one window (``for: 10m``); its expression is what is checked.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from serving.chart import derived_files
from tests.support import scrape_snapshot as snap
from tests.support.paths import ROOT

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run `make deps`")
SUPPORT = ROOT / "tests" / "support"
COLLAPSE = SUPPORT / "scrape-position-collapse"
HEALTHY = SUPPORT / "scrape-position-healthy"
MODEL = "deepseek-ai/DeepSeek-V4-Pro"
ALERT = "DSV4MTPAcceptanceCollapsedAtPosition"
CONDITIONAL = "dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m"
SHARE = "dsv4:spec_decode_position_acceptance_rate:replica_ratio5m"


def _unit_test(directory: Path) -> dict:
    return snap.unit_test(snap.load(directory), derived_files.RULES_FILE)


def _promtool(unit_test: dict, tmp_path: Path, name: str = "snapshot") -> str:
    path = tmp_path / f"{name}.test.yaml"
    path.write_text(yaml.safe_dump(unit_test, sort_keys=False, width=1000))
    out = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=300
    )
    report = out.stdout[-8000:] + out.stderr[-4000:]
    return ("SUCCESS" if out.returncode == 0 else "FAILED") + "\n" + report


def _samples(unit_test: dict, expr_starts: str) -> dict[tuple[str, str], float]:
    """{(replica, position): value} the test expects of the expression at its start."""
    tests = unit_test["tests"][0]["promql_expr_test"]
    test = next(t for t in tests if t["expr"].startswith(expr_starts))
    out = {}
    for sample in test["exp_samples"]:
        labels = dict(
            part.split("=", 1) for part in sample["labels"].strip("{}").split(", ") if part
        )
        labels = {k: yaml.safe_load(v) for k, v in labels.items()}
        assert labels["model_name"] == MODEL
        out[labels["replica"], labels.get("position", "")] = sample["value"]
    return out


@pytest.fixture(scope="module")
def collapse() -> dict:
    return _unit_test(COLLAPSE)


@pytest.fixture(scope="module")
def healthy() -> dict:
    return _unit_test(HEALTHY)


@needs_promtool
@pytest.mark.parametrize("which", ["collapse", "healthy"])
def test_promtool_evaluates_the_rules_as_computed_from_the_scrape(which, request, tmp_path):
    report = _promtool(request.getfixturevalue(which), tmp_path)
    assert report.startswith("SUCCESS"), report


def test_the_collapse_scrape_records_each_position(collapse: dict):
    # Of all drafts; d2n6hv3f's position 1 has no counter through Ray and counts as 0.
    shares = {
        ("a9x2kq1m", "0"): 0.85,
        ("a9x2kq1m", "1"): 0,
        ("b4m7zp2c", "0"): 0,
        ("b4m7zp2c", "1"): 0,
        ("d2n6hv3f", "0"): 0.85,
        ("d2n6hv3f", "1"): 0,
        ("c8r1wd5e", "0"): 0.85,
        ("c8r1wd5e", "1"): 0.6,
    }
    assert _samples(collapse, f"round({SHARE} ") == shares
    # Of the tokens verified at a position: the same at position 0 and where nothing is
    # accepted; 0.6 / 0.85 at the healthy position 1; b4m7zp2c's position 1 is never
    # verified (0/0).
    conditional = {**shares, ("c8r1wd5e", "1"): snap.prom_round(0.6 / 0.85, snap.SCALE)}
    del conditional["b4m7zp2c", "1"]
    assert _samples(collapse, f"round({CONDITIONAL} ") == conditional


def test_the_alert_condition_names_each_collapsed_position(collapse: dict):
    condition = _samples(collapse, f"round(({CONDITIONAL} < ")
    assert condition == {("a9x2kq1m", "1"): 0, ("b4m7zp2c", "0"): 0, ("d2n6hv3f", "1"): 0}
    alerts = [t for t in collapse["tests"][0]["alert_rule_test"] if t["alertname"] == ALERT]
    assert alerts == [{**alerts[0], "exp_alerts": []}]  # for: 10m, longer than the scrape


def test_the_healthy_scrape_stays_quiet(healthy: dict):
    assert _samples(healthy, f"round(({CONDITIONAL} < ") == {}
    conditional = _samples(healthy, f"round({CONDITIONAL} ")
    # The idle replica drafted nothing in the window: no position is verified there.
    assert {replica for replica, _ in conditional} == {"a9x2kq1m", "c8r1wd5e"}
    assert min(conditional.values()) > 0.5


@needs_promtool
def test_rules_without_the_zero_fill_miss_a_position_ray_never_exported(tmp_path):
    """Against rules whose conditional rate divides the bare counter (no 0 for a position
    Ray has no series for), the collapse scrape's expectations fail."""
    rules = derived_files.RULES_FILE.read_text()
    filled = yaml.safe_load(rules)
    for group in filled["groups"]:
        for rule in group["rules"]:
            if rule.get("record") == CONDITIONAL:
                numerator, denominator = rule["expr"].split(") / ", 1)
                bare = numerator.lstrip("(").split(" or ")[0]
                rule["expr"] = f"{bare} / {denominator}"
    wrong = tmp_path / "wrong-rules.yaml"
    wrong.write_text(yaml.safe_dump(filled, sort_keys=False))
    test = snap.unit_test(snap.load(COLLAPSE), derived_files.RULES_FILE, str(wrong))
    report = _promtool(test, tmp_path, "wrong")
    assert report.startswith("FAILED")
    assert CONDITIONAL in report and "d2n6hv3f" in report
