"""Per-key limits: the budgets on a clock of their own, the cost estimate and the usage
read back, and the middleware in the gateway stack with two keys, one over its limit
and one not, on every inference route."""

import asyncio
import json
import math
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from serving.gateway import metrics
from serving.gateway.input_policy import DEFAULT_OUTPUT_RESERVATION, check
from serving.gateway.keys import key_id
from serving.gateway.limits import KeyBudgets, answer_usage, usage_tokens
from serving.gateway.stack import GatewayOptions, wrap_app

FLOOD, STEADY = "flood-key-0123", "steady-key-0123"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrency_is_counted_per_key():
    budgets = KeyBudgets(max_concurrent=2, retry_after_s=3)
    assert budgets.admit("a") is None and budgets.admit("a") is None
    reason, wait, text = budgets.admit("a")
    assert (reason, wait) == ("concurrency", 3) and "at most 2" in text
    assert budgets.admit("b") is None  # another key is not affected
    budgets.release("a")
    assert budgets.admit("a") is None


def test_tokens_per_minute_bucket_goes_into_debt_and_says_when_it_is_repaid():
    clock = Clock()
    budgets = KeyBudgets(tokens_per_minute=600, clock=clock)  # 10 tokens/s
    assert budgets.admit("a") is None
    budgets.charge("a", 900)  # one request larger than what is left: served once
    budgets.release("a")
    reason, wait, _ = budgets.admit("a")
    assert reason == "tokens" and wait == 30  # 300 tokens of debt at 10/s
    clock.now += 29
    assert budgets.admit("a")[0] == "tokens"
    clock.now += 2
    assert budgets.admit("a") is None
    clock.now += 3600
    assert budgets.level("a") == 600  # refills to one minute's worth, no more
    assert budgets.admit("b") is None


@pytest.mark.parametrize(
    "route,body,output",
    [
        ("/v1/completions", b'{"prompt": "abcd", "max_tokens": 10}', 10),
        ("/v1/completions", b'{"prompt": "abcd", "max_tokens": "10"}', 10),
        ("/v1/chat/completions", b'{"messages": [{"role": "user"}], "n": 2, "max_tokens": 7}', 14),
        ("/v1/responses", b'{"input": "hi", "max_output_tokens": 5e0}', 5),
        ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}', DEFAULT_OUTPUT_RESERVATION),
        ("/v1/completions", b'{"prompt": ["a", "b"], "max_tokens": 3}', 6),
        ("/tokenize", b'{"prompt": "x"}', 0),
    ],
)
def test_reservation_is_prompt_bytes_over_four_plus_the_output_vllm_allows(route, body, output):
    assert check(route, body).reservation == math.ceil(len(body) / 4) + output


