"""The HC-state contract of vLLM PR #42930, checked on every DSV4 variant vLLM ships.

Rules (each reported per variant):
- decoder-binds: ``DeepseekV4DecoderLayer.forward`` (and its ``_forward*`` helpers)
  can be called as ``(positions=, x=, input_ids=None)``: HC state args default to None.
- decoder-returns-4-tuple: they return ``(x, residual, post_mix, res_mix)``, with
  ``None`` state on the inline path, and say so in the annotation.
- logits-own-attrs: the MTP ``compute_logits`` only uses attributes its own class or
  its MTP layers own.
- hc-post-gated: the MTP layer applies the deferred ``hc_post`` only when the block
  can have returned state (guarded by ``residual``/``use_fused_mhc``, or the block
  never returns ``None`` state).
- target-exposes-mtp-buffer: the target model has ``get_mtp_target_hidden_states``.
- moe-clamp[VARIANT/PATH]: the routed and shared experts receive DSV4's SwiGLU clamp on
  every expert path (``clamp_contract``; read from source, added by ``check_runner``).

Variants are read from source, so those whose import needs another vendor's torch
(ROCm's ``amd`` here) are checked too; importable ones also get a runtime binding check
(``check_runner`` imports other platforms' variants in child processes).
"""

import ast
import functools
import importlib
import importlib.util
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from model_overrides.compat.vllm_source import parsed

HC_STATE = ("post_mix", "res_mix", "residual")
GUARD_NAMES = ("residual", "use_fused_mhc")
PLATFORM_VARIANTS = {
    "cuda": ("nvidia", "legacy"),
    "rocm": ("amd", "legacy"),
    "cpu": ("cpu",),
    "xpu": ("xpu",),
}


@dataclass
class ClassInfo:
    """A class as source (its own and its bases' definitions, MRO order) and maybe at runtime."""

    name: str
    defs: list[ast.ClassDef]
    runtime: type | None = None
    # ``self.X = Cls(...)`` / ``Cls.create(...)`` in __init__, read from source: objects
    # a forward may hand the whole step to (vLLM 0.33's ROCm ``self.mono``).
    delegates: dict[str, "ClassInfo"] = field(default_factory=dict)

    def method(self, name: str) -> ast.FunctionDef | None:
        for cdef in self.defs:
            for node in cdef.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return node
        return None

    def methods(self, prefix: str) -> dict[str, ast.FunctionDef]:
        found: dict[str, ast.FunctionDef] = {}
        for cdef in reversed(self.defs):  # subclasses override bases
            for node in cdef.body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith(prefix):
                    found[node.name] = node
        return found

    def owned_attributes(self) -> set[str]:
        """Names assigned as ``self.X`` anywhere in the class chain, plus its methods."""
        owned: set[str] = set()
        for cdef in self.defs:
            for node in ast.walk(cdef):
                if isinstance(node, ast.FunctionDef):
                    owned.add(node.name)
                targets = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                    targets = [node.target]
                flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                for t in flat:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        owned.add(t.attr)
        return owned


def class_from_runtime(cls: type) -> ClassInfo:
    defs = []
    for klass in cls.__mro__:
        if klass.__module__.startswith(("torch", "builtins")):
            continue
        try:
            defs.append(_only_class(ast.parse(textwrap.dedent(inspect.getsource(klass)))))
        except (OSError, TypeError):
            continue
    return ClassInfo(cls.__name__, defs, cls)


def _only_class(tree: ast.Module) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef))


def class_from_source(path: Path, name: str) -> ClassInfo | None:
    tree = parsed(path)
    cdef = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return ClassInfo(name, [cdef]) if cdef else None


@dataclass
class Variant:
    name: str
    decoder: ClassInfo | None
    predictor: ClassInfo | None  # the class that defines compute_logits
    mtp_layer: ClassInfo | None
    target: ClassInfo | None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    variant: str
    rule: str
    ok: bool
    detail: str


# ---------------------------------------------------------------- rules


