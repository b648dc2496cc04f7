"""The input policy of every inference route that takes a body: what the body must be
before it goes on, checked the way vLLM will read it.

vLLM's handlers read a body with FastAPI: ``json.loads`` of the bytes (starlette
``Request.json``), then the route's pydantic request model in lax mode (fastapi
``_compat/v2.py``, ``ModelField.validate``: ``TypeAdapter.validate_python`` with
``from_attributes=True``). The gateway does the same on the same bytes, so every number
its limits compare is the coerced value vLLM will use: ``"max_tokens": "100000"`` and
``1e5`` are 100000 here too. The bytes go on unchanged and vLLM parses them again; a
``mode="before"`` validator that edits the parsed dict edits only the gateway's copy.

The request models, in vLLM 0.32
(``.venv/lib/python3.11/site-packages/vllm/entrypoints/``):

- ``/v1/completions``: ``openai/completion/protocol.py`` ``CompletionRequest``;
- ``/v1/chat/completions``: ``openai/chat_completion/protocol.py`` ``ChatCompletionRequest``;
- ``/v1/responses``: ``openai/responses/protocol.py`` ``ResponsesRequest``;
- ``/v1/messages``, ``/v1/messages/count_tokens``: ``anthropic/protocol.py``
  ``AnthropicMessagesRequest``, ``AnthropicCountTokensRequest``;
- ``/tokenize``, ``/detokenize``: ``serve/tokenize/protocol.py`` ``TokenizeRequest`` (the
  completion and chat forms, a union), ``DetokenizeRequest``;
- ``/v1/responses/{response_id}/cancel`` reads no body (``openai/responses/api_router.py``).

In order: UTF-8, JSON that parses (any parser failure, whatever its exception, is a 400),
an object, nesting at most ``MAX_DEPTH`` deep and no lone surrogate in any string,
no unknown field (OpenAI-style routes; vLLM's Anthropic models ignore unknown fields and
so does the gateway: Anthropic clients send beta fields), the shapes vLLM answers with a
5xx (empty prompt, messages that are not role objects), vLLM's model, then the limits on
the coerced values (``n``, stop strings, sequences, output tokens) and tool schemas.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

MAX_STOP = 16
MAX_N = 8
MAX_SEQUENCES = 64  # prompts x n: a completions prompt list starts one sequence per entry
MAX_DEPTH = 64  # nested arrays and objects
DEFAULT_OUTPUT_RESERVATION = 256  # tokens reserved when a request names no maximum
ENTRYPOINTS = "vllm.entrypoints."
CHECKED = "dsv4.checked"  # the ASGI scope's key for a body that passed (``Checked``)


class BadRequest(ValueError):
    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


@dataclass(frozen=True)
class BodyRule:
    """How one route's body is read: vLLM's request model (``module:Name`` under
    ``vllm.entrypoints``; "" for a route that reads no body) and what the limits count."""

    model: str
    output: tuple[str, ...] = ()  # fields naming the most tokens a sequence makes: first set
    unknown_fields_pass: bool = False
    messages: str | None = None  # a field that must be a non-empty list of role objects
    stop: str | None = None
    n: bool = False
    prompts: bool = False  # /v1/completions: a list of prompts is one sequence each
    # vLLM's own reader of the validated request's input, run here too: a body its handler
    # would crash on (a 500) is a 400 naming the field. (module:function, field).
    reader: tuple[str, str] | None = None

    @property
    def generates(self) -> bool:
        return bool(self.output)


RULES: dict[str, BodyRule] = {
    "/v1/completions": BodyRule(
        "openai.completion.protocol:CompletionRequest",
        output=("max_tokens",),
        stop="stop",
        n=True,
        prompts=True,
    ),
    "/v1/chat/completions": BodyRule(
        "openai.chat_completion.protocol:ChatCompletionRequest",
        output=("max_completion_tokens", "max_tokens"),  # build_tok_params' order
        messages="messages",
        stop="stop",
        n=True,
    ),
    "/v1/responses": BodyRule(
        "openai.responses.protocol:ResponsesRequest",
        output=("max_output_tokens",),
        stop="stop",
        # renderers/online_renderer.py turns the input into chat messages with it; it reads
        # an assistant message's content[0].text, which a refusal part does not have.
        reader=("openai.responses.utils:construct_input_messages", "input"),
    ),
    "/v1/messages": BodyRule(
        "anthropic.protocol:AnthropicMessagesRequest",
        output=("max_tokens",),
        unknown_fields_pass=True,
        messages="messages",
        stop="stop_sequences",
    ),
    "/v1/messages/count_tokens": BodyRule(
        "anthropic.protocol:AnthropicCountTokensRequest",
        unknown_fields_pass=True,
        messages="messages",
    ),
    "/tokenize": BodyRule("serve.tokenize.protocol:TokenizeRequest"),
    "/detokenize": BodyRule("serve.tokenize.protocol:DetokenizeRequest"),
    "/v1/responses/{response_id}/cancel": BodyRule(""),
}


@dataclass(frozen=True)
class Checked:
    """A body that passed: what the limits, the metrics and the tenancy checks read."""

    route: str
    size: int  # bytes
    request: Any = None  # vLLM's validated request model; None for a route without a body
    sent: frozenset[str] = frozenset()  # top-level fields the client sent
    output_tokens: int = 0  # the most tokens one sequence may make (a reservation if unsaid)
    sequences: int = 0  # sequences the request starts (prompts x n); 0: no generation
    model: str | None = None

    @property
    def reservation(self) -> int:
        """Tokens the request may cost: bytes / 4 for the prompt (about 4 bytes a token
        in English text; the JSON around it makes it an over-estimate) and the output."""
        return -(-self.size // 4) + self.output_tokens * self.sequences


def _model_type(name: str) -> Any:
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(ENTRYPOINTS + module), attribute)


@cache
def _adapter(name: str) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(_model_type(name))


def _model_fields(tp: Any) -> set[str]:
    fields = getattr(tp, "model_fields", None)
    if fields is None:  # a union (TokenizeRequest): every member's fields
        return set().union(*(_model_fields(a) for a in getattr(tp, "__args__", ())))
    names = set(fields)
    names |= {f.alias for f in fields.values() if f.alias}
    return names


@cache
def known_fields(route: str) -> frozenset[str]:
    """Top-level fields (and aliases) vLLM's request model for the route knows."""
    return frozenset(_model_fields(_model_type(RULES[route].model)))


