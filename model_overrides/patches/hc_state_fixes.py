"""deepseek_v4_mtp: the three fixes of vLLM PR #42930, for layouts that lack them.

1. decoder HC-state args get ``None`` defaults (torch.compile binds the MTP call
   ``mtp_block(positions=..., x=..., input_ids=None)``) and a 4-tuple annotation;
2. the MTP ``compute_logits`` takes attributes it does not own (``hc_head_op``) from
   the step's MTP layer;
3. ``hc_post`` is a no-op when the block returned no deferred state, so an MTP layer
   that calls it unconditionally cannot apply it twice on the inline path.

Probes run the contract rules on every importable DSV4 variant; classes that fail
are patched before any model is built. vLLM 0.32 carries all three fixes.
"""

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

from model_overrides.compat import breakable_graphs
from model_overrides.contracts import hc_state_contract
from model_overrides.registry import REGISTRY, Need, Patch, Probe

FOUR_TUPLE = tuple[Any, Any | None, Any | None, Any | None]


# ---------------------------------------------------------------- fixes on a class


def fix_decoder_defaults(cls: type) -> None:
    """Give post_mix/res_mix/residual (and what follows them) None defaults."""
    for name in ["forward", *[n for n in vars(cls) if n.startswith("_forward")]]:
        original = getattr(cls, name)
        sig = inspect.signature(original)
        params, defaulting = [], False
        for p in sig.parameters.values():
            if p.name in hc_state_contract.HC_STATE or p.name == "input_ids":
                defaulting = defaulting or p.name in hc_state_contract.HC_STATE
                if p.default is inspect.Parameter.empty and p.name in hc_state_contract.HC_STATE:
                    p = p.replace(default=None)
            if (
                defaulting
                and p.default is inspect.Parameter.empty
                and p.kind
                in (
                    p.POSITIONAL_OR_KEYWORD,
                    p.KEYWORD_ONLY,
                )
            ):
                p = p.replace(default=None)
            params.append(p)
        new_sig = sig.replace(parameters=params, return_annotation=FOUR_TUPLE)
        if new_sig == sig:
            continue

        def make(orig: Callable, signature: inspect.Signature) -> Callable:
            @functools.wraps(orig)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                return orig(*bound.args, **bound.kwargs)

            wrapper.__signature__ = signature  # type: ignore[attr-defined]
            wrapper.__annotations__ = {**orig.__annotations__, "return": FOUR_TUPLE}
            return wrapper

        setattr(cls, name, make(original, new_sig))
    cls._dsv4_pr42930_defaults = True


def fix_logits_owner(predictor: type, missing: list[str]) -> None:
    """compute_logits takes ``missing`` attributes from the step's MTP layer."""
    original = predictor.compute_logits

    @functools.wraps(original)
    def compute_logits(self: Any, hidden_states: Any, spec_step_idx: int = 0) -> Any:
        index = self.mtp_start_layer_idx + spec_step_idx % self.num_mtp_layers
        layer = self.layers[str(index)]
        for attr in missing:
            # Plain instance attribute: not registered as a second submodule.
            self.__dict__[attr] = getattr(layer, attr)
        return original(self, hidden_states, spec_step_idx)

    predictor.compute_logits = compute_logits
    predictor._dsv4_pr42930_logits = tuple(missing)