def _params(fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    out = [(a.arg, i >= first_default) for i, a in enumerate(positional)]
    out += [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return out


def check_decoder_binds(decoder: ClassInfo) -> tuple[bool, str]:
    forward = decoder.method("forward")
    if forward is None:
        return False, "no forward"
    problems = []
    for name, fn in {"forward": forward, **decoder.methods("_forward")}.items():
        params = dict(_params(fn))
        if name == "forward" and not {"positions", "x", "input_ids"} <= set(params):
            problems.append(f"forward lacks positions/x/input_ids: {list(params)}")
        missing = [p for p in HC_STATE if p in params and not params[p]]
        if missing:
            problems.append(f"{name} has no default for {missing}")
    if decoder.runtime is not None and not problems:
        try:
            inspect.signature(decoder.runtime.forward).bind(
                object(), positions=0, x=0, input_ids=None
            )
        except TypeError as exc:
            problems.append(f"forward(positions=, x=, input_ids=None) does not bind: {exc}")
    return (not problems), "; ".join(problems) or "binds (positions=, x=, input_ids=None)"


def _returns(fn: ast.FunctionDef) -> list[ast.expr]:
    return [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]


def _calls_helper(expr: ast.expr) -> bool:
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr.startswith("_forward")
    )


def decoder_can_return_none_state(decoder: ClassInfo) -> bool:
    fns = [decoder.method("forward"), *decoder.methods("_forward").values()]
    for fn in filter(None, fns):
        for value in _returns(fn):
            if isinstance(value, ast.Tuple) and any(
                isinstance(e, ast.Constant) and e.value is None for e in value.elts[1:]
            ):
                return True
    return False


def _returns_nothing(fn: ast.FunctionDef) -> bool:
    return all(isinstance(v, ast.Constant) and v.value is None for v in _returns(fn))


def _is_four_outputs(value: ast.expr) -> bool:
    """``(a, b, c, d)`` or ``out[:4]``."""
    if isinstance(value, ast.Tuple):
        return len(value.elts) == 4
    bound = getattr(value, "slice", None)
    return (
        isinstance(value, ast.Subscript)
        and isinstance(bound, ast.Slice)
        and bound.lower is None
        and isinstance(bound.upper, ast.Constant)
        and bound.upper.value == 4
    )


def _delegate_return(
    decoder: ClassInfo, fn: ast.FunctionDef, value: ast.expr
) -> tuple[bool, str] | None:
    """``out = self.X(...)``, ``if out is not None: return out``: None when ``value`` is not
    that shape, else whether X's ``__call__`` returns the four outputs or None."""
    if not isinstance(value, ast.Name):
        return None
    sources = [
        n.value
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and [getattr(t, "id", None) for t in n.targets] == [value.id]
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute)
        and getattr(n.value.func.value, "id", None) == "self"
    ]
    guarded = any(
        isinstance(n, ast.If)
        and ast.unparse(n.test) == f"{value.id} is not None"
        and any(isinstance(b, ast.Return) and b.value is value for b in n.body)
        for n in ast.walk(fn)
    )
    if len(sources) != 1 or not guarded:
        return None
    attr = sources[0].func.attr
    delegate = decoder.delegates.get(attr)
    call = delegate.method("__call__") if delegate else None
    if call is None:
        return False, f"returns self.{attr}(...), a delegate this check cannot read"
    for ret in _returns(call):
        helper = getattr(ret, "func", None)
        if isinstance(helper, ast.Attribute) and getattr(helper.value, "id", None) == "self":
            method = delegate.method(helper.attr)
            if method is not None and _returns_nothing(method):
                continue
        if not _is_four_outputs(ret):
            return False, f"self.{attr} ({delegate.name}.__call__) returns {ast.unparse(ret)}"
    return True, f"self.{attr} ({delegate.name}.__call__): four outputs or None"


def check_decoder_returns(decoder: ClassInfo) -> tuple[bool, str]:
    forward = decoder.method("forward")
    if forward is None:
        return False, "no forward"
    problems, delegated = [], []
    annotation = forward.returns
    elts = getattr(getattr(annotation, "slice", None), "elts", None)
    if not (isinstance(annotation, ast.Subscript) and elts is not None and len(elts) == 4):
        problems.append(
            f"forward is annotated {ast.unparse(annotation) if annotation else 'nothing'}"
        )
    for name, fn in {"forward": forward, **decoder.methods("_forward")}.items():
        for value in _returns(fn):
            if _calls_helper(value):
                continue
            if (via := _delegate_return(decoder, fn, value)) is not None:
                (delegated if via[0] else problems).append(via[1])
                continue
            if not (isinstance(value, ast.Tuple) and len(value.elts) == 4):
                problems.append(f"{name} returns {ast.unparse(value)}")
    shape = "deferred or inline" if decoder_can_return_none_state(decoder) else "deferred"
    also = f"; hands steps to {', '.join(delegated)}" if delegated else ""
    return (not problems), "; ".join(problems) or f"4-tuple ({shape} state){also}"


