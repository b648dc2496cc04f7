"""SwiGLU clamp semantics of DSV4's experts, read from the installed vLLM's source.

DSV4 clamps its SwiGLU (up projection to [-limit, limit], gate to at most limit, with
``limit = config.swiglu_limit``) in the routed experts and the shared expert alike. The
rule ``moe-clamp[VARIANT/PATH]`` states, for every DSV4 variant and every expert path vLLM
may pick for a DSV4 checkpoint, whether the routed and the shared experts receive it.

How a verdict is derived (from source, with ``ast``; nothing is imported or run):
- paths: the MoE method DSV4 gets per checkpoint (``PATHS``: bf16, FP8 block, MXFP4,
  NVFP4; a declared table whose citations are checked) names a ``select_*_backend``
  oracle; its ``current_platform.is_X()`` branches give each platform's backend priority
  list and its ``backend_to_kernel_cls`` the expert classes. A class is a candidate on a
  platform when its ``_supports_current_device`` names the platform, its
  ``_supports_activation`` admits SiLU, its ``_supports_quant_scheme`` the path's weight
  key and (monolithic kernels) its ``_supports_routing_method`` DSV4's routing.
- routed experts: a candidate clamps when code reachable from its ``apply`` (its own and
  its bases' methods, and vLLM functions it calls by name; branches of other activations
  skipped) hands the limit (``swiglu_limit``, ``gemm1_clamp_limit``, ``clamp_limit``,
  ``activation_config``, or a local carrying one) to a call. Otherwise its activation
  call, else its weight-taking kernel calls, are cited as dropping it. The plumbing from
  ``DeepseekV4MoE`` through ``FusedMoEFactory`` to ``FusedMoEConfig``/``RoutedExperts``
  and the method's quant config is checked and cited too.
- shared expert: ``DeepseekV4MLP`` must build ``SiluAndMulWithClamp(swiglu_limit)``, get
  the limit from ``DeepseekV4MoE``, and the op must use it; where the shared expert can be
  fused into the routed kernel, it shares the routed verdict.
- variant-only experts (MegaMoE, ROCm's heterogeneous experts) are read the same way from
  their ``forward``/``finalize`` methods.

A dropping candidate is a finding unless ``COVERED`` names our override for that variant
and path, or ``SHADOWED`` shows (with verified citations) that automatic selection never
reaches it. Explicit ``--moe-backend`` choices, LoRA and MoonEP are out of scope.
Compiled kernels (``_C``, FlashInfer, AITER, DeepGEMM, XPU kernels) are not read:
"clamped" means vLLM hands them the limit.
"""

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from model_overrides.compat.vllm_source import ROOTS, module_file, tree_of
from model_overrides.compat.vllm_source import parsed as _tree
from model_overrides.contracts.hc_state_contract import Finding

# ---------------------------------------------------------------- declared facts

# Our overrides that restore the clamp: (variant, path) -> registry patch name.
COVERED: dict[tuple[str, str], str] = {
    ("cpu", "bf16"): "dsv4-cpu-moe-swiglu-clamp",
    ("cpu", "fp8"): "dsv4-moe-clamp-filter",
    ("nvidia", "bf16"): "dsv4-moe-clamp-filter",
    ("nvidia", "fp8"): "dsv4-moe-clamp-filter",
}

# variant -> (module defining DeepseekV4MoE and DeepseekV4MLP, platforms it runs on)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvidia": ("vllm.models.deepseek_v4.nvidia.model", ("cuda",)),
    "amd": ("vllm.models.deepseek_v4.amd.model", ("rocm",)),
    "xpu": ("vllm.models.deepseek_v4.xpu.model", ("xpu",)),
    "cpu": ("vllm.models.deepseek_v4.cpu.model", ("cpu",)),
    "legacy": ("vllm.model_executor.models.deepseek_v4", ("cuda", "rocm")),  # May 2026
}
PLATFORMS = ("cuda", "rocm", "xpu", "cpu")
DSV4_ROUTING = "DeepseekV4"  # RoutingMethodType for sqrtsoftplus + renormalize
MOE = "vllm.model_executor.layers.fused_moe"
QUANT = "vllm.model_executor.layers.quantization"
DSV4_QUANT_CONFIG = "vllm.models.deepseek_v4.quant_config"


@dataclass(frozen=True)
class ExpertPath:
    """A MoE method DSV4 uses for one kind of checkpoint."""

    name: str
    method_module: str
    method_class: str
    weight_key: str | None  # QuantKey name the experts must accept; None: unquantized
    chosen_in: tuple[str, str]  # (module, function) that returns method_class for DSV4


PATHS = (
    # No quantization config, or the experts in its ignored layers.
    ExpertPath(
        "bf16",
        f"{MOE}.unquantized_fused_moe_method",
        "UnquantizedFusedMoEMethod",
        None,
        (f"{MOE}.routed_experts", "_get_quant_method"),
    ),
    # DeepseekV4FP8Config, expert_dtype "fp8" (Flash-Base): falls through to Fp8Config.
    ExpertPath(
        "fp8",
        f"{QUANT}.fp8",
        "Fp8MoEMethod",
        "kFp8Static128BlockSym",
        (f"{QUANT}.fp8", "get_quant_method"),
    ),
    # DeepseekV4FP8Config, expert_dtype "fp4" (Flash): MXFP4 experts.
    ExpertPath(
        "mxfp4",
        f"{QUANT}.mxfp4",
        "Mxfp4MoEMethod",
        "kMxfp4Static",
        (DSV4_QUANT_CONFIG, "get_quant_method"),
    ),
    # DeepseekV4FP8Config, expert_dtype "fp4" with moe_quant_algo NVFP4.
    ExpertPath(
        "nvfp4",
        f"{QUANT}.modelopt",
        "ModelOptNvFp4FusedMoE",
        "kNvfp4Static",
        (DSV4_QUANT_CONFIG, "get_quant_method"),
    ),
)

