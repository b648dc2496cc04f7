"""The gateway's ASGI middleware on a small Starlette app (no Ray): auth, metrics,
admission and the answers to failures."""

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from serving.gateway import metrics
from serving.gateway.admission import Admission, EngineLiveness, ray_limits
from serving.gateway.auth import ApiKeyAuth, KeySource, key_matches
from serving.gateway.failures import FailureAnswers
from serving.gateway.input_middleware import InputCheckMiddleware
from serving.gateway.input_policy import check


async def _completions(request):
    body = await request.json()
    if body.get("stream"):

        async def chunks():
            for word in ("a", "b", "c"):
                await asyncio.sleep(0.01)
                yield f"data: {word}\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")
    if body.get("prompt") == "overload":
        return JSONResponse({"error": "busy"}, status_code=503)
    return JSONResponse({"ok": True})


async def _health(request):
    return JSONResponse({"ok": True})


def _app(source: KeySource) -> Starlette:
    app = Starlette(
        routes=[Route("/v1/completions", _completions, methods=["POST"]), Route("/health", _health)]
    )
    app.add_middleware(InputCheckMiddleware)
    app.add_middleware(ApiKeyAuth, source=source)
    app.add_middleware(metrics.GatewayMetrics, models=["gw-model", "m"])
    return app


class _SyncASGI(httpx.BaseTransport):
    def __init__(self, app):
        self._transport = httpx.ASGITransport(app=app)

    def handle_request(self, request):
        async def run():
            response = await self._transport.handle_async_request(request)
            content = b"".join([chunk async for chunk in response.stream])
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        return asyncio.run(run())


def client_for(source: KeySource) -> httpx.Client:
    return httpx.Client(transport=_SyncASGI(_app(source)), base_url="http://gw")


def test_no_keys_means_auth_off():
    with client_for(KeySource(env={})) as c:
        assert c.post("/v1/completions", json={"model": "m", "prompt": "x"}).status_code == 200