def test_usage_is_read_in_every_api_shape():
    assert usage_tokens({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}) == 7
    assert usage_tokens({"input_tokens": 3, "output_tokens": 5}) == 8
    assert usage_tokens(None) is None and usage_tokens({"x": 1}) is None
    assert answer_usage(b'{"usage": {"total_tokens": 12}}', stream=False) == 12
    stream = (
        b'data: {"choices": [{"text": "a"}], "usage": null}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 9}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert answer_usage(stream, stream=True) == 11
    assert answer_usage(b'data: {"choices": []}\n\ndata: [DONE]\n\n', stream=True) is None
    responses = (  # the Responses API: usage inside the completed response
        b'event: response.created\ndata: {"type": "response.created", '
        b'"response": {"usage": null}}\n\n'
        b'event: response.completed\ndata: {"type": "response.completed", "response": '
        b'{"usage": {"input_tokens": 4, "output_tokens": 6, "total_tokens": 10}}}\n\n'
    )
    assert answer_usage(responses, stream=True) == 10
    messages = (  # Anthropic Messages: the final message_delta has both counts
        b'event: message_start\ndata: {"type": "message_start", "message": '
        b'{"usage": {"input_tokens": 4, "output_tokens": 0}}}\n\n'
        b'event: message_delta\ndata: {"type": "message_delta", '
        b'"usage": {"input_tokens": 4, "output_tokens": 7}}\n\n'
    )
    assert answer_usage(messages, stream=True) == 11


def _app(options: GatewayOptions, release: asyncio.Event | None = None) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        if release is not None:
            await release.wait()
        used = {"prompt_tokens": 10, "completion_tokens": body.get("max_tokens", 1)}
        if body.get("stream"):

            async def events():
                yield 'data: {"choices": [{"text": "a"}]}\n\n'
                yield f"data: {json.dumps({'choices': [], 'usage': used})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return {"choices": [{"text": "a"}], "usage": used}

    @app.get("/v1/models")
    async def models():
        return {"data": []}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await request.json()
        if release is not None:
            await release.wait()
        return {"count": len(body["prompt"]), "max_model_len": 4096, "tokens": []}

    wrap_app(app, models=["m"], options=options)
    return app


def _body(max_tokens: int = 4, stream: bool = False) -> dict:
    return {"model": "m", "prompt": "x", "max_tokens": max_tokens, "stream": stream}


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def two_keys(monkeypatch):
    monkeypatch.setenv("DSV4_API_KEYS", f"{FLOOD},{STEADY}")
    for name in ("DSV4_ADMIN_KEYS", "DSV4_API_KEYS_FILE", "DSV4_ADMIN_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_a_key_over_its_concurrency_gets_429_and_the_other_key_is_served(two_keys):
    flood_id = key_id(FLOOD.encode())
    rejected_before = _sample(
        "dsv4_gateway_key_rejected_total", key_id=flood_id, reason="concurrency"
    )

    async def run():
        release = asyncio.Event()
        app = _app(GatewayOptions(key_max_concurrent=2), release)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:

            def post(key: str):
                headers = {"Authorization": f"Bearer {key}"}
                return client.post("/v1/completions", json=_body(), headers=headers)

            flood = [asyncio.create_task(post(FLOOD)) for _ in range(5)]
            await asyncio.sleep(0.2)
            in_flight = _sample("dsv4_gateway_key_requests_in_flight", key_id=flood_id)
            steady = asyncio.create_task(post(STEADY))
            await asyncio.sleep(0.2)
            release.set()
            return in_flight, await asyncio.gather(*flood), await steady

    in_flight, flood, steady = asyncio.run(run())
    assert in_flight == 2
    assert sorted(r.status_code for r in flood) == [200, 200, 429, 429, 429]
    refused = next(r for r in flood if r.status_code == 429)
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.json()["error"]["code"] == "key_concurrency_limit"
    assert steady.status_code == 200
    after = _sample("dsv4_gateway_key_rejected_total", key_id=flood_id, reason="concurrency")
    assert after == rejected_before + 3
    assert _sample("dsv4_gateway_key_requests_in_flight", key_id=flood_id) == 0


@pytest.mark.parametrize("stream", [False, True])
def test_tokens_are_charged_from_the_usage_and_a_key_over_its_minute_waits(two_keys, stream):
    app = _app(GatewayOptions(key_tokens_per_minute=60))  # one token a second
    transport = httpx.ASGITransport(app=app)
    flood_id = key_id(FLOOD.encode())
    tokens_before = _sample("dsv4_gateway_key_tokens_total", key_id=flood_id)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            out = []
            for key, max_tokens in ((FLOOD, 40), (FLOOD, 1), (STEADY, 1)):
                headers = {"Authorization": f"Bearer {key}"}
                body = _body(max_tokens, stream)
                out.append(await client.post("/v1/completions", json=body, headers=headers))
            return out

    started = time.monotonic()
    first, second, steady = asyncio.run(run())
    assert first.status_code == 200 and steady.status_code == 200
    # Charged the usage, 10 + 40 then 10 + 1, not the reservations (bytes/4 + max_tokens):
    # 10 tokens were left for the second request, which took the bucket 1 into debt.
    assert _sample("dsv4_gateway_key_tokens_total", key_id=flood_id) == tokens_before + 61
    assert second.status_code == 200
    level = _limits(app).budgets.level(flood_id)  # refilled at 1 token/s since the start
    assert -1.01 <= level <= -1 + (time.monotonic() - started)


def _limits(app: FastAPI):
    from serving.gateway.limits import KeyLimits

    layer = app.middleware_stack
    while not isinstance(layer, KeyLimits):
        layer = layer.app
    return layer


def test_a_key_in_debt_gets_429_with_the_wait_in_retry_after(two_keys):
    app = _app(GatewayOptions(key_tokens_per_minute=60))
    transport = httpx.ASGITransport(app=app)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            headers = {"Authorization": f"Bearer {FLOOD}"}
            first = await client.post("/v1/completions", json=_body(110), headers=headers)
            second = await client.post("/v1/completions", json=_body(1), headers=headers)
            models = await client.get("/v1/models", headers=headers)  # no generation: no limit
            return first, second, models

    first, second, models = asyncio.run(run())
    assert first.status_code == 200 and models.status_code == 200
    assert second.status_code == 429
    assert second.json()["error"]["code"] == "key_tokens_limit"
    assert 55 <= int(second.headers["retry-after"]) <= 61  # 60 tokens of debt at 1/s


def test_no_limits_configured_means_none_apply(two_keys):
    app = _app(GatewayOptions())
    for _ in range(3):
        headers = {"Authorization": f"Bearer {FLOOD}"}
        out = asyncio.run(_post(app, _body(1000), headers))
        assert out.status_code == 200


async def _post(app, body, headers):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post("/v1/completions", json=body, headers=headers)


def test_tokenize_counts_against_the_key_limits(two_keys):
    flood_id = key_id(FLOOD.encode())
    app = _app(GatewayOptions(key_tokens_per_minute=60, key_max_concurrent=1))
    tokens_before = _sample("dsv4_gateway_key_tokens_total", key_id=flood_id)
    prompt = {"model": "m", "prompt": "x" * 400}  # about 110 tokens reserved: bytes / 4
    headers = {"Authorization": f"Bearer {FLOOD}"}

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            first = await client.post("/tokenize", json=prompt, headers=headers)
            second = await client.post("/tokenize", json=prompt, headers=headers)
            other = await client.post(
                "/tokenize", json=prompt, headers={"Authorization": f"Bearer {STEADY}"}
            )
            return first, second, other

    first, second, other = asyncio.run(run())
    assert first.status_code == 200 and other.status_code == 200
    assert second.status_code == 429 and second.json()["error"]["code"] == "key_tokens_limit"
    charged = _sample("dsv4_gateway_key_tokens_total", key_id=flood_id) - tokens_before
    assert charged == math.ceil(len(json.dumps(prompt)) / 4)


def test_a_key_at_its_concurrency_cap_waits_on_tokenize_too(two_keys):
    async def run():
        release = asyncio.Event()
        app = _app(GatewayOptions(key_max_concurrent=1), release)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            headers = {"Authorization": f"Bearer {FLOOD}"}
            held = asyncio.create_task(
                client.post("/v1/completions", json=_body(), headers=headers)
            )
            await asyncio.sleep(0.2)
            body = {"model": "m", "prompt": "x"}
            refused = await client.post("/tokenize", json=body, headers=headers)
            release.set()
            return await held, refused

    held, refused = asyncio.run(run())
    assert held.status_code == 200
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "key_concurrency_limit"