def gate_on_state(post: Callable) -> Callable:
    @functools.wraps(post)
    def gated(*args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(post).bind(*args, **kwargs)
        if bound.arguments.get("residual", 0) is None:
            return bound.arguments["x"]  # the block applied hc_post inline already
        return post(*args, **kwargs)

    gated._dsv4_gated = True  # type: ignore[attr-defined]
    return gated


def fix_hc_post_gate(layer: type, decoder: type) -> None:
    """Make every hc_post the MTP layer can call a no-op without deferred state."""
    if not getattr(decoder.hc_post, "_dsv4_gated", False):
        decoder.hc_post = gate_on_state(decoder.hc_post)
    module = sys.modules[layer.__module__]
    for name, value in list(vars(module).items()):
        is_post = callable(value) and ("hc_post" in name or name.startswith("mhc_post"))
        if is_post and not getattr(value, "_dsv4_gated", False):
            setattr(module, name, gate_on_state(value))
    layer._dsv4_pr42930_gate = True


# ---------------------------------------------------------------- registry entries


@functools.cache
def _runtime_variants() -> list[hc_state_contract.Variant]:
    """This platform's variants, discovered once per process for probes, applies, verifies.

    Off the CPU the probes read the source (model_overrides/compat/breakable_graphs.py says why);
    only a fix that is needed imports the classes it patches."""
    importing = breakable_graphs.may_import_dsv4_models()
    variants = hc_state_contract.discover_variants(
        only=hc_state_contract.current_platform_variants(), importing=importing
    )
    return [v for v in variants if v.decoder and (v.decoder.runtime or not importing)]


@functools.cache
def _patchable_variants() -> list[hc_state_contract.Variant]:
    """The variants as classes, for apply and verify."""
    if not breakable_graphs.may_import_dsv4_models():
        breakable_graphs.prepare_dsv4_import()
    variants = hc_state_contract.discover_variants(
        only=hc_state_contract.current_platform_variants()
    )
    return [v for v in variants if v.decoder and v.decoder.runtime]


def _probe(rule: Callable[[hc_state_contract.Variant], tuple[bool, str] | None]) -> Probe:
    variants = _runtime_variants()
    if not variants:
        return Probe(Need.NOT_APPLICABLE, "no importable DSV4 variant in this vLLM")
    failing = []
    for v in variants:
        result = rule(v)
        if result is not None and not result[0]:
            failing.append(f"{v.name}: {result[1]}")
    if failing:
        return Probe(Need.NEEDED, "; ".join(failing))
    names = ", ".join(v.name for v in variants)
    return Probe(Need.NOT_NEEDED, f"already fixed in {names}")


def _decoder_rule(v: hc_state_contract.Variant) -> tuple[bool, str]:
    return hc_state_contract.check_decoder_binds(v.decoder)


def _logits_rule(v: hc_state_contract.Variant) -> tuple[bool, str] | None:
    if not (v.predictor and v.predictor.runtime and v.mtp_layer):
        return None
    return hc_state_contract.check_logits_attrs(v.predictor, v.mtp_layer)


def _gate_rule(v: hc_state_contract.Variant) -> tuple[bool, str] | None:
    if not (v.mtp_layer and v.mtp_layer.runtime):
        return None
    return hc_state_contract.check_hc_post_gated(v.mtp_layer, v.decoder)


def missing_logits_attrs(
    predictor: hc_state_contract.ClassInfo, layer: hc_state_contract.ClassInfo
) -> list[str]:
    """What compute_logits takes from ``self`` that only the MTP layer owns."""
    layer_own = layer.owned_attributes()
    return [
        attr
        for holder, attr in hc_state_contract.foreign_logits_attrs(predictor, layer)
        if holder == "self" and attr in layer_own
    ]


def _apply_decoder() -> None:
    for v in _patchable_variants():
        if not _decoder_rule(v)[0]:
            fix_decoder_defaults(v.decoder.runtime)


def _apply_logits() -> None:
    for v in _patchable_variants():
        result = _logits_rule(v)
        if result is not None and not result[0]:
            fix_logits_owner(v.predictor.runtime, missing_logits_attrs(v.predictor, v.mtp_layer))


def _apply_gate() -> None:
    for v in _patchable_variants():
        result = _gate_rule(v)
        if result is not None and not result[0]:
            fix_hc_post_gate(v.mtp_layer.runtime, v.decoder.runtime)


def _verify(rule: Callable, fixed_flag: str, role: str) -> Callable[[], str | None]:
    def verify() -> str | None:
        for v in _patchable_variants():
            result = rule(v)
            cls = getattr(getattr(v, role), "runtime", None)
            if result is not None and not result[0] and not getattr(cls, fixed_flag, False):
                return f"{v.name}: {result[1]}"
        return None

    return verify


_NOTE = "probes this platform's variant; `check` reads every variant, amd from source"
for _name, _summary, _rule, _apply, _flag, _role in (
    (
        "pr42930-decoder-defaults",
        "decoder HC-state args default to None",
        _decoder_rule,
        _apply_decoder,
        "_dsv4_pr42930_defaults",
        "decoder",
    ),
    (
        "pr42930-mtp-logits-owner",
        "MTP compute_logits uses its layer's hc_head_op",
        _logits_rule,
        _apply_logits,
        "_dsv4_pr42930_logits",
        "predictor",
    ),
    (
        "pr42930-mtp-hc-post-gate",
        "MTP hc_post only with deferred state",
        _gate_rule,
        _apply_gate,
        "_dsv4_pr42930_gate",
        "mtp_layer",
    ),
):
    REGISTRY.add(
        Patch(
            name=_name,
            override="deepseek_v4_mtp",
            summary=_summary,
            probe=lambda r=_rule: _probe(r),
            apply=_apply,
            verify=_verify(_rule, _flag, _role),
            gpu_note=_NOTE,
            upstream="vLLM PR #42930",
            remove_when="every supported vLLM has #42930 (0.32 does: not needed)",
        )
    )