ACTIVATION_RE = re.compile(r"silu|swiglu|_and_mul")  # a separate activation kernel
LIMIT_RE = re.compile(r"swiglu_limit|clamp_limit|activation_clamp|activation_config")
PLATFORM_CALLS = {
    "is_cuda": {"cuda"},
    "is_rocm": {"rocm"},
    "is_cuda_alike": {"cuda", "rocm"},
    "is_xpu": {"xpu"},
    "is_cpu": {"cpu"},
}
# Calls that read a value without handing it to a kernel.
HELPER_CALLS = {
    "getattr", "hasattr", "isinstance", "float", "int", "bool", "str", "repr", "print",
    "debug", "info", "warning", "info_once", "warning_once", "debug_once", "get", "dict",
}  # fmt: skip
MODULAR_BASES = ("FusedMoEExpertsModular", "FusedMoEExpertsMonolithic", "FusedMoEExperts")
SEARCH_DEPTH = 4
# Methods of a variant's own experts module where kernels are built or run.
SPECIAL_ENTRIES = ("forward", "apply", "_run", "finalize")

# Kernels the automatic choice never reaches for DSV4, because a backend ahead of them in
# the same priority list takes every configuration they take. Each entry is verified: the
# earlier kernel is a candidate ahead of it, and the later one's device check still names
# the capability the reason relies on. (path, kernel) -> (earlier kernel, capability, why)
SHADOWED: dict[tuple[str, str], tuple[str, str, str]] = {
    ("fp8", "HPCExperts"): (
        "TritonExperts",
        "is_device_capability",  # HPC: Hopper (SM90) only
        "only --moe-backend hpc picks it; on SM90 TRITON comes first and runs block FP8",
    ),
}


class Unrecognised(Exception):
    """A cited fact does not hold in the installed source."""


# ---------------------------------------------------------------- source index
# (files and trees: compat/vllm_source.py)


@dataclass(frozen=True)
class Def:
    """A top-level definition (or a method) and the module it lives in."""

    module: str
    node: ast.AST

    @property
    def path(self) -> Path:
        path = module_file(self.module)
        assert path is not None
        return path

    def cite(self, line: int | None = None) -> str:
        return f"{self.path.parent.name}/{self.path.name}:{line or self.node.lineno}"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a (possibly relative) ``from ... import`` in ``module`` names."""
    if not node.level:
        return node.module or ""
    path = module_file(module)
    is_package = path is not None and path.name == "__init__.py"
    parts = module.split(".")
    parts = parts[: len(parts) - node.level + is_package]
    return ".".join(parts + ([node.module] if node.module else []))


@dataclass(frozen=True)
class _ModuleIndex:
    """A module's top-level definitions and the names its ``from`` imports bind."""

    defs: dict[str, ast.AST]  # first top-level class, function or assignment per name
    imports: dict[str, list[tuple[str, str]]]  # bound name -> (source module, name), in walk order


