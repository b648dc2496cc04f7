"""The gateway's input checks, as a unit and as ASGI middleware in front of a
Starlette app (the live app is exercised in test_reliability)."""

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serving.gateway.request_guard import (
    MAX_N,
    MAX_STOP,
    BadRequest,
    RequestGuard,
    check_body,
    known_fields,
)

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
JSON = "application/json"
LIMIT = 1 << 16


def _check(body, route=COMPLETIONS, content_type=JSON):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    check_body(route, content_type, raw, LIMIT)


CASES = [
    (b'{"model": "m", "prompt": ', 400, "not valid JSON"),
    (b"\xff\xfe{}", 400, "not valid UTF-8"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b'{"prompt": "' + b"a" * LIMIT + b'"}', 413, "the limit is"),
    ({"model": "m", "prompt": "x", "max_token": 5}, 400, "unknown field(s) max_token"),
    ({"model": "m", "prompt": "x", "stop": ["s"] * 1000}, 400, "stop has 1000 entries"),
    ({"model": "m", "prompt": "x", "n": 1000}, 400, "n=1000 exceeds"),
    ({"model": "m", "prompt": ""}, 400, "prompt must not be empty"),
]


@pytest.mark.parametrize(("body", "status", "message"), CASES, ids=[c[2] for c in CASES])
def test_bad_bodies_are_named(body, status: int, message: str):
    with pytest.raises(BadRequest) as exc:
        _check(body)
    assert exc.value.status == status and message in str(exc.value)


def test_content_type_must_be_json():
    with pytest.raises(BadRequest, match="Content-Type must be application/json, got 'text/plain'"):
        _check({"model": "m", "prompt": "x"}, content_type="text/plain")
    _check({"model": "m", "prompt": "x"}, content_type="application/json; charset=utf-8")


@pytest.mark.parametrize("messages", [[], None, "hi", {"role": "user"}])
def test_chat_needs_a_list_of_messages(messages):
    with pytest.raises(BadRequest, match="messages must be a non-empty list of message objects"):
        _check({"model": "m", "messages": messages}, route=CHAT)


@pytest.mark.parametrize("message", [None, "hi", 3, {"content": "hi"}, {"role": 1}])
def test_each_chat_message_needs_a_role(message):
    with pytest.raises(BadRequest, match=r"messages\[1\] must be an object with a string role"):
        _check({"model": "m", "messages": [{"role": "user", "content": "a"}, message]}, route=CHAT)


def test_tool_schemas_are_checked():
    good = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    user = [{"role": "user", "content": "hi"}]
    _check({"model": "m", "messages": user, "tools": [good]}, route=CHAT)
    garbage = {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
    with pytest.raises(BadRequest, match=r"tools\[0\].function.parameters is not a valid JSON"):
        _check({"model": "m", "messages": user, "tools": [garbage]}, route=CHAT)
    with pytest.raises(BadRequest, match=r"tools\[0\] must be"):
        _check({"model": "m", "messages": user, "tools": ["nope"]}, route=CHAT)


def test_known_fields_are_vllms_and_limits_are_inclusive():
    assert {"max_tokens", "top_k", "ignore_eos", "stream_options"} <= known_fields(COMPLETIONS)
    assert {"messages", "tools", "max_completion_tokens"} <= known_fields(CHAT)
    _check({"model": "m", "prompt": "x", "n": MAX_N, "stop": ["a"] * MAX_STOP, "top_k": 5})


def test_middleware_rejects_before_the_app_and_replays_good_bodies():
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    app = Starlette(routes=[Route(COMPLETIONS, echo, methods=["POST"])])
    guarded = RequestGuard(app, max_body=LIMIT)

    async def run():
        transport = httpx.ASGITransport(app=guarded)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            ok = await client.post(COMPLETIONS, json={"model": "m", "prompt": "x"})
            bad = await client.post(COMPLETIONS, content=b"{", headers={"content-type": JSON})
            return ok, bad

    ok, bad = asyncio.run(run())
    assert ok.status_code == 200 and ok.json() == {"model": "m", "prompt": "x"}
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_json"


def test_overload_responses_get_retry_after_and_a_json_error():
    from starlette.responses import PlainTextResponse

    from serving.gateway.overload import OverloadResponses

    async def busy(request: Request):
        code = int(request.query_params["code"])
        if request.query_params.get("plain"):
            return PlainTextResponse("Request dropped due to backpressure", status_code=code)
        return JSONResponse({"error": {"message": "busy"}}, status_code=code)

    app = OverloadResponses(Starlette(routes=[Route("/x", busy)]), seconds=3)

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            paths = ["/x?code=429", "/x?code=503&plain=1", "/x?code=500", "/x?code=200"]
            return [await client.get(p) for p in paths]

    answers = asyncio.run(run())
    assert [r.headers.get("retry-after") for r in answers] == ["3", "3", None, None]
    assert answers[0].json() == {"error": {"message": "busy"}}
    plain = answers[1].json()["error"]
    assert plain["message"] == "Request dropped due to backpressure" and plain["code"] == 503
    assert answers[1].headers["content-type"] == "application/json"


def test_http_exceptions_answer_in_openai_shape():
    from starlette.exceptions import HTTPException

    from serving.gateway.errors import http_exception_as_openai

    async def missing(request: Request) -> JSONResponse:
        raise HTTPException(404, 'Could not find model "gpt-9"')

    app = Starlette(routes=[Route("/x", missing)])
    app.add_exception_handler(HTTPException, http_exception_as_openai)

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/x")

    answer = asyncio.run(run())
    assert answer.status_code == 404
    assert answer.json()["error"] == {
        "message": 'Could not find model "gpt-9"',
        "type": "not_found_error",
        "param": None,
        "code": 404,
    }
