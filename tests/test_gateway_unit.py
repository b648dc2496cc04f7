"""The gateway's ASGI middleware on a small Starlette app (no Ray): auth and metrics."""

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from serving.gateway import metrics
from serving.gateway.auth import ApiKeyAuth, KeySource, key_matches


async def _completions(request):
    body = await request.json()
    if body.get("stream"):

        async def chunks():
            for word in ("a", "b", "c"):
                await asyncio.sleep(0.01)
                yield f"data: {word}\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")
    if body.get("overload"):
        return JSONResponse({"error": "busy"}, status_code=503)
    return JSONResponse({"ok": True})


async def _health(request):
    return JSONResponse({"ok": True})


def _app(source: KeySource) -> Starlette:
    app = Starlette(
        routes=[Route("/v1/completions", _completions, methods=["POST"]), Route("/health", _health)]
    )
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
        assert c.post("/v1/completions", json={"model": "m"}).status_code == 200


def test_keys_are_required_and_checked():
    with client_for(KeySource(env={"DSV4_API_KEYS": "k1, k2"})) as c:
        missing = c.post("/v1/completions", json={"model": "m"})
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "missing_api_key"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = c.post(
            "/v1/completions", json={"model": "m"}, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        basic = c.post("/v1/completions", json={}, headers={"Authorization": "Basic azE="})
        assert basic.status_code == 401
        for key in ("k1", "k2"):
            ok = c.post(
                "/v1/completions", json={"model": "m"}, headers={"Authorization": f"Bearer {key}"}
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
            "/v1/completions", json={"model": "m"}, headers={"Authorization": "Bearer x"}
        )
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "no_server_keys"
        assert c.get("/health").status_code == 200


def test_key_matching_compares_every_key():
    keys = [b"alpha", b"beta"]
    assert (
        key_matches(b"beta", keys)
        and not key_matches(b"gamma", keys)
        and not key_matches(b"", keys)
    )


def _sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_metrics_count_requests_latency_streams_and_rejections():
    route, model = "/v1/completions", "gw-model"
    before = {
        "ok": _sample("dsv4_gateway_requests_total", route=route, model=model, status="200"),
        "e2e": _sample("dsv4_gateway_request_duration_seconds_count", route=route, model=model),
        "itl": _sample("dsv4_gateway_inter_token_latency_seconds_count", route=route, model=model),
        "rej": _sample("dsv4_gateway_rejected_total", route=route, model=model, status="503"),
        "401": _sample("dsv4_gateway_requests_total", route=route, model="none", status="401"),
    }
    with client_for(KeySource(env={"DSV4_API_KEYS": "k"})) as c:
        auth = {"Authorization": "Bearer k"}
        c.post(route, json={"model": model}, headers=auth)
        c.post(route, json={"model": model, "stream": True}, headers=auth)
        c.post(route, json={"model": model, "overload": True}, headers=auth)
        c.post(route, json={"model": model})  # no key
    assert (
        _sample("dsv4_gateway_requests_total", route=route, model=model, status="200")
        == before["ok"] + 2
    )
    assert (
        _sample("dsv4_gateway_request_duration_seconds_count", route=route, model=model)
        == before["e2e"] + 2
    )
    assert (
        _sample("dsv4_gateway_inter_token_latency_seconds_count", route=route, model=model)
        == before["itl"] + 2
    )
    assert (
        _sample("dsv4_gateway_rejected_total", route=route, model=model, status="503")
        == before["rej"] + 1
    )
    # A refused request is never read: its model is unknown ("none").
    assert (
        _sample("dsv4_gateway_requests_total", route=route, model="none", status="401")
        == before["401"] + 1
    )
    assert _sample("dsv4_gateway_requests_in_flight", route=route) == 0


@pytest.mark.parametrize(
    "body,expected",
    [
        (b'{"model": "x"}', "x"),
        (b'{"model": "not-served"}', "unknown"),
        (b"not json", "unknown"),
        (b"[1]", "unknown"),
    ],
)
def test_model_label_comes_from_the_body_and_only_names_served_models(body: bytes, expected: str):
    assert metrics._model_of(body, frozenset({"x"})) == expected


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