def test_keys_are_required_and_checked():
    with client_for(KeySource(env={"DSV4_API_KEYS": "k1, k2"})) as c:
        missing = c.post("/v1/completions", json={"model": "m", "prompt": "x"})
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "missing_api_key"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = c.post(
            "/v1/completions",
            json={"model": "m", "prompt": "x"},
            headers={"Authorization": "Bearer nope"},
        )
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        basic = c.post("/v1/completions", json={}, headers={"Authorization": "Basic azE="})
        assert basic.status_code == 401
        for key in ("k1", "k2"):
            ok = c.post(
                "/v1/completions",
                json={"model": "m", "prompt": "x"},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert ok.status_code == 200
        assert c.get("/health").status_code == 200  # probes stay open


def test_key_file_is_reread_when_rotated(tmp_path: Path):
    key_file = tmp_path / "keys"
    key_file.write_text("# comment\nold\n")
    source = KeySource(env={"DSV4_API_KEYS_FILE": str(key_file)})
    assert source.keys() == [b"old"]
    key_file.write_text("new\n")
    os.utime(key_file, (time.time() + 5, time.time() + 5))
    assert source.keys() == [b"new"]
    assert "1 key(s)" in source.describe() and "new" not in source.describe()


def test_a_configured_but_missing_key_file_fails_closed(tmp_path: Path):
    source = KeySource(env={"DSV4_API_KEYS_FILE": str(tmp_path / "absent")})
    assert source.configured() and not source.keys()
    with client_for(source) as c:
        refused = c.post(
            "/v1/completions",
            json={"model": "m", "prompt": "x"},
            headers={"Authorization": "Bearer x"},
        )
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "no_server_keys"
        assert c.get("/health").status_code == 200


def test_key_matching_compares_every_key(monkeypatch):
    """Constant time in the key file: a match on the first key still compares the rest,
    each with hmac's constant-time compare (no early exit tells a key's position)."""
    import hmac

    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    keys = [b"alpha", b"beta", b"gamma"]
    for presented, matches in ((b"alpha", True), (b"gamma", True), (b"delta", False)):
        compared.clear()
        assert key_matches(presented, keys) is matches, presented
        assert compared == keys, presented
    assert not key_matches(b"", keys)


def _sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_metrics_count_requests_latency_streams_and_rejections():
    route, model = "/v1/completions", "gw-model"
    names = {
        "ok": ("dsv4_gateway_requests_total", model, "200"),
        "e2e": ("dsv4_gateway_request_duration_seconds_count", model, None),
        "itl": ("dsv4_gateway_inter_token_latency_seconds_count", model, None),
        "rej": ("dsv4_gateway_rejected_total", model, "503"),
        # A refused request is never read: its model is unknown ("none").
        "401": ("dsv4_gateway_requests_total", "none", "401"),
    }

    def now() -> dict[str, float]:
        out = {}
        for key, (name, served, status) in names.items():
            labels = {"route": route, "model_name": served}
            out[key] = _sample(name, **labels, **({"status": status} if status else {}))
        return out

    before = now()
    with client_for(KeySource(env={"DSV4_API_KEYS": "k"})) as c:
        auth = {"Authorization": "Bearer k"}
        c.post(route, json={"model": model, "prompt": "x"}, headers=auth)
        c.post(route, json={"model": model, "prompt": "x", "stream": True}, headers=auth)
        c.post(route, json={"model": model, "prompt": "overload"}, headers=auth)
        c.post(route, json={"model": model, "prompt": "x"})  # no key
    after = now()
    added = {key: after[key] - before[key] for key in names}
    assert added == {"ok": 2, "e2e": 2, "itl": 2, "rej": 1, "401": 1}
    assert _sample("dsv4_gateway_requests_in_flight", route=route) == 0


@pytest.mark.parametrize(
    "body,expected",
    [
        (b'{"model": "x", "prompt": "p"}', "x"),
        (b'{"model": "not-served", "prompt": "p"}', "unknown"),
        (b'{"prompt": "p"}', "unknown"),
        (None, "none"),  # no body read: refused before, or a route without one
    ],
)
def test_model_label_comes_from_the_checked_body_and_only_names_served_models(body, expected):
    checked = check("/v1/completions", body) if body is not None else None
    assert metrics.model_label(checked, frozenset({"x"})) == expected


@pytest.mark.parametrize(
    "path,label",
    [
        ("/v1/completions", "/v1/completions"),
        ("/v1/models/abc", "/v1/models/{model}"),
        ("/v1/zz/1/2", "other"),
    ],
)
def test_route_labels_come_from_a_fixed_set(path: str, label: str):
    assert metrics.route_label(path) == label


# -- admission limits and failures after acceptance (direct path) ----------------------


def _slow_app(release: asyncio.Event, entered: list):
    async def completions(request):
        entered.append(1)
        await release.wait()
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    app.add_middleware(Admission, max_ongoing=2, max_queued=1)
    return app


def test_admission_runs_two_queues_one_and_rejects_the_rest_as_openai_503():
    async def run():
        release, entered = asyncio.Event(), []
        transport = httpx.ASGITransport(app=_slow_app(release, entered))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            tasks = [asyncio.create_task(client.post("/v1/completions", json={})) for _ in range(5)]
            await asyncio.sleep(0.2)
            running = len(entered)
            release.set()
            return running, await asyncio.gather(*tasks)

    running, responses = asyncio.run(run())
    assert running == 2  # the third waited for a slot
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 200, 503, 503]
    rejected = next(r for r in responses if r.status_code == 503)
    assert rejected.headers["retry-after"] == "2"
    assert rejected.json()["error"]["code"] == 503 and "busy" in rejected.json()["error"]["message"]


def test_ray_limits_never_bind_before_the_gateway():
    limits = ray_limits(4, 4)
    assert limits["max_ongoing_requests"] > 4 + 4 and limits["max_queued_requests"] == -1


