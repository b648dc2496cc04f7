"""vLLM's own OpenAI server on the golden model with MTP at the golden preset's k, as
`make serve` runs it: one per test module that needs it."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from serving.config.vllm_args import to_cli_args
from serving.golden.golden_engine import DEFAULT_SPEC_K, golden_engine_kwargs, mtp_config
from serving.local.processes import free_port
from tests.support.golden_prompts import engine_env
from tests.support.server_process import PYTHON, running_server


@contextmanager
def golden_vllm_server(model_dir: Path, log_dir: Path) -> Iterator[str]:
    """The server's base URL (http://127.0.0.1:PORT) while it runs; its log in log_dir."""
    port = free_port()
    cmd = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    cmd += to_cli_args(
        golden_engine_kwargs(model_dir, speculative_config=mtp_config(DEFAULT_SPEC_K))
    )
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with running_server(cmd, f"{base}/health", log_dir / "server.log", engine_env()):
        yield base
