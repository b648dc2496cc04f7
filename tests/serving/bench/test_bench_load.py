"""What a bench level sends: vLLM's own benchmark request function, pointed at a server that
keeps each body, carries the plan's sampling temperature and fixed output length."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from serving.bench.load import Target, run_level


class _Keeper(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_level_sends_the_plans_temperature(temperature):
    _Keeper.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Keeper)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = Target("t", f"http://127.0.0.1:{server.server_port}/v1", "m")
        asyncio.run(run_level(target, ["neti", "sinu"], 2, 5, False, temperature))
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Keeper.bodies) == 2
    for body in _Keeper.bodies:
        assert body["temperature"] == temperature
        assert body["max_tokens"] == 5 and body["ignore_eos"] is True
