"""A cold-start run's output folder summarised as the committed record: the H100 run's own
console lines give back the figures of docs/bench-cold-start/h100-ledger.json."""

import json
from pathlib import Path

import pytest

from serving.records.store import ROOT
from serving.warm.cold_start_record import RecordError, build, main

# The H100 run's lines (tests/gpu/cold_start.sh's warm.log and import.log, commit 533da80).
WARM_LOG = """\
[warm    0.0s] preset h200-flash-bench: warm model flash 5 layers (fp4 experts) at /w, target vllm-k2, cache /root/dsv4-gpu/jit, 16 compile processes
[warm  273.7s] engine ready in 273.6s (weights 8.3s, engine_init 106.2s, jit_warmup 12.8s, cuda_graphs 31.0s)
[warm  273.7s] pre-compiled 1105 jobs (780 fp8_gemm_nt, 325 jit_key) on 16 processes in 76.8s (0 failed, 0 not run); left to vLLM's warm-up: vllm.model_executor.warmup.jit_warmup_triton_helper:_DecoratedTritonJitKernel
[warm  327.9s] sweep 1: 426 requests answered, 0 failed (prompt words [16, 200, 1000, 4096, 8192], concurrency [1, 4, 16, 64, 128]); new kernels on disk {'deep_gemm': 20, 'triton': 6}; JIT monitor lines 1
[warm  355.2s] sweep 2: 426 requests answered, 0 failed (prompt words [16, 200, 1000, 4096, 8192], concurrency [1, 4, 16, 64, 128]); new kernels on disk {'deep_gemm': 9}; JIT monitor lines 0
[warm  357.1s] manifest /root/dsv4-gpu/jit/manifest.json: key 154fadf042c45437, 631 kernels (deep_gemm 165, triton 383, tilelang 80, cuda 3; 631 new), 104 MiB
[warm  360.4s] exported /root/dsv4-gpu/cold-start/dsv4-jit-154fadf042c45437.tar.gz (19 MiB)
"""  # noqa: E501
IMPORT_LOG = (
    "[warm    4.1s] imported dsv4-jit-154fadf042c45437.tar.gz into /root/dsv4-gpu/jit-imported\n"
)
ENGINE_LOG = (
    "(EngineCore pid=1) INFO 12-07 15:32:58 [parallel_jit_warmup.py:88] [dsv4-jit] pre-compile "
    "skipped: these 1105 jobs were compiled into this cache already\n"
    "(APIServer pid=2) INFO 12-07 15:33:43 [entry.py:139] Starting vLLM server on http://x:1\n"
)


def _level(c: int, rounds: list[float], p90: float, length: float) -> dict:
    return {
        "concurrency": c,
        "round_tokens_per_s": rounds,
        "ttft_s": {"p90": p90},
        "round_jit_compiles": [0, 0],
        "round_cache_kernels_added": [{}, {}],
        "spec_decode": {"acceptance_length": length},
    }


def _run_folder(root: Path) -> Path:
    out = root / "cold-start"
    engine = out / "imported-k2"
    (engine / "logs").mkdir(parents=True)
    (out / "warm.log").write_text(WARM_LOG)
    (out / "import.log").write_text(IMPORT_LOG)
    (out / "gpu.txt").write_text("NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB\n")
    (out / "compiled-during-traffic.txt").write_text(
        "./triton/B7P7/_fused_kv_compress_norm_rope_insert_indexer_attn.cubin\n"
        "./triton/B7P7/_fused_kv_compress_norm_rope_insert_indexer_attn.json\n"
    )
    (engine / "logs" / "vllm-k2.log").write_text(ENGINE_LOG)
    bench = {
        "targets": ["vllm-k2"],
        "ready_seconds": {"vllm-k2": 79.52741760000004},
        "start_stages_seconds": {
            "vllm-k2": {"weights": 8.5, "engine_init": 27.1, "jit_warmup": 6.5, "cuda_graphs": 12.0}
        },
        "levels": [
            _level(8, [1189.6, 1221.3], 0.1077, 2.0313),
            _level(64, [3522.7, 3297.8], 0.7912, 2.0021),
        ],
        "client_machine": {
            "cpus": 16,
            "gpu": {"cuda": "13.0"},
            "software": {"vllm": "0.34.0", "torch": "2.14.0+cu130"},
        },
    }
    (engine / "bench.json").write_text(json.dumps(bench))
    return out


