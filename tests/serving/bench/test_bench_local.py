"""Starting local targets: ready times, stages from the log, a failed start recorded with
its log tail while the others go on, and a clean stop. The targets are stand-in HTTP
servers that log like vLLM (an engine would take minutes and both CPU cores)."""

import os
import sys
import time

import pytest

from serving.bench import local
from serving.bench.targets import LocalSpec, free_ports

# Answers the bench's readiness probe after a delay, logging vLLM's start-up lines.
STAND_IN = """
import http.server, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
print("Model loading took 0.24 GiB memory and 0.10 seconds", flush=True)
time.sleep(delay)
print("init engine (profile, create kv cache, warmup model) took 0.50 s", flush=True)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
FAILS = "import sys; print('CUDA out of memory', flush=True); sys.exit(3)"


def _spec(kind: str, port: int, code: str, *args: str) -> LocalSpec:
    return LocalSpec(
        kind=kind,
        command=[sys.executable, "-c", code, str(port), *args],
        env=dict(os.environ),
        port=port,
        metrics_url=f"http://127.0.0.1:{port}/metrics",
        model="m",
        ray_app=False,
        settle_period_s=0.5,
        settle_timeout_s=5,
    )


@pytest.mark.parametrize("mode", ["parallel", "serial", "staggered"])
def test_starts_record_readiness_stages_and_failures(tmp_path, mode):
    a, b, c = free_ports(3)
    specs = [
        _spec("slow", a, STAND_IN, "1.5"),
        _spec("broken", b, FAILS),
        _spec("fast", c, STAND_IN, "0"),
    ]
    started = time.monotonic()
    servers, errors = local.start_all(specs, tmp_path, lambda _: None, mode=mode)
    took = time.monotonic() - started
    try:
        assert [s.spec.kind for s in servers] == ["slow", "fast"]
        slow, fast = servers
        assert slow.ready_seconds >= 1.5 and fast.ready_seconds < slow.ready_seconds
        assert slow.stages == {"weights": 0.1, "engine_init": 0.5}
        assert errors["broken"]["error"] == "broken exited with 3"
        assert "CUDA out of memory" in errors["broken"]["log_tail"]
        if mode == "parallel":  # overlapping starts: the wait is about the slowest one
            assert took < slow.ready_seconds + fast.ready_seconds + 1.0
        if mode == "staggered":  # the first alone, then the other two together
            assert fast.started >= slow.started + slow.ready_seconds
        target = fast.target
        assert target.base_url == f"http://127.0.0.1:{c}/v1" and target.settle_period_s == 0.5
    finally:
        local.stop_all([s.proc for s in servers], grace=10)
    assert all(s.proc.poll() is not None for s in servers)
    assert not any(local._group_alive(s.proc.pid) for s in servers)


def test_a_start_that_never_answers_times_out_and_is_stopped(tmp_path):
    (port,) = free_ports(1)
    spec = _spec("silent", port, "import time; time.sleep(60)")
    servers, errors = local.start_all([spec], tmp_path, lambda _: None, timeout_s=1.5)
    assert servers == [] and errors["silent"]["error"] == "silent not ready after 2 s"