@functools.cache
def _module_index(module: str, path: Path) -> _ModuleIndex:
    # Built once per module: the check resolves ~10^4 names, and walking the whole tree
    # for each one was most of its run time.
    tree = _tree(path)
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            defs.setdefault(node.name, node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    defs.setdefault(target.id, node)
    imports: dict[str, list[tuple[str, str]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                imports.setdefault(alias.asname or alias.name, []).append((source, alias.name))
    return _ModuleIndex(defs, imports)


def find_def(module: str, name: str, depth: int = 0) -> Def | None:
    """The class, function or assignment ``name`` of ``module``, following its imports."""
    path = module_file(module)
    if path is None or depth > 6:
        return None
    index = _module_index(module, path)
    if name in index.defs:
        return Def(module, index.defs[name])
    for source, imported in index.imports.get(name, ()):
        # ROOTS grows as packages are looked up (and tests add their own): read it now.
        if source.split(".")[0] in ROOTS or source.startswith("vllm"):
            return find_def(source, imported, depth + 1)
    return None


def function(module: str, name: str) -> Def:
    found = find_def(module, name)
    if found is None or not isinstance(found.node, ast.FunctionDef):
        raise Unrecognised(f"no function {name} in {module}")
    return found


# ---------------------------------------------------------------- classes


@dataclass
class Chain:
    """A class with its bases (source order, subclass first)."""

    name: str
    classes: list[Def]

    def method(self, name: str, after: int = -1) -> Def | None:
        for index, cdef in enumerate(self.classes):
            if index <= after:
                continue
            for node in cdef.node.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return Def(cdef.module, node)
        return None

    def owner_index(self, fn: Def) -> int:
        for index, cdef in enumerate(self.classes):
            if cdef.module == fn.module and fn.node in cdef.node.body:
                return index
        return -1

    def is_monolithic(self) -> bool:
        return any(c.node.name == "FusedMoEExpertsMonolithic" for c in self.classes)


def class_chain(module: str, name: str) -> Chain:
    found = find_def(module, name)
    if found is None or not isinstance(found.node, ast.ClassDef):
        raise Unrecognised(f"no class {name} in {module}")
    classes, todo = [], [found]
    while todo:
        cdef = todo.pop(0)
        if any(c.node is cdef.node for c in classes):
            continue
        classes.append(cdef)
        for base in cdef.node.bases:
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if base_name in ("ABC", "Module", "Generic", "object"):
                continue
            resolved = _resolve_base(cdef.module, base, base_name)
            if resolved is not None:
                todo.append(resolved)
    return Chain(name, classes)


def _resolve_base(module: str, base: ast.expr, name: str) -> Def | None:
    if isinstance(base, ast.Attribute) and name in MODULAR_BASES:
        found = find_def(f"{MOE}.modular_kernel", name)
    else:
        found = find_def(module, name)
    return found if found and isinstance(found.node, ast.ClassDef) else None


def components(chain: Chain) -> list[Chain] | None:
    """For a runtime dispatcher (``FallbackExperts``), the classes ``get_clses`` returns."""
    fn = chain.method("get_clses")
    if fn is None:
        return None
    for node in ast.walk(fn.node):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            owner = chain.classes[chain.owner_index(fn)].module
            names = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
            return [class_chain(owner, n) for n in names]
    return None


# ---------------------------------------------------------------- names a function mentions


def _names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def mentioned(fn: Def, depth: int = 2) -> set[str]:
    """Names in ``fn`` and in the vLLM functions and module constants it refers to."""
    seen: set[str] = set()
    todo, visited = [(fn, 0)], set()
    while todo:
        current, level = todo.pop()
        if id(current.node) in visited:
            continue
        visited.add(id(current.node))
        names = set(_names(current.node))
        seen |= names
        if level >= depth:
            continue
        for name in names:
            if name[:1].isupper() and not name.isupper():
                continue  # a class: its methods are not what this function does
            found = find_def(current.module, name)
            if found is not None and not isinstance(found.node, ast.ClassDef):
                todo.append((found, level + 1))
    return seen


def _returns_const(fn: Def, value: object) -> bool:
    body = [n for n in fn.node.body if not _is_docstring(n)]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is value
    )


def _returns_true(fn: Def) -> bool:
    return _returns_const(fn, True)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


# ---------------------------------------------------------------- candidate filters


def class_platforms(chain: Chain) -> set[str]:
    parts = components(chain)
    if parts:
        return set.intersection(*(class_platforms(p) for p in parts))
    fn = chain.method("_supports_current_device")
    if fn is None:
        return set()
    names = mentioned(fn, depth=3)
    found = {p for call, ps in PLATFORM_CALLS.items() if call in names for p in ps}
    if any("aiter" in n or n.startswith("on_gfx") for n in names):
        found.add("rocm")
    own = platform_only_methods()
    return found | {p for name in names for p in own.get(name, ())}


PLATFORM_CLASSES = {
    "cuda": ("vllm.platforms.cuda", "CudaPlatformBase"),
    "rocm": ("vllm.platforms.rocm", "RocmPlatform"),
    "xpu": ("vllm.platforms.xpu", "XPUPlatform"),
    "cpu": ("vllm.platforms.cpu", "CpuPlatform"),
}


@functools.cache
def platform_only_methods() -> dict[str, set[str]]:
    """Capabilities only some platforms have: methods the base ``Platform`` lacks or
    answers ``False`` (such as ``support_deep_gemm``), by the platforms that define them."""
    base = find_def("vllm.platforms.interface", "Platform")
    if base is None:
        raise Unrecognised("no vllm.platforms.interface.Platform")
    shared = {
        n.name
        for n in base.node.body
        if isinstance(n, ast.FunctionDef) and not _returns_const(Def(base.module, n), False)
    }
    owners: dict[str, set[str]] = {}
    for platform, (module, name) in PLATFORM_CLASSES.items():
        found = find_def(module, name)
        if found is None:
            raise Unrecognised(f"no {module}.{name}")
        for node in found.node.body:
            if isinstance(node, ast.FunctionDef) and node.name not in shared:
                owners.setdefault(node.name, set()).add(platform)
    return owners


def admits_silu(chain: Chain) -> bool:
    parts = components(chain)
    if parts:
        return all(admits_silu(p) for p in parts)
    fn = chain.method("_supports_activation")
    return fn is not None and (_returns_true(fn) or "SILU" in mentioned(fn))


def admits_weight(chain: Chain, weight_key: str | None) -> bool:
    parts = components(chain)
    if parts:
        return all(admits_weight(p, weight_key) for p in parts)
    fn = chain.method("_supports_quant_scheme")
    if fn is None:
        return False
    if _returns_true(fn):
        return True
    if weight_key is not None:
        return weight_key in mentioned(fn)
    return any(
        isinstance(n, ast.Constant) and n.value is None for n in ast.walk(fn.node)
    )  # unquantized: the scheme (None, None) or ``weight_key is None``


def admits_dsv4_routing(chain: Chain) -> bool:
    if not chain.is_monolithic():
        return True  # routing runs before a modular kernel
    fn = chain.method("_supports_routing_method")
    return fn is not None and (_returns_true(fn) or DSV4_ROUTING in mentioned(fn))


def ineligible_reason(chain: Chain, weight_key: str | None, platform: str) -> str | None:
    if platform not in class_platforms(chain):
        return "another device"
    if not admits_silu(chain):
        return "no SiLU"
    if not admits_weight(chain, weight_key):
        return "another quant scheme"
    if not admits_dsv4_routing(chain):
        return "no DSV4 routing"
    return None


# ---------------------------------------------------------------- limit flow in code


def _other_activation_branch(test: ast.expr) -> bool:
    """An ``if`` that selects a non-SiLU activation (its body never runs for DSV4)."""
    members = {
        n.attr
        for n in ast.walk(test)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        if n.value.id == "MoEActivation"
    }
    return bool(members) and "SILU" not in members


def _silu_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that can run for a SiLU model (skips other activations' branches)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _other_activation_branch(stmt.test):
                yield stmt
                yield from _silu_statements(stmt.body)
            yield from _silu_statements(stmt.orelse)
        elif isinstance(stmt, ast.For | ast.While | ast.With | ast.Try):
            yield stmt
            for block in ("body", "orelse", "finalbody"):
                yield from _silu_statements(getattr(stmt, block, []))
            for handler in getattr(stmt, "handlers", []):
                yield from _silu_statements(handler.body)
        else:
            yield stmt


def _own_expressions(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a statement that are not nested statements."""
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For):
        return [stmt.iter]
    if isinstance(stmt, ast.With):
        return list(stmt.items)
    if isinstance(stmt, ast.Try):
        return []
    return [stmt]


NOTHING: frozenset[str] = frozenset()


def _reads_limit(node: ast.AST, tainted: set[str], dead: frozenset[str] = NOTHING) -> bool:
    """``node`` names the limit (or a local carrying it), other than an attribute that only
    ever holds ``None`` (``dead``)."""
    return any((LIMIT_RE.search(n) or n in tainted) and n not in dead for n in _names(node))


def _tainted(
    fn: ast.FunctionDef, dead: frozenset[str] = NOTHING, carried: frozenset[str] = NOTHING
) -> set[str]:
    """Local names that carry the limit (assigned from an expression that reads it);
    ``carried``: attributes known to hold it (``limit_carriers``)."""
    tainted = {a.arg for a in fn.args.args + fn.args.kwonlyargs if LIMIT_RE.search(a.arg)}
    tainted |= carried
    statements = list(_silu_statements(fn.body))
    changed = True
    while changed:
        changed = False
        for stmt in statements:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if names - tainted and _reads_limit(stmt.value, tainted, dead):
                    tainted |= names
                    changed = True
    return tainted


def limit_calls(
    fn: ast.FunctionDef, dead: frozenset[str] = NOTHING, carried: frozenset[str] = NOTHING
) -> list[ast.Call]:
    """Calls that can run for a SiLU model and are handed the limit."""
    tainted = _tainted(fn, dead, carried)
    found = []
    for stmt in _silu_statements(fn.body):
        for part in _own_expressions(stmt):
            for node in ast.walk(part):
                if isinstance(node, ast.Call) and _call_gets_limit(node, tainted, dead):
                    found.append(node)
    return found


def _call_gets_limit(call: ast.Call, tainted: set[str], dead: frozenset[str] = NOTHING) -> bool:
    if _call_name(call) in HELPER_CALLS:
        return False  # reads the limit, hands it to no kernel
    values = list(call.args) + [k.value for k in call.keywords]
    return any(_reads_limit(v, tainted, dead) for v in values)


def none_only_attributes(chain: Chain) -> frozenset[str]:
    """Limit-named ``self.X`` the class chain only ever sets to ``None``."""
    values: dict[str, list[ast.expr]] = {}
    for cdef in chain.classes:
        for node in ast.walk(cdef.node):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self":
                        values.setdefault(t.attr, []).append(node.value)
    return frozenset(
        attr
        for attr, assigned in values.items()
        if LIMIT_RE.search(attr)
        and all(isinstance(v, ast.Constant) and v.value is None for v in assigned)
    )


def limit_carriers(chain: Chain) -> dict[str, str]:
    """``self.A = P.M()`` in ``__init__``, where the class ``P`` is annotated with builds a
    limit-named kernel argument in ``M``: attribute ``A`` -> parameter ``P``. vLLM 0.33's
    DeepGemmMegaMoEExperts keeps ``activation.kernel_kwargs()`` (``{"activation_clamp":
    clamp}``) and splats it into the kernel call."""
    init = chain.method("__init__")
    if init is None:
        return {}
    args = init.node.args
    annotated = {
        a.arg: a.annotation.id
        for a in args.args + args.kwonlyargs
        if isinstance(a.annotation, ast.Name)
    }
    found = {}
    for node in ast.walk(init.node):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        owner = getattr(getattr(func, "value", None), "id", None)
        if not isinstance(func, ast.Attribute) or owner not in annotated:
            continue
        cls = find_def(init.module, annotated[owner])
        if cls is None or not isinstance(cls.node, ast.ClassDef):
            continue
        method = next(
            (n for n in cls.node.body if isinstance(n, ast.FunctionDef) and n.name == func.attr),
            None,
        )
        if method is None:
            continue
        keys = [
            k.value
            for d in ast.walk(method)
            if isinstance(d, ast.Dict)
            for k in d.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        ]
        if any(LIMIT_RE.search(k) for k in keys):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self":
                    found[t.attr] = owner
    return found


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _limit_score(call: ast.Call) -> int:
    """How plainly a call is handed the limit: by a limit-named keyword (2), by an argument
    naming it (1), through a local variable (0)."""
    if any(k.arg and LIMIT_RE.search(k.arg) for k in call.keywords):
        return 2
    values = list(call.args) + [k.value for k in call.keywords]
    return int(any(LIMIT_RE.search(n) for v in values for n in _names(v)))


def _calls(fn: ast.FunctionDef) -> Iterator[ast.Call]:
    for stmt in _silu_statements(fn.body):
        for part in _own_expressions(stmt):
            yield from (n for n in ast.walk(part) if isinstance(n, ast.Call))


@dataclass
class Reached:
    fn: Def
    via: str | None  # where the class's own code called into it (file:line)


def reachable(chain: Chain, entries: list[Def]) -> list[Reached]:
    """Functions reachable from ``entries``: methods of the chain called on ``self``/``cls``
    or ``super()``, and vLLM functions called by name."""
    out: list[Reached] = []
    todo = [(Reached(e, None), 0) for e in entries]
    seen: set[int] = set()
    while todo:
        item, level = todo.pop(0)
        if id(item.fn.node) in seen:
            continue
        seen.add(id(item.fn.node))
        out.append(item)
        if level >= SEARCH_DEPTH:
            continue
        for call in _calls(item.fn.node):
            target = _callee(chain, item.fn, call)
            if target is not None:
                via = item.via or item.fn.cite(call.lineno)
                todo.append((Reached(target, via), level + 1))
    return out


def _callee(chain: Chain, caller: Def, call: ast.Call) -> Def | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id in ("self", "cls"):
            return chain.method(func.attr)
        return None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        if getattr(func.value.func, "id", "") == "super":
            return chain.method(func.attr, after=chain.owner_index(caller))
        return None
    if isinstance(func, ast.Name):
        found = find_def(caller.module, func.id)
        if found is not None and isinstance(found.node, ast.FunctionDef):
            return found
    return None


def _refusal(fn: Def) -> str | None:
    """``fn``'s body is only ``raise NotImplementedError(...)``."""
    body = [n for n in fn.node.body if not _is_docstring(n)]
    raised = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
    if raised is not None and "NotImplementedError" in set(_names(raised)):
        return fn.cite(body[0].lineno)
    return None


# ---------------------------------------------------------------- expert verdicts


@dataclass(frozen=True)
class Verdict:
    kernel: str  # class name
    clamps: bool | None  # None: refuses to run
    evidence: str


def _kernel_calls(fn: ast.FunctionDef) -> list[ast.Call]:
    """Outermost calls handed the expert weights (``w1``/``w2`` and the like)."""
    weights = {"w1", "w2", "w13", "w13_weight", "w2_weight"}

    def takes_weights(call: ast.Call) -> bool:
        if isinstance(call.func, ast.Attribute) and getattr(call.func.value, "id", "") in weights:
            return False  # a method of the weight tensor itself
        values = list(call.args) + [k.value for k in call.keywords]
        return any(n in weights for v in values for n in _names(v))

    found = [c for c in _calls(fn) if takes_weights(c)]
    nested = {id(inner) for c in found for inner in ast.walk(c) if inner is not c}
    return [c for c in found if id(c) not in nested]


def _short(call: ast.Call) -> str:
    return ast.unparse(call.func)


def analyse(chain: Chain, entries: tuple[str, ...] = ("apply",)) -> Verdict:
    """Does the code reachable from the class's entry methods hand the limit to a call?"""
    parts = components(chain)
    if parts:
        verdicts = [analyse(p, entries) for p in parts]
        dropped = [v for v in verdicts if v.clamps is False]
        detail = "; ".join(f"{v.kernel}: {v.evidence}" for v in dropped or verdicts)
        return Verdict(chain.name, not dropped, f"dispatches to {detail}")
    starts = [m for m in (chain.method(e) for e in entries) if m is not None]
    if not starts:
        raise Unrecognised(f"{chain.name} has no {'/'.join(entries)}")
    reached = reachable(chain, starts)
    for item in reached:
        refused = _refusal(item.fn)
        if refused:
            return Verdict(chain.name, None, f"refuses to run ({refused})")
    dead = none_only_attributes(chain)
    carried = frozenset(limit_carriers(chain))
    passing = [
        (item, call) for item in reached for call in limit_calls(item.fn.node, dead, carried)
    ]
    if passing:
        own = {c.module for c in chain.classes if c.node.name not in MODULAR_BASES}
        item, call = max(passing, key=lambda p: (p[0].fn.module in own, _limit_score(p[1])))
        site = item.fn.cite(call.lineno)
        where = f"{site} {_short(call)}"
        if item.via and item.via.split(":")[0] != site.split(":")[0]:
            where = f"{item.via} → {where}"
        return Verdict(chain.name, True, f"{where} gets the limit")
    evidence = _drop_evidence(reached) or f"{starts[0].cite()} passes no limit"
    return Verdict(chain.name, False, evidence)


def _drop_evidence(reached: list[Reached]) -> str | None:
    """A separate activation call if there is one, else the calls handed the weights in
    the first function that has them (each branch's kernel: all of them drop it)."""
    for item in reached:
        acts = [c for c in _calls(item.fn.node) if ACTIVATION_RE.search(_call_name(c))]
        if acts:
            return f"{item.fn.cite(acts[0].lineno)} {_short(acts[0])} has no limit"
    for item in reached:
        calls = _kernel_calls(item.fn.node)
        if calls:
            sites = ", ".join(f"{item.fn.cite(c.lineno)} {_short(c)}" for c in calls)
            return f"{sites} {'has' if len(calls) == 1 else 'have'} no limit"
    return None


# ---------------------------------------------------------------- oracles


@dataclass
class Selection:
    """The expert classes an oracle may pick on each platform."""

    backends: dict[str, list[str]]  # platform -> backend enum members, priority order
    classes: dict[str, list[tuple[str, str]]]  # backend -> [(module, class)]
    notes: list[str] = field(default_factory=list)


def _enum_list(node: ast.AST) -> list[str] | None:
    """``[Enum.A, Enum.B]`` (or a tuple or set of them) as ``["A", "B"]``."""
    if not (isinstance(node, ast.List | ast.Tuple | ast.Set) and node.elts):
        return None
    if all(isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) for e in node.elts):
        return [e.attr for e in node.elts]
    return None


def _platform_test(test: ast.expr) -> set[str] | None:
    """Platforms an ``if`` test restricts to (other conjuncts assumed true for DSV4)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _platform_test(test.operand)
        return None if inner is None else set(PLATFORMS) - inner
    found: set[str] = set()
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found |= PLATFORM_CALLS.get(node.func.attr, set())
            if node.func.attr in ("is_tpu", "is_out_of_tree"):
                found.add("other")
    return found or None


def priority_backends(fn: Def) -> dict[str, list[str]]:
    """Each platform's backend list in a ``select_*``/``_get_priority_backends`` function:
    enum lists assigned or returned under ``current_platform.is_X()`` tests, and calls to
    a ``*priority_backends*`` helper, which are read the same way."""
    lists: dict[str, list[str]] = {}
    _walk_block(fn, fn.node.body, set(PLATFORMS), lists)
    return lists


def _walk_block(fn: Def, body: list[ast.stmt], remaining: set[str], lists: dict) -> set[str]:
    for stmt in body:
        if isinstance(stmt, ast.If) and (platforms := _platform_test(stmt.test)) is not None:
            inside = remaining & platforms
            _walk_block(fn, stmt.body, inside, lists)
            rest = remaining - platforms
            after_else = _walk_block(fn, stmt.orelse, rest, lists)
            if _ends_with_return(stmt.body):
                remaining = rest if not stmt.orelse else after_else
            continue
        if isinstance(stmt, ast.If):
            _walk_block(fn, stmt.body, remaining, lists)
            _walk_block(fn, stmt.orelse, remaining, lists)
            continue
        value = getattr(stmt, "value", None)
        if isinstance(stmt, ast.Assign | ast.Return) and value is not None:
            _take_source(fn, value, remaining, lists)
    return remaining


def _take_source(fn: Def, value: ast.expr, platforms: set[str], lists: dict) -> None:
    members = _enum_list(value)
    if members is not None:
        for platform in platforms:
            lists.setdefault(platform, members)
        return
    if isinstance(value, ast.Call) and "priority_backends" in getattr(value.func, "id", ""):
        helper = function(fn.module, value.func.id)
        for platform, members in priority_backends(helper).items():
            if platform in platforms:
                lists.setdefault(platform, members)


def _ends_with_return(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Raise)


def clamp_filter(fn: Def) -> tuple[set[str], str] | None:
    """An ``if ...swiglu_limit...:`` keeping only backends ``in`` a named set."""
    for node in ast.walk(fn.node):
        if not (isinstance(node, ast.If) and "swiglu_limit" in set(_names(node.test))):
            continue
        for comp in (n for n in ast.walk(node) if isinstance(n, ast.ListComp)):
            for cond in (c for gen in comp.generators for c in gen.ifs):
                if not (isinstance(cond, ast.Compare) and isinstance(cond.ops[0], ast.In)):
                    continue
                name = getattr(cond.comparators[0], "id", "")
                members = _local_enum_set(fn, name) if name else None
                if members:
                    return members, fn.cite(node.lineno)
    return None


def _local_enum_set(fn: Def, name: str) -> set[str] | None:
    for node in ast.walk(fn.node):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            members = _enum_list(node.value)
            if members:
                return set(members)
    return None


def backend_classes(oracle: str) -> dict[str, list[tuple[str, str]]]:
    """``backend_to_kernel_cls``: backend member -> the expert classes it returns."""
    fn = function(oracle, "backend_to_kernel_cls")
    out: dict[str, list[tuple[str, str]]] = {}
    for node in ast.walk(fn.node):
        if not isinstance(node, ast.If):
            continue
        imports = {
            alias.asname or alias.name: stmt.module
            for stmt in node.body
            if isinstance(stmt, ast.ImportFrom)
            for alias in stmt.names
        }
        returned = [s.value for s in node.body if isinstance(s, ast.Return)]
        if not returned or not isinstance(returned[0], ast.List):
            continue
        classes = [(imports.get(e.id, oracle), e.id) for e in returned[0].elts]
        for member in _tested_members(oracle, node.test):
            out[member] = classes
    if not out:
        raise Unrecognised(f"backend_to_kernel_cls of {oracle} maps no backend")
    return out


def _tested_members(oracle: str, test: ast.expr) -> list[str]:
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        right = test.comparators[0]
        members = _enum_list(right)
        if members is not None:
            return members
        if isinstance(right, ast.Attribute):
            return [right.attr]
        if isinstance(right, ast.Name):
            found = find_def(oracle, right.id)
            if found is not None:
                return _enum_list(found.node.value) or []
    return []


def selection(path: ExpertPath) -> Selection:
    """The backend oracle ``path``'s MoE method calls, read into a Selection."""
    method = class_chain(path.method_module, path.method_class)
    init = method.method("__init__")
    if init is None:
        raise Unrecognised(f"{path.method_class} has no __init__")
    selector = next(
        (
            call.func.id
            for call in ast.walk(init.node)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            if call.func.id.startswith("select_") and call.func.id.endswith("backend")
        ),
        None,
    )
    if selector is None:
        raise Unrecognised(f"{path.method_class}.__init__ calls no select_*_backend")
    fn = function(init.module, selector)
    backends = priority_backends(fn)
    if not backends:
        raise Unrecognised(f"{selector} has no backend priority list")
    chosen = Selection(backends, backend_classes(fn.module))
    chosen.notes.append(f"backend oracle: {init.cite()} {selector} ({fn.cite()})")
    kept = clamp_filter(fn)
    if kept is not None:
        members, site = kept
        chosen.backends = {p: [b for b in bs if b in members] for p, bs in backends.items()}
        chosen.notes.append(f"{site} keeps clamping backends only")
    return chosen


def check_path_cited(path: ExpertPath) -> str:
    """The method class is named where DSV4's config (or vLLM's default) picks it."""
    module, name = path.chosen_in
    tree = tree_of(module)
    if tree is None:
        raise Unrecognised(f"no module {module}")
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    for fn in fns:
        if path.method_class in set(_names(fn)):
            return Def(module, fn).cite()
    raise Unrecognised(f"{module}.{name} no longer picks {path.method_class}")


def plumbed_limit(path: ExpertPath) -> str | None:
    """Where the method hands the layer's swiglu_limit to its FusedMoEQuantConfig."""
    method = class_chain(path.method_module, path.method_class)
    fn = method.method("get_fused_moe_quant_config")
    if fn is None:
        return None
    for node in ast.walk(fn.node):
        if isinstance(node, ast.Constant) and node.value == "swiglu_limit":
            return fn.cite(node.lineno)
        if isinstance(node, ast.Attribute) and node.attr == "swiglu_limit":
            return fn.cite(node.lineno)
    return None


# ---------------------------------------------------------------- per variant


@dataclass
class Candidate:
    backend: str
    verdict: Verdict
    conditions: str = ""
    shadowed_by: str | None = None  # never picked automatically (SHADOWED)


@dataclass
class PathResult:
    variant: str
    path: str
    candidates: list[Candidate]
    shared: str
    shared_clamps: bool
    notes: list[str] = field(default_factory=list)
    unrecognised: str | None = None

    @property
    def dropped(self) -> list[Candidate]:
        return [c for c in self.candidates if c.verdict.clamps is False and not c.shadowed_by]

    @property
    def runnable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.verdict.clamps is not None]


def _variant_module(variant: str) -> str:
    return VARIANTS[variant][0]


def _callee_names(func: ast.expr) -> set[str]:
    """What a call may call: ``f``, ``x.f``, and each side of ``(cls or f)`` or
    ``(f if c else g)`` (vLLM 0.33's FusedMoEFactory builds ``(moe_config_cls or
    FusedMoEConfig)(...)``)."""
    if isinstance(func, ast.Name):
        return {func.id}
    if isinstance(func, ast.Attribute):
        return {func.attr}
    if isinstance(func, ast.BoolOp):
        return set().union(*(_callee_names(v) for v in func.values))
    if isinstance(func, ast.IfExp):
        return _callee_names(func.body) | _callee_names(func.orelse)
    return set()


def _calls_named(node: ast.AST, name: str) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and name in _callee_names(c.func)]


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def shared_expert(variant: str) -> tuple[bool, str]:
    """Does the variant's shared expert (DeepseekV4MLP) clamp?"""
    module = _variant_module(variant)
    mlp = class_chain(module, "DeepseekV4MLP")
    init, forward = mlp.method("__init__"), mlp.method("forward")
    if init is None or forward is None:
        raise Unrecognised("DeepseekV4MLP lacks __init__/forward")
    builds = [
        c for c in _calls_named(init.node, "SiluAndMulWithClamp") if _call_gets_limit(c, set())
    ]
    if not builds:
        return False, f"{init.cite()} DeepseekV4MLP builds no SiluAndMulWithClamp(swiglu_limit)"
    if not _calls_named(forward.node, "act_fn"):
        return False, f"{forward.cite()} DeepseekV4MLP.forward does not call act_fn"
    moe = class_chain(module, "DeepseekV4MoE")
    passes = [
        c
        for cdef in moe.classes
        for c in _calls_named(cdef.node, "DeepseekV4MLP")
        if (v := _keyword(c, "swiglu_limit")) is not None and _reads_limit(v, set())
    ]
    if not passes:
        return False, "DeepseekV4MoE builds DeepseekV4MLP without swiglu_limit"
    op = clamp_op_evidence()
    site = Def(module, passes[0]).cite(passes[0].lineno)
    return True, f"{init.cite(builds[0].lineno)} SiluAndMulWithClamp, limit from {site}; {op}"


@functools.cache
def clamp_op_evidence() -> str:
    """SiluAndMulWithClamp clamps on every platform: its native forward (CPU, XPU) and its
    CUDA/ROCm forward both hand swiglu_limit to a call."""
    op = class_chain("vllm.model_executor.layers.activation", "SiluAndMulWithClamp")
    native, cuda = op.method("forward_native"), op.method("forward_cuda")
    if native is None or cuda is None or not limit_calls(native.node) or not limit_calls(cuda.node):
        raise Unrecognised("SiluAndMulWithClamp's forwards do not use swiglu_limit")
    return f"{native.cite()} forward_native clamps"


def _moe_class(variant: str) -> Chain:
    return class_chain(_variant_module(variant), "DeepseekV4MoE")


def factory_call(variant: str) -> tuple[ast.Call, Def]:
    moe = _moe_class(variant)
    for cdef in moe.classes:
        for call in _calls_named(cdef.node, "FusedMoEFactory"):
            return call, cdef
    raise Unrecognised(f"{variant} DeepseekV4MoE builds no FusedMoEFactory")


def factory_plumbing(variant: str) -> tuple[bool, str]:
    """DeepseekV4MoE -> FusedMoEFactory(swiglu_limit=) -> FusedMoEConfig / RoutedExperts."""
    call, cdef = factory_call(variant)
    value = _keyword(call, "swiglu_limit")
    site = cdef.cite(call.lineno)
    if value is None or not _reads_limit(value, set()):
        return False, f"{site} FusedMoEFactory gets no swiglu_limit"
    factory = function(f"{MOE}.layer", "FusedMoEFactory")
    builds = {
        name: _calls_named(factory.node, name) for name in ("FusedMoEConfig", "routed_experts_cls")
    }
    if missing := [name for name, calls in builds.items() if not calls]:
        # No such call at all is code we do not know, not a dropped limit.
        raise Unrecognised(f"{factory.cite()} FusedMoEFactory builds no {', '.join(missing)}")
    to_config = [c for c in builds["FusedMoEConfig"] if _keyword_limit(c)]
    to_experts = [c for c in builds["routed_experts_cls"] if _keyword_limit(c)]
    if not to_config or not to_experts:
        return False, f"{factory.cite()} FusedMoEFactory drops swiglu_limit"
    return True, (
        f"{site} FusedMoEFactory(swiglu_limit=) -> {factory.cite(to_config[0].lineno)} "
        f"FusedMoEConfig, {factory.cite(to_experts[0].lineno)} RoutedExperts"
    )


def _keyword_limit(call: ast.Call) -> bool:
    value = _keyword(call, "swiglu_limit")
    return value is not None and _reads_limit(value, set())


def shared_fusable(variant: str) -> str | None:
    """Where the shared expert may run inside the routed kernel instead (file:line)."""
    call, cdef = factory_call(variant)
    value = _keyword(call, "fuse_shared_experts")
    if value is None or (isinstance(value, ast.Constant) and not value.value):
        return None
    if isinstance(value, ast.Attribute) and _always_false(cdef, value.attr):
        return None
    return cdef.cite(call.lineno)


def _always_false(cdef: Def, attr: str) -> bool:
    values = [
        n.value
        for n in ast.walk(cdef.node)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute) and t.attr == attr
    ]
    return bool(values) and all(isinstance(v, ast.Constant) and not v.value for v in values)


