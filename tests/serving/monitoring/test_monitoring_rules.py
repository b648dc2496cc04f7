"""The dsv4 recording rules and alerts under promtool: syntax, and the unit tests in
helm/dsv4-serve/files/dsv4-rules.test.yaml (written from serving/monitoring/rule_tests.py)
with several engines and both metric name forms (``ray_vllm_*`` through Ray, ``vllm:*``
from vLLM's own server)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from serving.chart import derived_files
from serving.cli import build_parser
from serving.monitoring.rules import rule_groups
from tests.support.paths import ROOT

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run `make deps`")

ALERTS = {r["alert"]: r for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}
GENERATED = {derived_files.RULES_FILE, derived_files.RULES_TEST_FILE}


@pytest.fixture(scope="module")
def rules_file() -> Path:
    assert not GENERATED & set(derived_files.stale(build_parser())), (
        "run `dsv4-serve generate` and commit the result"
    )
    return derived_files.RULES_FILE


@pytest.fixture(scope="module")
def unit_tests(rules_file: Path) -> dict:
    return yaml.safe_load(derived_files.RULES_TEST_FILE.read_text())


def test_promtool_check_rules(rules_file: Path):
    out = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()


def test_every_rule_and_alert_has_a_unit_test(rules_file: Path, unit_tests: dict):
    assert unit_tests["rule_files"] == [rules_file.name]
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    names = {r.get("record") or r.get("alert") for g in groups for r in g["rules"]}
    tested = set()
    for group in unit_tests["tests"]:
        tested |= {t["expr"].split("{")[0] for t in group.get("promql_expr_test", [])}
        tested |= {t["alertname"] for t in group.get("alert_rule_test", [])}
    assert names - tested == set()


def test_promtool_unit_tests(unit_tests: dict):
    # The command docs/monitoring.md gives, from the repository root.
    path = derived_files.RULES_TEST_FILE.relative_to(ROOT)
    out = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-6000:]
    assert "SUCCESS" in out.stdout, out.stdout


def test_every_alert_has_a_runbook_section():
    runbook = (ROOT / "docs" / "monitoring.md").read_text()
    for name, rule in ALERTS.items():
        assert f"\n### {name}\n" in runbook, name
        assert rule["annotations"]["runbook_url"].endswith(f"#{name.lower()}")
        assert rule["labels"]["severity"] in {"critical", "warning"}
