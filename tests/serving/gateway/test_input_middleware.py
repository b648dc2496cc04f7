"""The input policy of every inference route, with vLLM's own request models (no
stand-ins), and the guard as ASGI middleware in front of a Starlette app (the live app
is exercised in tests/serving/test_reliability.py)."""

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serving.gateway.input_middleware import CHECKED, InputCheckMiddleware, TooLarge, read_body
from serving.gateway.input_policy import (
    DEFAULT_OUTPUT_RESERVATION,
    MAX_DEPTH,
    MAX_N,
    MAX_SEQUENCES,
    RULES,
    BadRequest,
    check,
    known_fields,
)

COMPLETIONS, CHAT, RESPONSES = "/v1/completions", "/v1/chat/completions", "/v1/responses"
MESSAGES, COUNT = "/v1/messages", "/v1/messages/count_tokens"
CANCEL = "/v1/responses/{response_id}/cancel"
JSON = "application/json"
LIMIT = 1 << 16
CONTEXT = 4096
USER = [{"role": "user", "content": "hi"}]
# A body each route's vLLM model accepts.
GOOD = {
    COMPLETIONS: {"model": "m", "prompt": "x"},
    CHAT: {"model": "m", "messages": USER},
    RESPONSES: {"model": "m", "input": "hi"},
    MESSAGES: {"model": "m", "messages": USER, "max_tokens": 8},
    COUNT: {"model": "m", "messages": USER},
    "/tokenize": {"model": "m", "prompt": "hi"},
    "/detokenize": {"model": "m", "tokens": [1, 2]},
}
OUTPUT_FIELD = {
    COMPLETIONS: "max_tokens",
    CHAT: "max_completion_tokens",
    RESPONSES: "max_output_tokens",
    MESSAGES: "max_tokens",
}


def _check(body, route=COMPLETIONS):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return check(route, raw, CONTEXT)


def _refused(body, route=COMPLETIONS) -> BadRequest:
    with pytest.raises(BadRequest) as exc:
        _check(body, route)
    return exc.value


def test_every_route_reads_its_body_with_vllms_model():
    names = {
        COMPLETIONS: "CompletionRequest",
        CHAT: "ChatCompletionRequest",
        RESPONSES: "ResponsesRequest",
        MESSAGES: "AnthropicMessagesRequest",
        COUNT: "AnthropicCountTokensRequest",
        "/tokenize": "TokenizeCompletionRequest",
        "/detokenize": "DetokenizeRequest",
    }
    for route, body in GOOD.items():
        request = _check(body, route).request
        assert type(request).__name__ == names[route]
        assert type(request).__module__.startswith("vllm.entrypoints.")
    chat_form = _check({"messages": USER}, "/tokenize").request
    assert type(chat_form).__name__ == "TokenizeChatRequest"  # the union's other member