def path_result(variant: str, path: ExpertPath) -> PathResult:
    shared_ok, shared = shared_expert(variant)
    result = PathResult(variant, path.name, [], shared, shared_ok)
    result.notes.append(f"method: {path.method_class}, picked at {check_path_cited(path)}")
    plumbed, plumbing = factory_plumbing(variant)
    quant_site = plumbed_limit(path)
    chosen = selection(path)
    result.notes += chosen.notes
    for backend, chain in candidates(chosen, path, VARIANTS[variant][1]):
        verdict = analyse(chain)
        if not plumbed and verdict.clamps:
            verdict = Verdict(chain.name, False, plumbing)
        elif quant_site is None and verdict.clamps and _only_quant_limit(chain):
            verdict = Verdict(chain.name, False, f"{verdict.evidence}, but the config has none")
        result.candidates.append(Candidate(backend, verdict, _conditions(chain)))
    _mark_shadowed(result, path, chosen)
    result.notes.append(plumbing)
    if quant_site:
        result.notes.append(f"quant config gemm1_clamp_limit from layer.swiglu_limit: {quant_site}")
    fused = shared_fusable(variant)
    if fused:
        result.shared += f"; fused into the routed kernel when enabled ({fused}): as routed"
        result.shared_clamps = result.shared_clamps and not result.dropped
    return result


