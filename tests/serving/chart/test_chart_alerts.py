"""monitoring.alerts: every alert's labels and runbook base set from values (the rules file
stays as generated for users without Kubernetes); recording rules are untouched."""

from pathlib import Path

import yaml

from serving.chart.derived_files import RULES_FILE
from tests.support.chart_render import by_kind, render


def _rules(tmp_path: Path, values: dict) -> list[dict]:
    (rule,) = by_kind(render(tmp_path, values), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_alert_labels_and_runbook_base_from_values(tmp_path: Path):
    shipped = [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]]
    assert _rules(tmp_path, {}) == shipped  # no values: the file as generated
    values = {
        "monitoring": {
            "alerts": {
                "labels": {"team": "llm-platform", "cluster": "prod", "severity": "info"},
                "runbookBaseUrl": "https://wiki.example/runbooks",
            }
        }
    }
    (tmp_path / "set").mkdir()
    rules = _rules(tmp_path / "set", values)
    alerts = [r for r in rules if "alert" in r]
    assert len(alerts) == len([r for r in shipped if "alert" in r]) > 5
    for rule, original in zip(alerts, [r for r in shipped if "alert" in r], strict=True):
        assert rule["labels"]["team"] == "llm-platform" and rule["labels"]["cluster"] == "prod"
        assert rule["labels"]["severity"] == original["labels"]["severity"]  # kept
        anchor = original["annotations"]["runbook_url"].split("#")[1]
        assert rule["annotations"]["runbook_url"] == f"https://wiki.example/runbooks#{anchor}"
        assert rule["expr"] == original["expr"]
    records = [r for r in rules if "record" in r]
    assert records == [r for r in shipped if "record" in r]


def test_a_runbook_base_that_is_not_a_url_is_refused(tmp_path: Path):
    values = {"monitoring": {"alerts": {"runbookBaseUrl": "wiki/runbooks"}}}
    assert "/monitoring/alerts/runbookBaseUrl" in render(tmp_path, values, expect_ok=False)