def _failing_app(fail_after_chunks: int | None):
    async def completions(request):
        if fail_after_chunks is None:
            raise RuntimeError("engine gone")

        async def chunks():
            for i in range(fail_after_chunks):
                yield f"data: {i}\n\n"
            raise RuntimeError("engine gone")

        return StreamingResponse(chunks(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    app.add_middleware(FailureAnswers)
    return app


def test_a_stream_cut_by_a_failure_ends_in_an_error_event():
    client = httpx.Client(transport=_SyncASGI(_failing_app(2)), base_url="http://gw")
    response = client.post("/v1/completions", json={"stream": True})
    events = [line for line in response.text.split("\n\n") if line]
    assert events[:2] == ["data: 0", "data: 1"]
    assert '"error"' in events[2] and "RuntimeError" in events[2]
    assert events[-1] == "data: [DONE]"


def test_a_failure_before_answering_is_a_json_500():
    client = httpx.Client(transport=_SyncASGI(_failing_app(None)), base_url="http://gw")
    response = client.post("/v1/completions", json={})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal_server_error"


def test_a_replica_whose_engine_died_holds_new_requests_and_ends_itself():
    async def dead() -> bool:
        return False

    async def completions(request):
        raise AssertionError("must not reach the engine")

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    ended = []
    liveness = EngineLiveness(dead, on_dead=lambda: ended.append(1), hold_s=0.2)
    app.add_middleware(Admission, max_ongoing=2, max_queued=1, liveness=liveness)
    client = httpx.Client(transport=_SyncASGI(app), base_url="http://gw")
    t0 = time.monotonic()
    response = client.post("/v1/completions", json={})
    # Held unanswered (the replica ends meanwhile); if it did not, a 503 in the end.
    assert time.monotonic() - t0 >= 0.2 and ended == [1]
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert "engine stopped" in response.json()["error"]["message"]


def test_the_gateway_names_the_model_as_vllm_and_the_rules_do():
    from serving.gateway import metrics

    per_request = (metrics.REQUESTS, metrics.REJECTED, metrics.TTFT, metrics.ITL, metrics.E2E)
    for family in (*per_request, metrics.THRESHOLDS):
        labels = family._labelnames  # prometheus-client keeps no public accessor
        assert "model_name" in labels and "model" not in labels, (family, labels)


def _layers(app) -> list[str]:
    """The middleware stack Starlette builds, outermost first."""
    names, layer = [], app.build_middleware_stack()
    while hasattr(layer, "app"):
        names.append(type(layer).__name__)
        layer = layer.app
    return names


def test_whatever_a_layer_raises_answers_json_from_the_outermost_layer(monkeypatch):
    from fastapi import FastAPI

    from serving.gateway.replica_header import HEADER
    from serving.gateway.stack import GatewayOptions, wrap_app

    for name in ("DSV4_API_KEYS", "DSV4_ADMIN_KEYS", "DSV4_API_KEYS_FILE", "DSV4_ADMIN_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        raise RecursionError("maximum recursion depth exceeded")

    wrap_app(app, models=["m"], options=GatewayOptions(), replica_id="r-1")
    layers = _layers(app)
    # Starlette's own error layer is always first; ours comes next, above every gateway layer.
    assert layers[:4] == [
        "ServerErrorMiddleware",
        "FailureAnswers",
        "ReplicaHeader",
        "GatewayMetrics",
    ]
    labels = {"route": "/v1/completions", "model_name": "m", "status": "500"}
    before = _sample("dsv4_gateway_requests_total", **labels)
    client = httpx.Client(transport=_SyncASGI(app), base_url="http://gw")
    answer = client.post("/v1/completions", json={"model": "m", "prompt": "x"})
    assert answer.status_code == 500 and answer.headers[HEADER.decode()] == "r-1"
    assert answer.json()["error"]["message"].endswith("RecursionError")
    assert _sample("dsv4_gateway_requests_total", **labels) == before + 1  # not lost


def test_an_unreadable_replica_id_drops_the_header_and_says_why(monkeypatch):
    """Outside a replica there is no id (tests building the app alone); inside one whose
    context lacks the id (a Ray that moved it), the header goes off with a warning."""
    import logging

    from ray import serve

    from serving.gateway.replica_header import this_replica

    assert this_replica() == ""  # Ray's own answer outside a replica: an exception
    monkeypatch.setattr(serve, "get_replica_context", lambda: object())
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log = logging.getLogger("ray.serve.dsv4")  # Ray's loggers do not propagate to caplog
    handler = Keep(logging.WARNING)
    log.addHandler(handler)
    try:
        assert this_replica() == ""
    finally:
        log.removeHandler(handler)
    assert any("x-dsv4-replica is off: the replica id is unreadable" in m for m in seen)


def test_each_served_presets_speculation_is_published_with_its_draft_sampling():
    from serving.config.preset import Speculation, load_preset

    drafting = Speculation(
        method="mtp", num_speculative_tokens=2, draft_sample_method="probabilistic"
    )
    served = {
        "unit-mtp": drafting.info_labels(),
        "unit-tiny": load_preset("cpu-tiny").speculation.info_labels(),
    }
    metrics.publish_served_models({"unit-mtp": {"acceptance_floor": 0.4}}, served)
    info = "dsv4_speculation_info"
    assert _sample(info, model_name="unit-mtp", **served["unit-mtp"]) == 1
    assert served["unit-mtp"]["draft_sample_method"] == "probabilistic"
    # A preset that leaves draft sampling unset gets vLLM's default, said as such.
    assert served["unit-tiny"]["draft_sample_method"] == "greedy"
    assert _sample(info, model_name="unit-tiny", **served["unit-tiny"]) == 1
    assert _sample("dsv4_monitoring_threshold", model_name="unit-mtp", threshold="acceptance_floor")