def candidates(
    chosen: Selection, path: ExpertPath, platforms: tuple[str, ...]
) -> list[tuple[str, Chain]]:
    """(backend, class) pairs the oracle may pick for ``path`` on ``platforms``, in order."""
    found: list[tuple[str, Chain]] = []
    for platform in platforms:
        for backend in chosen.backends.get(platform, []):
            for module, name in chosen.classes.get(backend, []):
                chain = class_chain(module, name)
                if any(c.name == name for _, c in found):
                    continue
                if ineligible_reason(chain, path.weight_key, platform) is None:
                    found.append((backend, chain))
    return found


def _mark_shadowed(result: PathResult, path: ExpertPath, chosen: Selection) -> None:
    """Mark candidates SHADOWED names, where its cited facts still hold."""
    names = [c.verdict.kernel for c in result.candidates]
    for index, candidate in enumerate(result.candidates):
        entry = SHADOWED.get((path.name, candidate.verdict.kernel))
        if entry is None:
            continue
        earlier, capability, why = entry
        device = class_chain(*_class_ref(chosen, candidate)).method("_supports_current_device")
        if earlier in names[:index] and device and capability in set(_names(device.node)):
            candidate.shadowed_by = f"{earlier}: {why}"


def _class_ref(chosen: Selection, candidate: "Candidate") -> tuple[str, str]:
    for module, name in chosen.classes[candidate.backend]:
        if name == candidate.verdict.kernel:
            return module, name
    raise Unrecognised(f"{candidate.verdict.kernel} left {candidate.backend}")


