"""Stored responses belong to the key that created them, through the whole gateway
stack (``wrap_app``) around a small FastAPI app that stores /v1/responses answers the
way vLLM's handler does (the running app is exercised in
tests/serving/gateway/test_key_limits.py)."""

import asyncio
import itertools
import json
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from serving.gateway.stack import GatewayOptions, wrap_app
from serving.gateway.tenancy import response_id

OWNER, OTHER = "owner-key-0123", "other-key-0123"


def _app(store: bool = True) -> FastAPI:
    app = FastAPI()
    app.state.openai_serving_responses = SimpleNamespace(enable_store=store)
    stored: dict[str, dict] = {}
    ids = itertools.count(1)

    def absent(rid: str) -> JSONResponse:
        error = {"message": f"Response with id '{rid}' not found.", "code": 404}
        return JSONResponse({"error": error}, status_code=404)

    @app.post("/v1/responses")
    async def create(request: Request):
        body = await request.json()
        previous = body.get("previous_response_id")
        if previous is not None and previous not in stored:
            return absent(previous)
        rid = body.get("request_id") or f"resp_{next(ids)}"
        answer = {"id": rid, "status": "completed", "previous": previous}
        if store and body.get("store", True):
            stored[rid] = answer
        if body.get("stream"):

            async def events():
                created = {"type": "response.created", "response": {**answer, "usage": None}}
                yield f"event: response.created\ndata: {json.dumps(created)}\n\n"
                done = {"type": "response.completed", "response": answer}
                yield f"event: response.completed\ndata: {json.dumps(done)}\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return answer

    @app.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str):
        return stored.get(response_id) or absent(response_id)

    @app.post("/v1/responses/{response_id}/cancel")
    async def cancel(response_id: str):
        return stored.get(response_id) or absent(response_id)

    wrap_app(app, models=["m"], options=GatewayOptions())
    return app


@pytest.fixture(autouse=True)
def two_keys(monkeypatch):
    monkeypatch.setenv("DSV4_API_KEYS", f"{OWNER},{OTHER}")
    for name in ("DSV4_ADMIN_KEYS", "DSV4_API_KEYS_FILE", "DSV4_ADMIN_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)


def _calls(app, *calls: tuple[str, str, str, dict | None]) -> list[httpx.Response]:
    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            out = []
            for method, path, key, body in calls:
                headers = {"Authorization": f"Bearer {key}"}
                out.append(await client.request(method, path, json=body, headers=headers))
            return out

    return asyncio.run(run())


def _create(app, key: str = OWNER, **fields) -> httpx.Response:
    return _calls(app, ("POST", "/v1/responses", key, {"model": "m", "input": "hi", **fields}))[0]


def _ids(answer: httpx.Response) -> str:
    return response_id(answer.content, "text/event-stream" in answer.headers["content-type"])


@pytest.mark.parametrize("stream", [False, True])
def test_only_the_creating_key_reads_or_cancels_a_stored_response(stream: bool):
    app = _app()
    rid = _ids(_create(app, stream=stream))
    own, own_cancel, other, other_cancel, guess = _calls(
        app,
        ("GET", f"/v1/responses/{rid}", OWNER, None),
        ("POST", f"/v1/responses/{rid}/cancel", OWNER, None),
        ("GET", f"/v1/responses/{rid}", OTHER, None),
        ("POST", f"/v1/responses/{rid}/cancel", OTHER, None),
        ("GET", "/v1/responses/resp_404", OWNER, None),
    )
    assert own.status_code == own_cancel.status_code == 200 and own.json()["id"] == rid
    for refused in (other, other_cancel):  # as if it did not exist
        assert refused.status_code == 404
        assert refused.json()["error"]["message"] == f"Response with id '{rid}' not found."
    assert guess.status_code == 404


def test_another_keys_response_cannot_be_continued():
    app = _app()
    rid = _ids(_create(app))
    refused = _create(app, OTHER, previous_response_id=rid)
    assert refused.status_code == 404 and rid in refused.json()["error"]["message"]
    assert _create(app, OWNER, previous_response_id=rid).json()["previous"] == rid


def test_a_client_chosen_request_id_is_refused_while_responses_are_stored():
    app = _app()
    rid = _ids(_create(app))
    hijack = _create(app, OTHER, request_id=rid)  # would overwrite the owner's response
    assert hijack.status_code == 400 and hijack.json()["error"]["code"] == "request_id_set"
    assert _calls(app, ("GET", f"/v1/responses/{rid}", OWNER, None))[0].json()["id"] == rid
    # With the store off nothing is kept, so the id names nothing and may be chosen.
    off = _app(store=False)
    assert _create(off, OTHER, request_id="resp_mine").status_code == 200


def test_nothing_is_readable_while_the_store_is_off_or_the_request_is_not_stored():
    off = _app(store=False)
    rid = _ids(_create(off))
    assert _calls(off, ("GET", f"/v1/responses/{rid}", OWNER, None))[0].status_code == 404
    on = _app()
    unstored = _ids(_create(on, store=False))
    assert _calls(on, ("GET", f"/v1/responses/{unstored}", OWNER, None))[0].status_code == 404


def test_the_id_is_read_from_either_answer_shape():
    assert response_id(b'{"id": "resp_1", "output": []}', stream=False) == "resp_1"
    events = (
        b'event: response.created\ndata: {"type": "response.created", '
        b'"response": {"id": "resp_2"}}\n\n'
    )
    assert response_id(events, stream=True) == "resp_2"
    assert response_id(b"[" * 10_000, stream=False) is None
    assert response_id(b"data: [DONE]\n\n", stream=True) is None