def _parse(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")  # strict: no encoded surrogates
    except UnicodeDecodeError as exc:
        raise BadRequest(
            400, f"request body is not valid UTF-8 (byte {exc.start})", "invalid_encoding"
        ) from None
    try:
        # starlette's Request.json is json.loads of the bytes, which also takes UTF-16 and
        # UTF-32 and a byte-order mark; on a body that parses here it reads the same.
        return json.loads(text)
    except Exception as exc:  # JSONDecodeError, RecursionError, ...: all the client's
        why = str(exc)[:200] if isinstance(exc, ValueError) else type(exc).__name__
        raise BadRequest(400, f"request body is not valid JSON: {why}", "invalid_json") from None


def _check_structure(payload: Any) -> None:
    """Nesting depth and strings that are text (a ``\\ud800`` escape parses to a lone
    surrogate, which the tokenizer cannot encode). No recursion: it walks any depth."""
    stack = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                text = f"request body is nested deeper than {MAX_DEPTH} levels"
                raise BadRequest(400, text, "too_deep")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _text(key)
                stack.append((item, depth + 1))
        elif isinstance(value, str):
            _text(value)


def _text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            400,
            "request body holds a lone surrogate (\\ud800-\\udfff) in a string",
            "invalid_encoding",
        ) from None


def _check_messages(name: str, messages: Any) -> None:
    # vLLM answers 500 for messages null or a list of non-objects.
    if not isinstance(messages, list) or not messages:
        text = f"{name} must be a non-empty list of message objects"
        raise BadRequest(400, text, "invalid_messages", name)
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            text = f"{name}[{i}] must be an object with a string role"
            raise BadRequest(400, text, "invalid_messages", f"{name}[{i}]")


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validation_error(route: str, exc: Exception) -> BadRequest:
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        from vllm.exceptions import VLLMClientError

        if isinstance(exc, VLLMClientError):  # vLLM's validators raise it unwrapped
            param = getattr(exc, "parameter", None)
            return BadRequest(400, str(exc)[:500], "invalid_request", param)
        # Whatever else a validator raised on this body (vLLM would answer it 500).
        text = f"request body is not valid for {route}: {type(exc).__name__}"
        return BadRequest(400, text, "invalid_request")
    errors = exc.errors(include_url=False, include_input=False)
    parts, param = [], None
    for error in errors[:3]:
        where = _where(error.get("loc", ()))
        cause = (error.get("ctx") or {}).get("error")
        named = getattr(cause, "parameter", None)  # vLLM's VLLMValidationError names it
        where = where or named or "body"
        param = param or (where if where != "body" else None)
        parts.append(f"{where}: {error.get('msg', '')}"[:300])
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return BadRequest(400, "; ".join(parts) + more, "invalid_request", param)


def _check_reader(route: str, rule: BodyRule, request: Any) -> None:
    """Run vLLM's reader of the request's input on the validated request."""
    assert rule.reader is not None
    reader, field = rule.reader
    read = _model_type(reader)
    try:
        read(request_instructions=request.instructions, request_input=request.input)
    except Exception as exc:
        from vllm.exceptions import VLLMClientError

        if isinstance(exc, VLLMClientError):  # vLLM's own answer: a 400 as it words it
            raise _validation_error(route, exc) from None
        text = f"{field} holds an item vLLM cannot read ({type(exc).__name__}: {exc})"[:500]
        raise BadRequest(400, text, "invalid_input", field) from None