def _conditions(chain: Chain) -> str:
    """When the kernel is usable, as its own checks say (device, parallel setup, format)."""
    parts = []
    for method in ("_supports_current_device", "_supports_parallel_config"):
        fn = chain.method(method)
        returned = [n.value for n in ast.walk(fn.node) if isinstance(n, ast.Return)] if fn else []
        if len(returned) == 1 and returned[0] is not None:
            text = " ".join(ast.unparse(returned[0]).split())
            if text != "True":
                parts.append(text if len(text) <= 200 else text[:197] + "...")
    fmt = chain.method("activation_format")
    if fmt is not None and "BatchedExperts" in set(_names(fmt.node)):
        parts.append("batched activation format")
    return "; ".join(parts)


def _only_quant_limit(chain: Chain) -> bool:
    names = {n for c in chain.classes for n in _names(c.node) if LIMIT_RE.search(n)}
    return bool(names) and names <= {"gemm1_clamp_limit"}


# ---------------------------------------------------------------- variant-only experts


def special_experts(variant: str) -> list[tuple[str, Chain, ast.Call, Def]]:
    """Expert classes a variant's DeepseekV4MoE builds besides FusedMoEFactory's: what it
    assigns to ``self.experts`` directly, and a ``routed_experts_cls`` it hands the factory."""
    module = _variant_module(variant)
    moe = _moe_class(variant)
    found = []
    for cdef in moe.classes:
        for node in ast.walk(cdef.node):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            targets = [t for t in node.targets if isinstance(t, ast.Attribute)]
            name = getattr(node.value.func, "id", "")
            if any(t.attr == "experts" for t in targets) and name != "FusedMoEFactory":
                found.append((name, class_chain(module, name), node.value, cdef))
    call, cdef = factory_call(variant)
    value = _keyword(call, "routed_experts_cls")
    for name in (n.id for n in ast.walk(value) if isinstance(n, ast.Name)) if value else ():
        resolved = find_def(module, name)
        if resolved is not None and isinstance(resolved.node, ast.ClassDef):
            found.append((name, class_chain(module, name), call, cdef))
    return found


