"""Local bench targets built from a preset: vLLM's own OpenAI server with MTP k
(``vllm-kK``) or the Ray Serve app (``ray-app...``, ``serving.cli up``), with the preset's
engine arguments, environment and accelerator. Builds commands and environments only;
``serving.bench.local`` starts them.

On a GPU all local targets share one device, each its own engine: the bench gives each a
fixed KV cache (``kv_cache_memory_bytes``) and a ``gpu_memory_utilization`` share small
enough that vLLM's start-up check (free memory >= utilization x total,
vllm/v1/worker/utils.py ``request_memory``) passes for every one of them. Both go through
the preset's ``--set`` overrides, so vLLM's server and the Ray app get the same values.

A kind may end in ``@avx512`` or ``@avx2`` (CPU presets only): that server runs on vLLM's
lower CPU kernel library (``DSV4_CPU_KERNEL_LIBRARY``), i.e. on our eager fallbacks.

``vllm-kK~PROFILE`` (a bench model's preset only) is vLLM's server at k = K with an
acceptance profile's synthetic rates in place of the preset's
(``serving.bench.acceptance_profiles``): one run measures each k under several acceptances."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field

from model_overrides.guard.spec_guard_config import GUARD_ENV, LOG_ENV, GuardSettings
from model_overrides.kernels.kernel_library import FORCE_ENV, LIBRARIES
from serving.bench.acceptance_profiles import SEPARATOR, AcceptanceProfile, profile
from serving.config.build_args import BuildArgs, resolve
from serving.config.llm_config import resolve_model_source
from serving.config.preset import Preset, SyntheticAcceptance
from serving.config.vllm_args import to_cli_args
from serving.monitoring.metrics_page import RAY_EXPORT_PERIOD_S

GIB = 1 << 30
# The share of the GPU all local engines' start-up checks may claim together.
GPU_SHARE = 0.8
# As the GPU suite's engines (tests/gpu/jobs.py): 128 golden streams of a few hundred
# tokens fill a small part of it.
DEFAULT_KV_CACHE_GIB = 2.0
AGGREGATED, DISAGGREGATED = "ray-app-ingress", "ray-app-pd"
# On a GPU preset the P/D arm's two engines share the bench's one GPU (Ray's fractional
# bundles), as Ray Serve LLM's prefill and decode replicas would share a card.
PD_GPU_SHARE_SETS = (
    "disaggregation.prefill.gpu_share=0.45",
    "disaggregation.decode.gpu_share=0.45",
)
# The Ray Serve app as the preset configures it, and the layouts and Ray switches to
# compare it with: (`up --set` assignments, extra environment).
RAY_APP_VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "ray-app": ([], {}),
    "ray-app-python-proxy": (["serving.proxy=python"], {}),
    # Prefix-aware routing (serving/routing), and one replica: the routing bench's ideal.
    "ray-app-prefix": (["serving.routing=prefix"], {}),
    "ray-app-single": (["deployment.replicas=1"], {}),
    # Ray's throughput switches one by one, and the bundle off (it is on by default).
    "ray-app-no-throughput-bundle": ([], {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0"}),
    "ray-app-gc-frozen-only": (
        [],
        {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_FREEZE_GC_ON_STARTUP": "1"},
    ),
    "ray-app-same-thread-only": (
        [],
        {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"},
    ),
    # The P/D bench's arms (serving/bench/pd_bench.py): one engine behind Ray Serve LLM's
    # ingress, and prefill and decode engines behind the same ingress, KV over NIXL.
    AGGREGATED: (["serving.path=ingress"], {}),
    DISAGGREGATED: (["serving.path=ingress", "disaggregation.connector=nixl"], {}),
    # The earlier layout: a separate OpenAiIngress replica, Ray's Python proxy and Ray
    # Serve LLM's default 50 ms stream batching (kept runnable for one release).
    "ray-app-old": (
        ["serving.path=ingress", "serving.proxy=python", "serving.stream_batching_interval_ms=50"],
        {},
    ),
}
_VLLM_KIND = re.compile(rf"vllm-k([0-8])(?:{SEPARATOR}([a-z0-9-]+))?")
# vLLM's server at the preset's k with a speculation guard: vLLM's batch-size table, or
# ours (model_overrides/guard/spec_guard.py). Either takes the preset's own guard settings when
# they are of that mode, else these defaults. The idle drafter is the preset's k with our
# guard scripted to k=0 every step: vLLM still runs its drafter's first pass then (to keep
# the draft model's KV cache in step), so it is what no choice of k can beat on "zero".
IDLE_DRAFTER = "vllm-idle-drafter"
GUARD_KINDS = ("vllm-batch", "vllm-guard", IDLE_DRAFTER)


# A table as a user would write it from the published DSV4 figures (MTP +75% at
# concurrency 1, -37% at 32 on MI355X, vllm#43385): full k up to batch 8, one draft to
# 16, none above.
def default_batch_table(k: int) -> list[tuple[int, int, int]]:
    return [(1, 8, k), (9, 16, min(1, k)), (17, 1 << 16, 0)]


# Ray's metrics export cadence (ms); Ray floors it at 1 s.
RAY_REPORT_INTERVAL_ENV = "RAY_metrics_report_interval_ms"


@dataclass(frozen=True)
class LocalSetup:
    """The preset every local target starts from, with the overrides applied."""

    preset_name: str
    sets: tuple[str, ...]  # `--set` assignments: the bench's budget first, the user's after
    preset: Preset
    model_dir: str
    ray_metrics_interval_ms: int | None = None

    @property
    def on_gpu(self) -> bool:
        return self.preset.accelerator.kind != "cpu"

    def summary(self) -> dict:
        """What the report records about the setup."""
        acc = self.preset.accelerator
        return {
            "preset": self.preset.name,
            "description": self.preset.description,
            "accelerator": {"kind": acc.kind, "type": acc.type},
            "golden": self.preset.model.golden,
            "model": self.preset.model.id,
            "sets": list(self.sets),
            "engine_args": self.preset.engine_kwargs(),
            "env": dict(self.preset.env),
            "monitoring_draft_cost_ratio": self.preset.monitoring.draft_cost_ratio,
            "ray_metrics_interval_ms": self.ray_metrics_interval_ms,
            "golden_model": golden_shape() if self.preset.model.golden else None,
            "bench_model": bench_shape(self.preset) if self.preset.model.bench else None,
            "synthetic_acceptance": synthetic.model_dump(exclude_none=True)
            if (synthetic := self.preset.speculation.synthetic_acceptance)
            else None,
        }


def golden_shape() -> dict:
    """The golden checkpoint's size, for the report's caveat."""
    from serving.golden.architecture import golden_config

    config = golden_config()
    return {
        "hidden_size": config["hidden_size"],
        "layers": config["num_hidden_layers"],
        "mtp_layers": config["num_nextn_predict_layers"],
        "routed_experts": config["n_routed_experts"],
        "expert_width": config["moe_intermediate_size"],
    }


def bench_shape(preset: Preset) -> dict:
    """A bench model's shape (the report's model line)."""
    from serving.bench_model.shapes import MARKER, bench_config

    bench = preset.model.bench
    assert bench is not None
    config = bench_config(bench.shape, bench.layers, bench.experts)
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "n_routed_experts")
    keys += ("moe_intermediate_size", "expert_dtype", "compress_ratios")
    return {**config[MARKER], **{k: config[k] for k in keys}}


def budget_sets(preset: Preset, engines: int, kv_cache_gib: float) -> list[str]:
    """`--set` assignments that bound one engine's GPU memory when ``engines`` share it."""
    share = GPU_SHARE / max(engines, 1)
    utilization = min(float(preset.engine_args.get("gpu_memory_utilization", 0.9)), share)
    return [
        f"engine_args.kv_cache_memory_bytes={int(kv_cache_gib * GIB)}",
        f"engine_args.gpu_memory_utilization={utilization:.3f}",
    ]