def test_the_run_s_own_lines_give_back_the_committed_record(tmp_path):
    committed = json.loads((ROOT / "docs/bench-cold-start/h100-ledger.json").read_text())
    record = build(_run_folder(tmp_path), "533da80", "2026-12-07", "what", "command")
    for key in ("total_s", "engine_ready_s", "stages_s", "sweeps", "cache", "archive_mib"):
        assert record["warm"][key] == committed["warm"][key], key
    pool, was = record["warm"]["precompile"], committed["warm"]["precompile"]
    assert (pool["jobs"], pool["processes"], pool["seconds"]) == (1105, 16, was["seconds"])
    assert pool["by_kind"] == {"fp8_gemm_nt": was["deep_gemm_fp8_gemm_nt_jobs"], "jit_key": 325}
    assert record["import_s"] == committed["import_s"]
    engine, was_engine = record["imported_engine"], committed["imported_engine"]
    for key in ("ready_s", "precompile", "rounds_tok_per_s", "acceptance_length"):
        assert engine[key] == was_engine[key], key
    assert engine["ttft_p90_s_both_rounds"] == was_engine["ttft_p90_s_both_rounds"]
    assert record["kernels_added_after_import"] == was_engine["kernels_compiled_at_start"]
    assert engine["kernels_compiled_during_traffic"] == {}
    assert record["gpu"] == committed["gpu"]
    assert "default_start" not in record  # the run had no default-start arm
    # The engine's log placed by its ready time: served at 79.5 s, its pool line 45 s before.
    assert engine["timeline_s"]["serving"] == 79.5
    assert engine["timeline_s"]["precompile_ended"] == 34.5


def test_a_default_start_arm_is_summarised_beside_the_imported_engines(tmp_path):
    out = _run_folder(tmp_path)
    default = out / "default-k2"
    (default / "logs").mkdir(parents=True)
    (default / "logs" / "vllm-k2.log").write_text("(EngineCore pid=1) INFO no pool\n")
    bench = json.loads((out / "imported-k2" / "bench.json").read_text())
    bench["ready_seconds"]["vllm-k2"] = 612.34
    bench["levels"] = [_level(8, [412.0], 9.31, 2.0)]
    bench["levels"][0]["round_cache_kernels_added"] = [{"deep_gemm": 31}]
    (default / "bench.json").write_text(json.dumps(bench))
    record = build(out, "c", "d", "w", "m")
    started = record["default_start"]
    assert (started["ready_s"], started["precompile"]) == (612.3, "not logged")
    assert started["rounds_tok_per_s"] == {"c8": [412.0]}
    assert started["kernels_compiled_during_traffic"] == {"deep_gemm": 31}
    assert record["imported_engine"]["ready_s"] == 79.5
    # A start that never became ready is said, not dropped.
    error = {"vllm-k2": "vllm-k2 not ready after 1400 s"}
    (default / "bench.json").write_text(json.dumps(bench | {"targets": [], "start_errors": error}))
    assert build(out, "c", "d", "w", "m")["default_start"] == {"not_ready": error}


def test_a_run_that_did_not_finish_is_refused_naming_what_is_missing(tmp_path, capsys):
    out = _run_folder(tmp_path)
    (out / "warm.log").write_text(WARM_LOG.split("[warm  357.1s]")[0])  # stopped in the sweeps
    with pytest.raises(RecordError, match="warm.log: no line matches"):
        build(out, "c", "d", "w", "m")
    assert main([str(out), "--commit", "c", "--date", "d"]) == 2
    assert "cold_start_record: " in capsys.readouterr().err