def _label(name: str) -> str:
    """``DeepseekV4AiterMegaMoEExperts`` -> ``AiterMegaMoE``; a long one keeps its first word."""
    label = name.removeprefix("DeepseekV4").removesuffix("Experts") or name
    return label if len(label) <= 16 else re.findall(r"[A-Z][a-z0-9]*|.+", label)[0]


def special_result(variant: str, item: tuple[str, Chain, ast.Call, Def]) -> PathResult:
    name, chain, built, owner = item
    own = [
        Def(chain.classes[0].module, n)
        for n in chain.classes[0].node.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith(SPECIAL_ENTRIES)
    ]
    verdict = analyse(chain, tuple(fn.node.name for fn in own))
    missing = _unfed_limit_params(chain, built, owner)
    if verdict.clamps and missing:
        verdict = Verdict(name, False, missing)
    shared_ok, shared = shared_expert(variant)
    if _fuses_shared(chain) and verdict.clamps is not None:
        shared += "; fused into this kernel when enabled: as routed"
        shared_ok = shared_ok and bool(verdict.clamps)
    return PathResult(variant, _label(name), [Candidate("-", verdict)], shared, shared_ok)


def _fuses_shared(chain: Chain) -> bool:
    """The experts class can take the shared expert in (a ``*shared*`` constructor argument)."""
    init = chain.method("__init__")
    args = init.node.args if init else None
    return args is not None and any("shared" in a.arg for a in args.args + args.kwonlyargs)


