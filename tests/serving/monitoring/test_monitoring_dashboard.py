"""The Grafana dashboard: strict schema validation (Grafana 11.6), panel parts against
their plugin schemas, and every PromQL expression parsed by promtool."""

import json
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import jsonschema
import pytest
import yaml

from serving.chart import derived_files
from serving.cli import build_parser
from serving.monitoring.dashboard import ROWS, dashboard, queries
from tests.support.paths import ROOT

PROMTOOL = shutil.which("promtool")


def _validator(shared_dir: Path, name: str, definition: str | None = None):
    schema = json.loads((shared_dir / "grafana-schema" / "v11.6" / name).read_text())
    if definition:
        schema = {**schema, "$ref": f"#/definitions/{definition}"}
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def board() -> dict:
    assert not derived_files.stale(build_parser()), (
        "run `dsv4-serve generate` and commit the result"
    )
    return json.loads(derived_files.DASHBOARD_FILE.read_text())


def test_dashboard_validates_against_grafana_11_6_schema(board: dict, shared_dir: Path):
    errors = list(_validator(shared_dir, "dashboard.jsonschema.json").iter_errors(board))
    assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_schema_rejects_an_unknown_key(board: dict, shared_dir: Path):
    broken = {**board, "pannels": []}
    assert not _validator(shared_dir, "dashboard.jsonschema.json").is_valid(broken)


def test_targets_and_timeseries_options_match_plugin_schemas(board: dict, shared_dir: Path):
    query = _validator(shared_dir, "prometheus.jsonschema.json")
    options = _validator(shared_dir, "timeseries.jsonschema.json", "Options")
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert query.is_valid(target), (panel["title"], target)
        if panel["type"] == "timeseries":
            assert options.is_valid(panel["options"]), panel["title"]


def test_rows_and_template_variables(board: dict):
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == [title for title, _ in ROWS]
    assert rows[0].startswith("MTP") and "overrides" in rows[-1]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "namespace", "model", "replica"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run `make deps`")
def test_every_query_parses(tmp_path: Path):
    # promtool parses expressions when checking rules: one recording rule per query.
    exprs = queries(dashboard(), concrete=True)
    rules = [{"record": f"dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_builders_are_the_pinned_grafana_11_6_release():
    # Without its epoch, pip resolves grafana-foundation-sdk to the newest one: schema 10.1.
    installed = version("grafana-foundation-sdk")
    assert installed.endswith("!11.6.0"), installed
    for name in ("pyproject.toml", "requirements-cpu.txt", "requirements-cpu.lock"):
        assert f"grafana-foundation-sdk=={installed}" in (ROOT / name).read_text(), name
