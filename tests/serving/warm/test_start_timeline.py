"""An engine's start placed from its own log and its cache's file times: the lines of the
12-layer engine the H100 run started from an imported cache (commit 7a658ad), ready 120.0 s
after its launch."""

from pathlib import Path

import pytest

from serving.warm.start_timeline import kernel_file_times, milestones, since_launch

LOG = """\
W1207 15:31:49.585000 6822 torch/_opaque_base.py:6] torch._opaque_base is deprecated
/tmp/site/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: deprecated
(APIServer pid=6822) INFO 12-07 15:32:14 [startup.py:38] version 0.34.0
(APIServer pid=6822) INFO 12-07 15:32:16 [numa_utils.py:575] Automatic NUMA binding unavailable
(EngineCore pid=6927) INFO 12-07 15:32:44 [registry.py:155] [dsv4-overrides] cpu-kernel-library: not applicable
(EngineCore pid=6927) INFO 12-07 15:32:58 [model_runner.py:441] Model loading took 46.07 GiB memory and 11.9 seconds
(EngineCore pid=6927) INFO 12-07 15:32:58 [parallel_jit_warmup.py:98] [dsv4-jit] pre-compile skipped: these 1157 jobs were compiled into this cache already
(EngineCore pid=6927) INFO 12-07 15:33:01 [kernel_warmup.py:294] JIT kernel warmup starting.
(EngineCore pid=6927) INFO 12-07 15:33:13 [kernel_warmup.py:304] JIT kernel warmup finished in 11.30s.
(EngineCore pid=6927) INFO 12-07 15:33:23 [breakable_cudagraph.py:302] Breakable CUDA graph enabled
(EngineCore pid=6927) INFO 12-07 15:33:42 [core.py:458] init engine (profile, create kv cache, warmup model) took 43.54 s
(APIServer pid=6822) INFO 12-07 15:33:43 [entry.py:139] Starting vLLM server on http://127.0.0.1:36411
(EngineCore pid=6927) INFO 12-07 15:33:50 [core.py:458] init engine (profile, a later line) took 1 s
"""  # noqa: E501


def test_each_milestone_is_placed_after_the_launch_by_the_ready_time():
    timeline = since_launch(milestones(LOG, 2026), ready_s=120.0)
    assert timeline == {
        "first_line": 6.6,  # torch imported in the API server
        "api_server_first_line": 31.0,
        "engine_core_first_line": 61.0,
        "weights_loaded": 75.0,
        "precompile_ended": 75.0,
        "jit_warmup_started": 78.0,
        "jit_warmup_ended": 90.0,
        "cuda_graphs_started": 100.0,
        "engine_init_ended": 119.0,  # the first such line, not the later one
        "serving": 120.0,
    }


def test_a_log_that_never_served_is_refused():
    unserved = LOG.split("(APIServer pid=6822) INFO 12-07 15:33:43")[0]
    with pytest.raises(ValueError, match="never served"):
        since_launch(milestones(unserved, 2026), 120.0)


def test_kernel_files_are_timed_per_tool_without_the_pool_s_own_files(tmp_path: Path):
    weights = milestones(LOG, 2026)["weights_loaded"]
    listing = tmp_path / "files-after-warm.txt"
    listing.write_text(
        f"{weights - 30} 20 warm-model/config.json\n"  # before the weights: not counted
        f"{weights + 1} 0 tilelang/.dsv4-jit-pool.lock\n"
        f"{weights + 20} 9 deep_gemm/a/kernel.cubin\n"
        f"{weights + 40} 9 deep_gemm/b/kernel.cubin\n"
        f"{weights + 90} 9 deep_gemm/c/kernel.cubin\n"
        f"{weights + 120} 9 tilelang/k/kernel_lib.so\n"
        f"{weights + 133} 99 tilelang/dsv4-jit-pool-compiled.txt\n"
    )
    assert kernel_file_times(listing, weights) == {
        "deep_gemm": {"first_s": 20.0, "median_s": 40.0, "last_s": 90.0, "files": 3},
        "tilelang": {"first_s": 120.0, "median_s": 120.0, "last_s": 120.0, "files": 1},
    }