def _unfed_limit_params(chain: Chain, built: ast.Call, owner: Def) -> str | None:
    """A limit parameter of ``__init__``/``forward`` its owner leaves unset."""
    init, forward = chain.method("__init__"), chain.method("forward")
    if init is not None:
        for arg in _limit_params(init) + sorted(set(limit_carriers(chain).values())):
            value = _keyword(built, arg)
            if value is None or not _reads_limit(value, set()):
                return f"{owner.cite(built.lineno)} builds it without {arg}"
    if forward is not None:
        for arg in _limit_params(forward):
            calls = [c for c in _calls_named(owner.node, "experts") if _keyword(c, arg)]
            if not calls:
                return f"{owner.cite()} calls self.experts without {arg}"
    return None


def _limit_params(fn: Def) -> list[str]:
    args = fn.node.args
    return [a.arg for a in args.args + args.kwonlyargs if LIMIT_RE.search(a.arg)]


# ---------------------------------------------------------------- findings


def rule_name(variant: str, path: str) -> str:
    return f"moe-clamp[{variant}/{path}]"


def _unrecognised(variant: str, path: str, exc: Unrecognised) -> PathResult:
    return PathResult(variant, path, [], "", False, unrecognised=str(exc))


@functools.cache
def results_for(variant: str) -> tuple[PathResult, ...]:
    """Every expert path of ``variant``: DSV4's quantization paths, then its own experts."""
    results = []
    for path in PATHS:
        try:
            results.append(path_result(variant, path))
        except Unrecognised as exc:
            results.append(_unrecognised(variant, path.name, exc))
    try:
        specials = special_experts(variant)
    except Unrecognised as exc:
        return (*results, _unrecognised(variant, "own-experts", exc))
    for item in specials:
        try:
            results.append(special_result(variant, item))
        except Unrecognised as exc:
            results.append(_unrecognised(variant, _label(item[0]), exc))
    return tuple(results)


def render(result: PathResult) -> Finding:
    """The finding: a summary line, then one line per kernel and the plumbing cited."""
    rule = rule_name(result.variant, result.path)
    if result.unrecognised:
        return Finding(result.variant, rule, False, f"unrecognised: {result.unrecognised}")
    routed, routed_ok = _routed_summary(result)
    shared = f"shared: {'clamped' if result.shared_clamps else 'DROPPED'} ({result.shared})"
    kernels = [_kernel_line(c) for c in result.candidates]
    detail = "\n".join([f"{routed}; {shared}", *kernels, *result.notes])
    return Finding(result.variant, rule, routed_ok and result.shared_clamps, detail)


def _kernel_line(candidate: Candidate) -> str:
    verdict = candidate.verdict
    line = f"{verdict.kernel}: {verdict.evidence}"
    if verdict.clamps is False and candidate.shadowed_by:
        return f"{line} (not picked automatically: {candidate.shadowed_by})"
    if verdict.clamps is False and candidate.conditions:
        return f"{line} [picked when: {candidate.conditions}]"
    return line


def _routed_summary(result: PathResult) -> tuple[str, bool]:
    if not result.runnable:
        return "routed: no expert kernel runs DSV4 here", True
    if not result.dropped:
        names = ", ".join(c.verdict.kernel for c in result.runnable)
        return f"routed: clamped ({names})", True
    names = ", ".join(c.verdict.kernel for c in result.dropped)
    covered = COVERED.get((result.variant, result.path))
    text = f"routed: DROPPED by {names}"
    if covered:
        return f"{text} — covered by override {covered}", True
    return text, False


def findings_for(variant: str) -> list[Finding]:
    """One ``moe-clamp`` finding per expert path of ``variant`` (read from source)."""
    if variant not in VARIANTS:
        return []
    return [render(r) for r in results_for(variant)]