CASES = [
    (b'{"model": "m", "prompt": ', 400, "not valid JSON"),
    (b"\xff\xfe{}", 400, "not valid UTF-8"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b"", 400, "needs a JSON object body"),
    ({"model": "m", "prompt": "x", "max_token": 5}, 400, "unknown field(s) max_token"),
    ({"model": "m", "prompt": "x", "stop": ["s"] * 1000}, 400, "stop"),
    ({"model": "m", "prompt": "x", "n": 1000}, 400, "n=1000 exceeds"),
    ({"model": "m", "prompt": ""}, 400, "prompt must not be empty"),
    ({"model": "m"}, 400, "Either prompt or prompt_embeds"),  # vLLM's own validator
    ({"model": "m", "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens: Input should be"),
]


@pytest.mark.parametrize(("body", "status", "message"), CASES, ids=[c[2] for c in CASES])
def test_bad_bodies_are_named(body, status: int, message: str):
    refused = _refused(body)
    assert refused.status == status and message in str(refused), str(refused)


# -- the numbers the limits compare are the ones vLLM will use -------------------------


@pytest.mark.parametrize("route", sorted(OUTPUT_FIELD))
@pytest.mark.parametrize("value", ["100000", 1e5, 100000.0, " 100000 "])
def test_output_tokens_over_the_context_are_refused_however_they_are_written(route, value):
    name = OUTPUT_FIELD[route]
    refused = _refused({**GOOD[route], name: value}, route)
    assert refused.code == "max_tokens_too_large" and refused.param == name
    assert f"{name}=100000 exceeds the model's context of {CONTEXT}" in str(refused)


@pytest.mark.parametrize("value", ["1000", 1000.0, 1e3])
def test_n_is_compared_as_vllm_reads_it(value):
    refused = _refused({**GOOD[COMPLETIONS], "n": value})
    assert refused.code == "n_too_large" and "n=1000" in str(refused)
    assert _refused({**GOOD[CHAT], "n": value}, CHAT).code == "n_too_large"


def test_the_reservation_counts_the_coerced_values():
    # bytes / 4 for the prompt, plus the output tokens vLLM will allow, per sequence
    for route, name in OUTPUT_FIELD.items():
        body = {**GOOD[route], name: "300"}
        raw = json.dumps(body).encode()
        checked = check(route, raw, CONTEXT)
        assert checked.output_tokens == 300 and checked.sequences == 1
        assert checked.reservation == -(-len(raw) // 4) + 300
    chat = _check({**GOOD[CHAT], "max_tokens": 2.0, "n": "3"}, CHAT)  # the deprecated name
    assert (chat.output_tokens, chat.sequences) == (2, 3)
    both = _check({**GOOD[CHAT], "max_tokens": 2, "max_completion_tokens": 9}, CHAT)
    assert both.output_tokens == 9  # vLLM's build_tok_params prefers max_completion_tokens
    assert _check(GOOD[COMPLETIONS]).output_tokens == 16  # vLLM's default max_tokens
    assert _check(GOOD[CHAT], CHAT).output_tokens == DEFAULT_OUTPUT_RESERVATION  # unsaid
    for route in (COUNT, "/tokenize", "/detokenize"):
        checked = _check(GOOD[route], route)
        assert checked.sequences == 0 and checked.reservation == -(-checked.size // 4)


def test_a_prompt_list_is_one_sequence_per_prompt():
    checked = _check({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 10})
    assert checked.sequences == 6 and checked.output_tokens == 10
    assert _check({"prompt": [1, 2, 3], "n": 2}).sequences == 2  # one prompt of token ids
    assert _check({"prompt": [[1], [2]], "n": "2"}).sequences == 4
    refused = _refused({"prompt": ["a"] * (MAX_SEQUENCES + 1)})
    assert refused.code == "too_many_sequences"


def test_limits_are_inclusive_and_known_fields_are_vllms():
    assert {"max_tokens", "top_k", "ignore_eos", "stream_options"} <= known_fields(COMPLETIONS)
    assert {"messages", "tools", "max_completion_tokens"} <= known_fields(CHAT)
    assert {"input", "previous_response_id", "request_id"} <= known_fields(RESPONSES)
    assert {"prompt", "messages", "add_generation_prompt"} <= known_fields("/tokenize")
    body = {**GOOD[COMPLETIONS], "n": MAX_N, "stop": ["a"] * 4, "max_tokens": CONTEXT}
    assert _check(body).sequences == MAX_N


def test_unknown_fields_are_refused_on_openai_routes_and_ignored_on_anthropic_ones():
    for route in (COMPLETIONS, CHAT, RESPONSES, "/tokenize", "/detokenize"):
        refused = _refused({**GOOD[route], "max_tokns": 4}, route)
        assert refused.code == "unknown_field" and refused.param == "max_tokns"
    for route in (MESSAGES, COUNT):  # vLLM's Anthropic models ignore them, as do we
        assert _check({**GOOD[route], "betas": ["x"]}, route).model == "m"


# -- bodies the parser cannot read, whatever it raises ---------------------------------

BROKEN = {
    "deep-arrays": (b"[" * 100_000, "invalid_json"),  # RecursionError in json.loads
    "deep-object": (b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", "invalid_json"),
    "nested-past-the-limit": (
        b'{"prompt": "x", "logit_bias": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}",
        "too_deep",
    ),
    "lone-surrogate-escape": (b'{"prompt": "\\ud800"}', "invalid_encoding"),
    "lone-surrogate-in-a-key": (b'{"prompt": "x", "\\udfff": 1}', "invalid_encoding"),
    "encoded-surrogate": (b'{"prompt": "\xed\xa0\x80"}', "invalid_encoding"),
    "invalid-utf8": (b'{"prompt": "\xff\xfe"}', "invalid_encoding"),
    "utf16": ('{"prompt": "x"}'.encode("utf-16-le"), "invalid_json"),
    "utf8-bom": (b'\xef\xbb\xbf{"prompt": "x"}', "invalid_json"),
    "nan-max-tokens": (b'{"prompt": "x", "max_tokens": NaN}', "invalid_request"),
    "trailing-garbage": (b'{"prompt": "x"} {}', "invalid_json"),
}


def _assistant(*content: dict) -> dict:
    return {"type": "message", "role": "assistant", "id": "m", "status": "completed",
            "content": list(content)}  # fmt: skip


def test_responses_input_is_read_by_vllms_own_reader():
    """vLLM's Responses handler turns `input` into chat messages by reading an assistant
    message's content[0].text: a message whose first part is a refusal crashed it (a 500
    the schema fuzzer found). The gateway runs the same reader and answers 400."""
    text = {"type": "output_text", "text": "earlier answer", "annotations": []}
    refusal = {"type": "refusal", "refusal": "no"}
    good = {"model": "m", "input": [_assistant(text, refusal), *USER]}
    assert _check(good, RESPONSES).request.input
    refused = _refused({"model": "m", "input": [_assistant(refusal, text), *USER]}, RESPONSES)
    assert refused.status == 400 and refused.param == "input", str(refused)
    assert "AttributeError" in str(refused) and "ResponseOutputRefusal" in str(refused)
    # A client error the reader raises itself keeps vLLM's own wording.
    encrypted = {"type": "reasoning", "id": "r", "summary": [], "encrypted_content": "x"}
    refused = _refused({"model": "m", "input": [encrypted, *USER]}, RESPONSES)
    assert refused.param == "input" and "Encrypted content is not supported" in str(refused)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_any_parser_failure_is_a_400(name: str):
    body, code = BROKEN[name]
    refused = _refused(body)
    assert refused.status == 400 and refused.code == code, str(refused)


def test_a_surrogate_pair_is_text():
    assert _check(b'{"prompt": "\\ud83d\\ude00"}').size > 0


def test_tool_schemas_are_checked_on_every_route_that_takes_tools():
    garbage = {"type": 12}
    fine = {"type": "object"}

    def chat(schema):
        return {"type": "function", "function": {"name": "f", "parameters": schema}}

    def responses(schema):
        return {"type": "function", "name": "f", "parameters": schema}

    def messages(schema):
        return {"name": "f", "input_schema": schema}

    for route, tool, where in (
        (CHAT, chat, "tools[0].function.parameters"),
        (RESPONSES, responses, "tools[0].parameters"),
        (MESSAGES, messages, "tools[0].input_schema"),
        (COUNT, messages, "tools[0].input_schema"),
    ):
        _check({**GOOD[route], "tools": [tool(fine)]}, route)
        refused = _refused({**GOOD[route], "tools": [tool(garbage)]}, route)
        assert refused.code == "invalid_tools" and f"{where} is not a valid JSON" in str(refused)
    shape = _refused({**GOOD[CHAT], "tools": ["nope"]}, CHAT)
    assert shape.param == "tools[0]" and "tools[0]:" in str(shape)


@pytest.mark.parametrize("route", [CHAT, MESSAGES, COUNT])
@pytest.mark.parametrize("messages", [[], None, "hi", {"role": "user"}])
def test_messages_must_be_a_non_empty_list(route, messages):
    refused = _refused({**GOOD[route], "messages": messages}, route)
    assert "messages must be a non-empty list of message objects" in str(refused)


@pytest.mark.parametrize("message", [None, "hi", 3, {"content": "hi"}, {"role": 1}])
def test_each_chat_message_needs_a_role(message):
    refused = _refused({"model": "m", "messages": [USER[0], message]}, CHAT)
    assert r"messages[1] must be an object with a string role" in str(refused)


def test_the_cancel_route_takes_no_body_or_an_object():
    assert check(CANCEL, b"").request is None
    assert check(CANCEL, b"{}").request is None
    assert _refused(b"[", CANCEL).code == "invalid_json"


def test_every_rule_names_a_route_of_the_table():
    from serving.gateway.routes import TABLE, Kind

    for path in RULES:
        route = TABLE.match(path.replace("{response_id}", "r"))
        assert route is not None and route.path == path and route.kind is Kind.INFERENCE


# -- the middleware --------------------------------------------------------------------


def _echo_app(seen: list) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        seen.append(request.scope.get(CHECKED))
        return JSONResponse(await request.json())

    paths = [COMPLETIONS, "/tokenize", RESPONSES, "/v1/responses/{rid}/cancel"]
    return Starlette(routes=[Route(p, echo, methods=["POST"]) for p in paths])


def _post_all(app, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [await client.post(path, **kw) for path, kw in requests]

    return asyncio.run(run())


def test_middleware_rejects_before_the_app_and_replays_good_bodies():
    seen: list = []
    guarded = InputCheckMiddleware(_echo_app(seen), max_body=LIMIT)
    ok, bad, form, deep = _post_all(
        guarded,
        [
            (COMPLETIONS, {"json": {"model": "m", "prompt": "x"}}),
            (COMPLETIONS, {"content": b"{", "headers": {"content-type": JSON}}),
            (COMPLETIONS, {"content": b"prompt=x", "headers": {"content-type": "text/plain"}}),
            ("/tokenize", {"content": b"[" * 50_000, "headers": {"content-type": JSON}}),
        ],
    )
    assert ok.status_code == 200 and ok.json() == {"model": "m", "prompt": "x"}
    assert seen[0].model == "m" and seen[0].request.prompt == "x"
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    assert form.status_code == 415 and "Content-Type must be application/json" in form.text
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "invalid_json"
    assert len(seen) == 1  # the app saw the good body only


def test_an_oversized_body_is_413_on_every_route_without_being_held():
    seen: list = []
    guarded = InputCheckMiddleware(_echo_app(seen), max_body=LIMIT)
    big = b'{"prompt": "' + b"a" * (4 * LIMIT) + b'"}'
    paths = [route.replace("{response_id}", "r") for route in RULES]

    async def chunks():  # no Content-Length: read until it passes the limit
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    answers = _post_all(
        guarded,
        [(path, {"content": chunks(), "headers": {"content-type": JSON}}) for path in paths],
    )
    assert len(answers) == len(RULES)
    for answer in answers:
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "body_too_large" and f"the limit is {LIMIT}" in error["message"]
    assert seen == []


def test_reading_holds_no_more_than_the_limit_and_drains_a_bounded_amount():
    received = []

    def receiver(total: int, chunk: int = 1000):
        sent = {"n": 0}

        async def receive() -> dict:
            sent["n"] += chunk
            received.append(chunk)
            return {"type": "http.request", "body": b"x" * chunk, "more_body": sent["n"] < total}

        return receive

    with pytest.raises(TooLarge) as whole:
        asyncio.run(read_body(receiver(10_000), limit=2500, drain=50_000))
    assert whole.value.complete and whole.value.size == 10_000  # read to its end, dropped
    received.clear()
    with pytest.raises(TooLarge) as cut:
        asyncio.run(read_body(receiver(10**9), limit=2500, drain=20_000))
    assert not cut.value.complete and sum(received) <= 21_000  # stops past the drain
    assert asyncio.run(read_body(receiver(2500, chunk=500), limit=2500)) == b"x" * 2500


def test_a_body_declared_past_the_drain_is_refused_unread():
    from serving.gateway.input_middleware import DRAIN_LIMIT

    async def never() -> dict:
        raise AssertionError("the body must not be read")

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/tokenize",
        "headers": [(b"content-length", str(DRAIN_LIMIT + 1).encode())],
    }
    asyncio.run(InputCheckMiddleware(_echo_app([]), max_body=LIMIT)(scope, never, send))
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["code"] == "body_too_large"


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


def test_the_api_page_names_every_route_the_policy_reads():
    from tests.support.paths import ROOT

    page = (ROOT / "docs" / "api.md").read_text()
    section = page[page.index("**Input checks**") : page.index("**Stored responses**")]
    named = {CANCEL: "its cancel route", COUNT: "`/count_tokens`"}
    for route in RULES:
        label = named.get(route, f"`{route}`")
        assert label in section, f"docs/api.md's input checks do not name {route}"