def local_setup(
    preset_name: str = "cpu-tiny",
    sets: list[str] | tuple[str, ...] = (),
    engines: int = 1,
    kv_cache_gib: float | None = None,
    ray_metrics_interval_ms: int | None = None,
) -> LocalSetup:
    """``kv_cache_gib``: None is the default budget on a GPU preset, 0 none (the preset's
    own ``gpu_memory_utilization``); CPU presets never get one (their KV is
    ``VLLM_CPU_KVCACHE_SPACE``)."""
    _, base = resolve(BuildArgs(preset=preset_name, set=list(sets)))
    gib = DEFAULT_KV_CACHE_GIB if kv_cache_gib is None else kv_cache_gib
    budget = budget_sets(base, engines, gib) if base.accelerator.kind != "cpu" and gib else []
    all_sets = (*budget, *sets)
    _, preset = resolve(BuildArgs(preset=preset_name, set=list(all_sets)))
    return LocalSetup(
        preset_name, all_sets, preset, resolve_model_source(preset), ray_metrics_interval_ms
    )


@dataclass(frozen=True)
class LocalSpec:
    """How to start one local target and where it answers."""

    kind: str
    command: list[str]
    env: dict[str, str] = field(repr=False)
    port: int
    metrics_url: str
    model: str
    ray_app: bool
    settle_period_s: float
    settle_timeout_s: float

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def split_kind(kind: str) -> tuple[str, str]:
    base, _, isa = kind.partition("@")
    return base, isa