def _prompts(request: Any) -> int:
    """Prompts a completions request holds: a string or one token list is one prompt."""
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    if prompt is None and isinstance(request.prompt_embeds, list):
        return len(request.prompt_embeds)
    return 1


def _tool_schemas(request: Any) -> list[tuple[str, Any]]:
    """(where, schema) of each tool: chat's ``function.parameters``, Responses'
    function tools' ``parameters``, Anthropic's ``input_schema``."""
    out = []
    for i, tool in enumerate(getattr(request, "tools", None) or []):
        function = getattr(tool, "function", None)
        if function is not None:
            out.append((f"tools[{i}].function.parameters", function.parameters))
            continue
        for name in ("parameters", "input_schema"):
            if getattr(tool, name, None) is not None:
                out.append((f"tools[{i}].{name}", getattr(tool, name)))
    return out


def _check_tools(request: Any) -> None:
    import jsonschema

    for where, schema in _tool_schemas(request):
        if schema is None:
            continue
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            text = f"{where} is not a valid JSON Schema: {exc.message}"[:500]
            raise BadRequest(400, text, "invalid_tools", where) from None


def _field(request: Any, name: str) -> Any:
    # Read the stored value: a deprecated field (chat's max_tokens) warns on attribute access.
    return request.__dict__.get(name)


def check(route: str, body: bytes, max_output_tokens: int | None = None) -> Checked:
    """Raise BadRequest naming the problem, or return what the limits count."""
    rule = RULES[route]
    if not rule.model:  # reads no body: any JSON object or nothing
        if body.strip():
            payload = _parse(body)
            if not isinstance(payload, dict):
                raise BadRequest(400, "request body must be a JSON object", "invalid_json")
            _check_structure(payload)
        return Checked(route, len(body))
    if not body:
        raise BadRequest(400, f"{route} needs a JSON object body", "invalid_json")
    payload = _parse(body)
    if not isinstance(payload, dict):
        raise BadRequest(400, "request body must be a JSON object", "invalid_json")
    _check_structure(payload)
    if not rule.unknown_fields_pass:
        unknown = sorted(set(payload) - known_fields(route))
        if unknown:
            text = f"unknown field(s) {', '.join(unknown)} for {route}"
            raise BadRequest(400, text, "unknown_field", unknown[0])
    sent = frozenset(payload)
    model = payload.get("model") if isinstance(payload.get("model"), str) else None
    if rule.messages:
        _check_messages(rule.messages, payload.get(rule.messages))
    if rule.prompts and payload.get("prompt") in ("", []):
        raise BadRequest(400, "prompt must not be empty", "empty_prompt", "prompt")
    try:
        request = _adapter(rule.model).validate_python(payload, from_attributes=True)
    except Exception as exc:  # ValidationError, or whatever a validator raised
        raise _validation_error(route, exc) from None
    if rule.reader:
        _check_reader(route, rule, request)

    stop = _field(request, rule.stop) if rule.stop else None
    if isinstance(stop, list) and len(stop) > MAX_STOP:
        text = f"{rule.stop} has {len(stop)} entries; at most {MAX_STOP}"
        raise BadRequest(400, text, "too_many_stop", rule.stop)
    n = 1
    if rule.n:
        n = _field(request, "n")
        n = 1 if n is None else n
        if n > MAX_N:
            raise BadRequest(400, f"n={n} exceeds the limit of {MAX_N}", "n_too_large", "n")
    sequences = 0
    output = 0
    if rule.generates:
        prompts = _prompts(request) if rule.prompts else 1
        sequences = max(1, n) * prompts
        if sequences > MAX_SEQUENCES:
            text = (
                f"{prompts} prompts x n={n} start {sequences} sequences; "
                f"at most {MAX_SEQUENCES} a request"
            )
            raise BadRequest(400, text, "too_many_sequences", "prompt")
        asked = [(f, _field(request, f)) for f in rule.output]
        named = next(((f, v) for f, v in asked if v is not None), None)
        if named is not None and max_output_tokens is not None and named[1] > max_output_tokens:
            name, value = named
            text = f"{name}={value} exceeds the model's context of {max_output_tokens} tokens"
            raise BadRequest(400, text, "max_tokens_too_large", name)
        output = max(0, named[1]) if named is not None else DEFAULT_OUTPUT_RESERVATION
    _check_tools(request)
    return Checked(
        route,
        len(body),
        request=request,
        sent=sent,
        output_tokens=output,
        sequences=sequences,
        model=model,
    )
