"""Keys with roles against the route table, through the whole gateway stack
(``wrap_app``) around a small FastAPI app whose paths are the table's: inference keys
reach inference routes only, control routes need an admin key (off without one), the
served schema lists what a key reaches, and unknown routes are denied."""

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import generate_latest

from serving.gateway import metrics
from serving.gateway.keys import KeyRing, KeySource, Role, key_id
from serving.gateway.stack import GatewayOptions, wrap_app

INFERENCE_KEY, ADMIN_KEY = "inference-key-0123", "admin-key-0123"


def _app(features: frozenset[str] = frozenset()) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        await request.json()
        return {"choices": [{"text": "ok"}], "usage": {"total_tokens": 3}}

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": "m"}]}

    @app.get("/health")
    async def health():
        return {}

    @app.get("/load")
    async def load():
        return {"server_load": 0}

    @app.post("/scale_elastic_ep")
    async def scale():  # what vLLM answers without elastic EP
        return JSONResponse({"error": "Scale failed"}, status_code=500)

    @app.post("/v1/systemone")
    async def systemone():
        return {}

    @app.post("/brand_new_route")  # what a later vLLM might add
    async def brand_new():
        return {}

    wrap_app(app, models=["m"], options=GatewayOptions(), features=features)
    return app


def call(app: FastAPI, method: str, path: str, key: str | None = None, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return await client.request(method, path, headers=headers, **kw)

    return asyncio.run(run())


BODY = {"json": {"model": "m", "prompt": "x", "max_tokens": 2}}


@pytest.fixture
def both_kinds(monkeypatch):
    monkeypatch.setenv("DSV4_API_KEYS", INFERENCE_KEY)
    monkeypatch.setenv("DSV4_ADMIN_KEYS", ADMIN_KEY)
    monkeypatch.delenv("DSV4_API_KEYS_FILE", raising=False)
    monkeypatch.delenv("DSV4_ADMIN_KEYS_FILE", raising=False)


def test_inference_keys_reach_inference_routes_only(both_kinds):
    app = _app()
    assert call(app, "POST", "/v1/completions", INFERENCE_KEY, **BODY).status_code == 200
    assert call(app, "GET", "/v1/models", INFERENCE_KEY).status_code == 200
    load = call(app, "GET", "/load", INFERENCE_KEY)
    assert load.status_code == 403
    assert load.json()["error"] == {
        "message": "/load is a control route: it needs an admin key",
        "type": "permission_error",
        "param": None,
        "code": "admin_key_required",
    }


def test_admin_keys_reach_control_and_inference_routes(both_kinds):
    app = _app()
    assert call(app, "GET", "/load", ADMIN_KEY).json() == {"server_load": 0}
    assert call(app, "POST", "/v1/completions", ADMIN_KEY, **BODY).status_code == 200


def test_without_a_key_only_probes_answer(both_kinds):
    app = _app()
    assert call(app, "GET", "/health").status_code == 200
    for method, path in [("POST", "/v1/completions"), ("GET", "/load"), ("GET", "/nope")]:
        out = call(app, method, path)
        assert out.status_code == 401 and out.json()["error"]["code"] == "missing_api_key"


@pytest.mark.parametrize("key", [INFERENCE_KEY, ADMIN_KEY])
def test_off_and_unlisted_routes_are_404_for_every_key(both_kinds, key: str):
    app = _app()
    off = call(app, "POST", "/v1/systemone", key)
    assert off.status_code == 404 and off.json()["error"]["code"] == "route_off"
    unlisted = call(app, "POST", "/brand_new_route", key)
    assert unlisted.status_code == 404
    assert unlisted.json()["error"]["code"] == "route_not_served"


def test_elastic_ep_scaling_is_off_unless_the_engine_enables_it(both_kinds):
    # The issue: vLLM answered an inference key's scale request with 500 "Scale failed".
    assert call(_app(), "POST", "/scale_elastic_ep", INFERENCE_KEY).status_code == 404
    off = call(_app(), "POST", "/scale_elastic_ep", ADMIN_KEY, json={"new_data_parallel_size": 2})
    assert off.status_code == 404 and "enable_elastic_ep" in off.json()["error"]["message"]
    on = _app(features=frozenset({"enable_elastic_ep"}))
    assert call(on, "POST", "/scale_elastic_ep", INFERENCE_KEY).status_code == 403
    assert call(on, "POST", "/scale_elastic_ep", ADMIN_KEY).status_code == 500  # vLLM's, reached


def test_control_routes_are_off_while_no_admin_key_is_configured(monkeypatch):
    monkeypatch.setenv("DSV4_API_KEYS", INFERENCE_KEY)
    for name in ("DSV4_ADMIN_KEYS", "DSV4_ADMIN_KEYS_FILE", "DSV4_API_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    out = call(_app(), "GET", "/load", INFERENCE_KEY)
    assert out.status_code == 404 and out.json()["error"]["code"] == "admin_routes_off"


def test_auth_off_serves_inference_but_never_control(monkeypatch):
    for name in ("DSV4_API_KEYS", "DSV4_ADMIN_KEYS", "DSV4_API_KEYS_FILE", "DSV4_ADMIN_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = _app()
    assert call(app, "POST", "/v1/completions", **BODY).status_code == 200
    assert call(app, "GET", "/load").status_code == 404


def test_admin_key_file_rotates_like_the_inference_keys(monkeypatch, tmp_path: Path):
    admin_file = tmp_path / "admin-keys"
    admin_file.write_text("old-admin\n")
    monkeypatch.setenv("DSV4_API_KEYS", INFERENCE_KEY)
    monkeypatch.setenv("DSV4_ADMIN_KEYS_FILE", str(admin_file))
    monkeypatch.delenv("DSV4_ADMIN_KEYS", raising=False)
    app = _app()
    assert call(app, "GET", "/load", "old-admin").status_code == 200
    admin_file.write_text("# rotated\nnew-admin\n")
    os.utime(admin_file, (time.time() + 5, time.time() + 5))
    assert call(app, "GET", "/load", "new-admin").status_code == 200
    assert call(app, "GET", "/load", "old-admin").status_code == 401


def test_a_missing_admin_key_file_closes_control_routes_only(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DSV4_API_KEYS", INFERENCE_KEY)
    monkeypatch.setenv("DSV4_ADMIN_KEYS_FILE", str(tmp_path / "absent"))
    monkeypatch.delenv("DSV4_ADMIN_KEYS", raising=False)
    app = _app()
    assert call(app, "POST", "/v1/completions", INFERENCE_KEY, **BODY).status_code == 200
    assert call(app, "GET", "/load", INFERENCE_KEY).status_code == 403
    refused = call(app, "GET", "/load", "a-guess")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def test_no_key_at_all_on_the_server_fails_closed(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DSV4_API_KEYS_FILE", str(tmp_path / "absent"))
    for name in ("DSV4_API_KEYS", "DSV4_ADMIN_KEYS", "DSV4_ADMIN_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = _app()
    refused = call(app, "POST", "/v1/completions", "any", **BODY)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "no_server_keys"
    assert call(app, "GET", "/health").status_code == 200


def test_the_served_schema_lists_what_the_key_reaches(both_kinds):
    app = _app(features=frozenset({"enable_elastic_ep"}))
    inference = set(call(app, "GET", "/openapi.json", INFERENCE_KEY).json()["paths"])
    admin = set(call(app, "GET", "/openapi.json", ADMIN_KEY).json()["paths"])
    assert inference == {"/v1/completions", "/v1/models", "/health"}
    assert admin == inference | {"/load", "/scale_elastic_ep"}
    assert call(app, "GET", "/openapi.json").status_code == 401


def test_per_key_counters_name_keys_by_hash_only(both_kinds):
    app = _app()
    kid = key_id(INFERENCE_KEY.encode())
    labels = {"key_id": kid, "route_class": "control", "status": "403"}
    before = metrics.REGISTRY.get_sample_value("dsv4_gateway_key_requests_total", labels) or 0
    call(app, "GET", "/load", INFERENCE_KEY)
    call(app, "POST", "/v1/completions", INFERENCE_KEY, **BODY)
    after = metrics.REGISTRY.get_sample_value("dsv4_gateway_key_requests_total", labels)
    assert after == before + 1
    ok = {"key_id": kid, "route_class": "inference", "status": "200"}
    assert metrics.REGISTRY.get_sample_value("dsv4_gateway_key_requests_total", ok) >= 1
    page = generate_latest(metrics.REGISTRY).decode()
    assert INFERENCE_KEY not in page and ADMIN_KEY not in page and kid in page


def test_a_key_listed_as_both_kinds_is_an_admin_key():
    ring = KeyRing(env={"DSV4_API_KEYS": "k1,both", "DSV4_ADMIN_KEYS": "both"})
    assert ring.identify(b"both").role is Role.ADMIN
    assert ring.identify(b"k1").role is Role.INFERENCE
    assert ring.identify(b"") is None and ring.identify(b"k") is None
    assert ring.identify(b"k1").key_id == key_id(b"k1") != "k1"


def test_a_key_file_reads_comments_and_line_ends_as_people_write_them(tmp_path: Path, caplog):
    key_file = tmp_path / "keys"
    text = (
        "# inference keys\r\n"
        "   # old-key, retired\r\n"
        "\t#tabbed-comment\n"
        "\n"
        "   \r\n"
        "alpha\r\n"
        "  beta  \n"
        "gamma   # the batch team\n"
        "delta\t# tab before the comment\n"
        "eps#ilon\n"  # no whitespace before '#': part of the key
        "two words\n"
        "zeta"  # no final newline
    )
    key_file.write_bytes(b"\xef\xbb\xbf" + text.encode())  # saved with a byte-order mark
    source = KeySource(env={"DSV4_API_KEYS_FILE": str(key_file)})
    with caplog.at_level("ERROR", logger="dsv4.gateway.auth"):
        keys = source.keys()
    assert keys == [b"alpha", b"beta", b"gamma", b"delta", b"eps#ilon", b"zeta"]
    assert "line 11 holds whitespace inside a key" in caplog.text
    assert "two" not in caplog.text and "words" not in caplog.text  # a key is never logged
    ring = KeyRing(env={"DSV4_API_KEYS_FILE": str(key_file)})
    assert ring.identify(b"# old-key, retired") is None and ring.identify(b"old-key,") is None
    assert ring.identify(b"gamma").role is Role.INFERENCE