def kind_profile(kind: str) -> AcceptanceProfile | None:
    """The acceptance profile a ``vllm-kK~PROFILE`` kind names (None without one)."""
    match = _VLLM_KIND.fullmatch(split_kind(kind)[0])
    return profile(match.group(2)) if match and match.group(2) else None


def variant_sets(base: str, setup: LocalSetup) -> list[str]:
    """A Ray app variant's `up --set` assignments on this setup's preset."""
    sets = list(RAY_APP_VARIANTS[base][0])
    if base == DISAGGREGATED and setup.on_gpu:
        sets += PD_GPU_SHARE_SETS
    return sets


def check_kind(kind: str, setup: LocalSetup) -> None:
    base, isa = split_kind(kind)
    if not (_VLLM_KIND.fullmatch(base) or base in RAY_APP_VARIANTS or base in GUARD_KINDS):
        known = ", ".join([*GUARD_KINDS, *RAY_APP_VARIANTS])
        raise ValueError(
            f"unknown local target {kind!r}: use vllm-k0..vllm-k8 (vllm-kK~PROFILE on a bench "
            f"model), {known}"
        )
    if base in RAY_APP_VARIANTS and (extra := variant_sets(base, setup)):
        try:  # the variant's preset must resolve (e.g. P/D refuses replica autoscaling)
            resolve(BuildArgs(preset=setup.preset_name, set=[*setup.sets, *extra]))
        except ValueError as exc:
            raise ValueError(f"{kind!r} on preset {setup.preset_name!r}: {exc}") from None
    spec = setup.preset.speculation
    if base in GUARD_KINDS and not spec.num_speculative_tokens:
        raise ValueError(f"{kind!r} needs a preset with speculation (num_speculative_tokens)")
    if (match := _VLLM_KIND.fullmatch(base)) and match.group(2):
        if not spec.synthetic_acceptance:
            raise ValueError(
                f"{kind!r}: an acceptance profile replaces a bench model's synthetic "
                f"acceptance, and preset {setup.preset.name!r} has none"
            )
        if match.group(1) == "0":
            raise ValueError(f"{kind!r}: k = 0 drafts nothing; use vllm-k0")
        try:
            profile(match.group(2)).rates_for(int(match.group(1)))
        except ValueError as exc:
            raise ValueError(f"{kind!r}: {exc}") from None
    elif match and spec.synthetic_acceptance:
        try:
            spec.synthetic_for(int(match.group(1)))
        except ValueError as exc:
            raise ValueError(f"{kind!r}: {exc}") from None
    if isa and setup.on_gpu:
        raise ValueError(
            f"{kind!r}: a CPU kernel library (@{isa}) on the {setup.preset.name} preset, "
            f"which runs on {setup.preset.accelerator.kind}"
        )
    if isa and isa not in LIBRARIES:
        raise ValueError(f"unknown kernel library {isa!r} in {kind!r}: use {', '.join(LIBRARIES)}")


def vllm_kwargs(
    setup: LocalSetup,
    k: int,
    batch_table: list | None = None,
    acceptance: AcceptanceProfile | None = None,
) -> dict:
    """The preset's engine arguments with its speculation at k drafts (method, draft
    sampling and synthetic acceptance kept, or the acceptance profile's rates in place of
    the preset's), and vLLM's batch-size table when given."""
    kwargs = setup.preset.engine_kwargs()
    kwargs.pop("speculative_config", None)
    kwargs.update(model=setup.model_dir, served_model_name=setup.preset.model.id)
    speculation = setup.preset.speculation
    if acceptance is not None:
        rates = SyntheticAcceptance(rates=list(acceptance.rates))
        speculation = speculation.model_copy(update={"synthetic_acceptance": rates})
    spec = speculation.vllm_config(k=k, batch_table=batch_table, guard_tables=False)
    if spec:
        kwargs["speculative_config"] = spec
    return kwargs


def guard_settings(kind: str, setup: LocalSetup) -> GuardSettings:
    """The guard a guard kind runs: the preset's when it is of that mode."""
    base = split_kind(kind)[0]
    if base == IDLE_DRAFTER:
        return GuardSettings(mode="script", script=[0])
    want = "batch" if base == "vllm-batch" else "adaptive"
    own = setup.preset.speculation.guard
    if own.mode == want:
        return own
    if want == "batch":
        k = setup.preset.speculation.num_speculative_tokens
        return GuardSettings(mode="batch", batch_table=default_batch_table(k))
    return GuardSettings(mode="adaptive")