def foreign_logits_attrs(predictor: ClassInfo, layer: ClassInfo) -> list[tuple[str, str]]:
    """(holder, attribute) pairs ``compute_logits`` uses that their holder does not own:
    ``self.X`` not owned by the predictor, ``<...layer...>.X`` not owned by the layer."""
    fn = predictor.method("compute_logits")
    own, layer_own = predictor.owned_attributes(), layer.owned_attributes()
    found = set()
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        holder = node.value.id
        if (holder == "self" and node.attr not in own) or (
            holder != "self" and "layer" in holder and node.attr not in layer_own
        ):
            found.add((holder, node.attr))
    return sorted(found)


def check_logits_attrs(predictor: ClassInfo, layer: ClassInfo) -> tuple[bool, str]:
    if predictor.method("compute_logits") is None:
        return False, f"{predictor.name} has no compute_logits"
    problems = [
        f"{holder}.{attr} is not {predictor.name if holder == 'self' else layer.name}'s"
        for holder, attr in foreign_logits_attrs(predictor, layer)
    ]
    return (not problems), "; ".join(problems) or "uses only attributes it or its layers own"


def _is_hc_post_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return "hc_post" in name or name.startswith("mhc_post")


def _guarded_calls(fn: ast.FunctionDef) -> tuple[int, int]:
    """(hc_post calls, of which inside an `if` testing residual/use_fused_mhc)."""
    total = guarded = 0

    def visit(node: ast.AST, guard: bool) -> None:
        nonlocal total, guarded
        if _is_hc_post_call(node):
            total += 1
            guarded += guard
        if isinstance(node, ast.If | ast.IfExp):
            test = ast.unparse(node.test)
            inner = guard or any(name in test for name in GUARD_NAMES)
            visit(node.test, guard)
            for child in node.body if isinstance(node.body, list) else [node.body]:
                visit(child, inner)
            for child in node.orelse if isinstance(node.orelse, list) else [node.orelse]:
                visit(child, guard)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guard)

    visit(fn, False)
    return total, guarded


def check_hc_post_gated(layer: ClassInfo, decoder: ClassInfo) -> tuple[bool, str]:
    fn = layer.method("forward")
    if fn is None:
        return False, f"{layer.name} has no forward"
    total, guarded = _guarded_calls(fn)
    if total == guarded:
        return True, f"{guarded} hc_post call(s), each gated on returned state"
    if not decoder_can_return_none_state(decoder):
        return True, "hc_post unconditional, and the block always returns deferred state"
    return False, f"{total - guarded} hc_post call(s) run even when the block applied it inline"


def check_target_buffer(target: ClassInfo) -> tuple[bool, str]:
    ok = target.method("get_mtp_target_hidden_states") is not None
    return ok, "get_mtp_target_hidden_states" if ok else "no get_mtp_target_hidden_states"


def check_variant(v: Variant) -> list[Finding]:
    findings = []

    def add(rule: str, needed: tuple, fn: Any) -> None:
        if any(x is None for x in needed):
            findings.append(Finding(v.name, rule, False, "class not found"))
        else:
            ok, detail = fn(*needed)
            findings.append(Finding(v.name, rule, ok, detail))

    add("decoder-binds", (v.decoder,), check_decoder_binds)
    add("decoder-returns-4-tuple", (v.decoder,), check_decoder_returns)
    add("logits-own-attrs", (v.predictor, v.mtp_layer), check_logits_attrs)
    add("hc-post-gated", (v.mtp_layer, v.decoder), check_hc_post_gated)
    add("target-exposes-mtp-buffer", (v.target,), check_target_buffer)
    return findings


# ---------------------------------------------------------------- discovery


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin else None


@functools.cache
def _import(module: str) -> ModuleType | None:
    """One attempt per module: a failing import (another vendor's torch) is not retried."""
    try:
        return importlib.import_module(module)
    except Exception:
        return None


def _load(module: str, path: Path, name: str, importing: bool = True) -> ClassInfo | None:
    cls = getattr(_import(module), name, None) if importing else None
    if cls is not None:
        return class_from_runtime(cls)
    # Not importable here (or absent, or not to be imported): read the source instead.
    return class_from_source(path, name) if path.is_file() else None


