"""deepseek_v4_mtp: stale token -> request index in draft steps after the first.

``CommonAttentionMetadata.token_to_req_indices`` caches its result. vLLM's draft
proposer reuses one metadata object for every draft step and, after the first,
rewrites ``query_start_loc`` / ``num_actual_tokens`` to one token per request
without clearing that cache. DSV4's sliding-window metadata then maps draft tokens
to the requests of the first pass (k >= 2, batch > 1): wrong KV, NaN rows.

The fix is in the cache itself: it remembers the query layout it was built for and
is rebuilt when the layout changes. The proposer is shared by every platform, so
the GPU variants run the same code path.
"""

import functools
import inspect
from typing import Any

from model_overrides.patches.module_attr import import_optional, source_without_import
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_BACKEND = "vllm.v1.attention.backend"
_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
_V2_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"
_KEY = "_dsv4_token_to_req_layout"


def _metadata_class() -> Any:
    mod = import_optional(_BACKEND)
    return getattr(mod, "CommonAttentionMetadata", None) if mod else None


def query_layout(md: Any) -> tuple:
    qsl = md.query_start_loc
    return (qsl.data_ptr(), qsl.shape[0], md.num_actual_tokens, int(md.query_start_loc_cpu[-1]))


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def token_to_req_indices(self: Any, buffer: Any) -> Any:
        layout = query_layout(self)
        built_for = self.__dict__.get(_KEY)
        if built_for is not None and built_for != layout:
            self._token_to_req_indices_cache = None
        self.__dict__[_KEY] = layout
        return original(self, buffer)

    token_to_req_indices._dsv4_layout_checked = True  # type: ignore[attr-defined]
    return token_to_req_indices


def _is_patched(cls: Any) -> bool:
    return getattr(cls.token_to_req_indices, "_dsv4_layout_checked", False)


def probe() -> Probe:
    cls = _metadata_class()
    if cls is None or not hasattr(cls, "token_to_req_indices"):
        return Probe(Need.NOT_APPLICABLE, "no cached token_to_req_indices in this vLLM")
    if _is_patched(cls):
        return Probe(Need.ALREADY_APPLIED, "cache keyed by query layout")
    cache_src = inspect.getsource(cls.token_to_req_indices)
    if "_token_to_req_indices_cache" not in cache_src:
        return Probe(Need.UNRECOGNISED, "token_to_req_indices no longer uses its cache field")
    proposer = import_optional(_PROPOSER)
    if proposer is None:
        return _without_the_v1_proposer()
    src = inspect.getsource(proposer)
    rewrites = "common_attn_metadata.query_start_loc = " in src
    resets = "_token_to_req_indices_cache = None" in src
    if not rewrites:
        return Probe(Need.UNRECOGNISED, "the proposer no longer rewrites query_start_loc in place")
    if resets:
        return Probe(Need.NOT_NEEDED, "the proposer resets the cache itself")
    return Probe(Need.NEEDED, "proposer rewrites the query layout but keeps the cached mapping")


def _without_the_v1_proposer() -> Probe:
    """vLLM 0.34 removed Model Runner V1's proposer. V2's draft steps after the first
    build their metadata anew (one query per request), never reusing the first pass's."""
    src = source_without_import(_V2_SPECULATOR, "AutoRegressiveSpeculator._multi_step_decode")
    if src is None:
        return Probe(Need.NOT_APPLICABLE, f"neither {_PROPOSER} nor Model Runner V2's drafter")
    if "self._build_uniform_attn_metadata(" not in src:
        return Probe(Need.UNRECOGNISED, "V2's draft steps no longer build their own metadata")
    return Probe(Need.NOT_NEEDED, "no V1 proposer; V2 builds each draft step's metadata anew")


def apply() -> None:
    cls = _metadata_class()
    cls.token_to_req_indices = _wrap(cls.token_to_req_indices)


def verify() -> str | None:
    return None if _is_patched(_metadata_class()) else "token_to_req_indices unchanged"


REGISTRY.add(
    Patch(
        name="draft-step-token-request-cache",
        override="deepseek_v4_mtp",
        summary="rebuild the token->request cache when a draft step rewrites the layout",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="shared proposer code: the GPU variants take the same path and need it too",
        upstream="ours, not reported upstream",
        remove_when=(
            "the draft proposer resets CommonAttentionMetadata's token->request "
            "cache when it rewrites the query layout (probe: not needed)"
        ),
    )
)