def _vllm_command(kind: str, setup: LocalSetup, python: str) -> list[str]:
    base, _ = split_kind(kind)
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server"]
    if match := _VLLM_KIND.fullmatch(base):
        return cmd + to_cli_args(vllm_kwargs(setup, int(match.group(1)), None, kind_profile(kind)))
    k = setup.preset.speculation.num_speculative_tokens
    guard = guard_settings(kind, setup)
    if base == "vllm-batch":
        table = guard.batch_table
    else:  # the guard's: CUDA graphs for every k it may pick
        table = guard.graph_table(k, setup.preset.engine_args.get("max_num_seqs"))
    return cmd + to_cli_args(vllm_kwargs(setup, k, table))


def environment(kind: str, setup: LocalSetup, base_env: Mapping[str, str] | None = None) -> dict:
    """The caller's environment with what this kind and the preset add. On a GPU preset
    the CPU backend's switches (VLLM_CPU_*, the kernel library) are dropped."""
    check_kind(kind, setup)
    base, isa = split_kind(kind)
    env = dict(os.environ if base_env is None else base_env)
    if setup.on_gpu:
        env = {k: v for k, v in env.items() if not k.startswith("VLLM_CPU_") and k != FORCE_ENV}
    if base in RAY_APP_VARIANTS:
        # The app's own env travels in its Ray runtime_env (serving.config.llm_config).
        env |= RAY_APP_VARIANTS[base][1]
        if setup.ray_metrics_interval_ms:
            env[RAY_REPORT_INTERVAL_ENV] = str(setup.ray_metrics_interval_ms)
    else:
        env = {**setup.preset.engine_env(), **env}  # as `serve-vllm`: values already set win
        env.pop(GUARD_ENV, None)  # a static-k or table target runs without our guard
        if base in ("vllm-guard", IDLE_DRAFTER):
            env |= guard_settings(kind, setup).engine_env()
        if base == IDLE_DRAFTER:  # the decision log is the guard's (the switch figures)
            env.pop(LOG_ENV, None)
    if isa:
        env[FORCE_ENV] = isa
    return env


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (held open together, so none is handed out twice)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _ray_settle(setup: LocalSetup) -> tuple[float, float]:
    if setup.ray_metrics_interval_ms:
        interval = max(setup.ray_metrics_interval_ms, 1000) / 1000
        return max(0.5, interval / 2), 3 * interval + 5
    return 2.0, 3 * RAY_EXPORT_PERIOD_S


def local_specs(
    kinds: list[str], setup: LocalSetup, python: str = sys.executable
) -> list[LocalSpec]:
    """One spec per kind, every port distinct. ``python``: the interpreter (a venv's or
    the system's); nothing depends on the `dsv4-serve` console script."""
    for kind in kinds:
        check_kind(kind, setup)
    ports = iter(free_ports(sum(3 if split_kind(k)[0] in RAY_APP_VARIANTS else 1 for k in kinds)))
    specs = []
    for kind in kinds:
        base, _ = split_kind(kind)
        port = next(ports)
        if base not in RAY_APP_VARIANTS:
            cmd = _vllm_command(kind, setup, python)
            cmd += ["--host", "127.0.0.1", "--port", str(port)]
            metrics, ray_app, settle = f"http://127.0.0.1:{port}/metrics", False, (0.5, 10.0)
        else:
            ray_metrics, gateway_metrics = next(ports), next(ports)
            cmd = [python, "-m", "serving.cli", "up", setup.preset_name, "--port", str(port)]
            cmd += ["--ray-metrics-port", str(ray_metrics)]
            cmd += ["--gateway-metrics-port", str(gateway_metrics)]
            # The target's log must have the engine's own lines (serving/bench/stages.py
            # reads them), which `up` shows only with --verbose.
            cmd += ["--verbose"]
            for assignment in [*setup.sets, *variant_sets(base, setup)]:
                cmd += ["--set", assignment]
            metrics, ray_app = f"http://127.0.0.1:{ray_metrics}/metrics", True
            settle = _ray_settle(setup)
        specs.append(
            LocalSpec(
                kind=kind,
                command=cmd,
                env=environment(kind, setup),
                port=port,
                metrics_url=metrics,
                model=setup.preset.model.id,
                ray_app=ray_app,
                settle_period_s=settle[0],
                settle_timeout_s=settle[1],
            )
        )
    return specs
