"""One small body per inference route that reads a body, as a client would send it: what a
test sends when it needs each route's handler reached (a 2xx) or each route's limits hit."""

from serving.gateway.input_policy import RULES

MODEL = "dsv4-golden"
_MESSAGES = [{"role": "user", "content": "neti sinu"}]

BODIES: dict[str, dict] = {
    "/v1/completions": {"model": MODEL, "prompt": "neti sinu", "max_tokens": 4},
    "/v1/chat/completions": {"model": MODEL, "messages": _MESSAGES, "max_tokens": 4},
    "/v1/responses": {"model": MODEL, "input": "neti sinu", "max_output_tokens": 4},
    "/v1/messages": {"model": MODEL, "messages": _MESSAGES, "max_tokens": 4},
    "/v1/messages/count_tokens": {"model": MODEL, "messages": _MESSAGES},
    "/tokenize": {"model": MODEL, "prompt": "neti sinu"},
    "/detokenize": {"model": MODEL, "tokens": [1, 2]},
}
# The routes whose body the policy reads but whose path names its object: no sample body.
PATH_ONLY = {"/v1/responses/{response_id}/cancel"}
assert set(BODIES) | PATH_ONLY == set(RULES), "a route the input policy reads has no body here"