def _attach_delegates(info: ClassInfo | None, model_py: Path, package: str, root: Path) -> None:
    """Read, from source, the classes ``__init__`` builds as ``self.X = Cls(...)`` or
    ``Cls.create(...)`` where ``Cls`` is imported from ``package`` (the DSV4 code)."""
    init = info.method("__init__") if info else None
    if info is None or init is None or not model_py.is_file():
        return
    imported = {
        alias.asname or alias.name: node.module
        for node in parsed(model_py).body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + ".")
        for alias in node.names
    }
    for node in ast.walk(init):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        if isinstance(func, ast.Attribute) and func.attr == "create":
            func = func.value
        module = imported.get(getattr(func, "id", ""))
        for target in node.targets:
            if module and isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
                path = root.joinpath(*module.removeprefix(package + ".").split(".")).with_suffix(
                    ".py"
                )
                if path.is_file() and (found := class_from_source(path, func.id)):
                    info.delegates[target.attr] = found


def _compute_logits_owner(mtp_module: str, path: Path, importing: bool) -> ClassInfo | None:
    for name in ("DeepSeekV4MultiTokenPredictor", "DeepSeekMultiTokenPredictor"):
        info = _load(mtp_module, path, name, importing)
        if info and info.method("compute_logits"):
            return info
    return None


def current_platform_variants() -> tuple[str, ...]:
    """The variants vLLM would run here (what the plugin's patches need to look at)."""
    from vllm.platforms import current_platform

    for check, names in (
        (current_platform.is_rocm, PLATFORM_VARIANTS["rocm"]),
        (current_platform.is_xpu, PLATFORM_VARIANTS["xpu"]),
        (current_platform.is_cpu, PLATFORM_VARIANTS["cpu"]),
    ):
        if check():
            return names
    return PLATFORM_VARIANTS["cuda"]


VENDORS = ("nvidia", "amd", "xpu", "cpu")


def discover_variants(only: tuple[str, ...] | None = None, importing: bool = True) -> list[Variant]:
    """The DSV4 variants of the installed vLLM; ``importing=False`` reads source only.

    Importing another platform's variant can load another native kernel library
    into this process (fatal), so ``check_runner`` imports those in a child process.
    """
    variants = []
    root = _package_dir("vllm.models.deepseek_v4")
    if root is not None:
        for vendor in VENDORS:
            if only is not None and vendor not in only:
                continue
            base = f"vllm.models.deepseek_v4.{vendor}"
            model_py, mtp_py = root / vendor / "model.py", root / vendor / "mtp.py"
            if not model_py.exists():
                continue
            variant = Variant(
                vendor,
                decoder=_load(f"{base}.model", model_py, "DeepseekV4DecoderLayer", importing),
                predictor=_compute_logits_owner(f"{base}.mtp", mtp_py, importing),
                mtp_layer=_load(
                    f"{base}.mtp", mtp_py, "DeepSeekV4MultiTokenPredictorLayer", importing
                ),
                target=_load(f"{base}.model", model_py, "DeepseekV4ForCausalLM", importing),
            )
            _attach_delegates(variant.decoder, model_py, "vllm.models.deepseek_v4", root)
            if vendor == "cpu" and variant.mtp_layer is None:
                # Upstream's CPU MTP is a stub; ours is the one that runs there.
                ours = "model_overrides.models.dsv4_mtp_cpu"
                variant.predictor = _load(ours, Path(), "CpuDeepSeekV4MTP")
                variant.mtp_layer = _load(ours, Path(), "CpuDeepSeekV4MTPLayer")
                variant.notes.append("MTP: model_overrides (upstream CPU MTP is a stub)")
            variants.append(variant)
    legacy = _package_dir("vllm.model_executor.models")
    wanted_legacy = only is None or "legacy" in only
    if wanted_legacy and legacy is not None and (legacy / "deepseek_v4.py").exists():
        model_mod, mtp_mod = (
            "vllm.model_executor.models.deepseek_v4",
            "vllm.model_executor.models.deepseek_v4_mtp",
        )
        model_py, mtp_py = legacy / "deepseek_v4.py", legacy / "deepseek_v4_mtp.py"
        variants.append(
            Variant(
                "legacy",
                decoder=_load(model_mod, model_py, "DeepseekV4DecoderLayer", importing),
                predictor=_compute_logits_owner(mtp_mod, mtp_py, importing),
                mtp_layer=_load(mtp_mod, mtp_py, "DeepSeekV4MultiTokenPredictorLayer", importing),
                target=_load(model_mod, model_py, "DeepseekV4ForCausalLM", importing),
                notes=["May-2026 layout (model_executor/models)"],
            )
        )
    return variants


def present_variants() -> list[str]:
    """Names of the variants the installed vLLM ships (no import)."""
    return [v.name for v in discover_variants(importing=False)]
