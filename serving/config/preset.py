"""Presets as data: the typed schema of a preset, loading, and user overrides.

A preset fully describes one deployment: model, speculation, vLLM engine arguments,
accelerators, parallelism, environment and the Ray Serve deployment. Overrides
(``--set a.b=value`` or a YAML file) are deep-merged on top before validation, so
every error names the field it is about.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from model_overrides.engine_status import WORKER_EXTENSION
from model_overrides.guard.spec_guard_config import GuardSettings
from model_overrides.registry import DUMMY_WEIGHTS_PATCH, REQUIRE_ENV
from serving.bench_model.shapes import released_layers
from serving.disagg.section import Disaggregation

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"  # serving/presets
NVIDIA_TYPES = ("H100", "H200", "B200", "GB300")
AMD_TYPES = ("MI300X", "MI355X")
GPUS_PER_NODE = {"H100": 8, "H200": 8, "B200": 8, "GB300": 4, "MI300X": 8, "MI355X": 8}


class PresetError(ValueError):
    """A preset or an override is invalid; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchModel(_Strict):
    """A bench model (serving/bench_model): DeepSeek-V4's released layer shapes with fewer
    layers and no weights, served with vLLM's dummy loader; written at ``model.source``."""

    shape: Literal["flash", "pro"] = Field(description="whose released config: V4-Flash or V4-Pro")
    layers: int = Field(
        ge=3,
        description="decoder layers (the released model's first ones; at least its 3 hash layers)",
    )
    experts: Literal["fp4", "fp8"] = Field(
        "fp4", description="routed experts' format: fp4 as released, or fp8"
    )

    @model_validator(mode="after")
    def _within_release(self) -> BenchModel:
        most = released_layers(self.shape)
        if self.layers > most:
            raise ValueError(f"layers {self.layers}: the released {self.shape} has {most}")
        return self


class ModelSpec(_Strict):
    id: str = Field(min_length=1, description="served model name (the API's `model`)")
    source: str = Field(min_length=1, description="Hugging Face repo id or a local path")
    golden: bool = Field(False, description="generate the golden tiny DSV4 at `source` if missing")
    tokenizer_mode: str | None = "deepseek_v4"
    golden_drafts: Literal["random", "families"] = Field(
        "random",
        description="golden model only: random (every draft right at draft_agreement 1.0) or "
        "families (prompt families whose drafts are always, half, never right)",
    )
    size_gb: float | None = Field(
        None, gt=0, description="weights on disk in GB (10^9 bytes): what the volume must hold"
    )
    bench: BenchModel | None = Field(
        None,
        description="a bench model: released layer shapes, no weights (vLLM's dummy loader), "
        "written at `source` if missing; for measuring cost, never for serving users",
    )

    @property
    def written(self) -> Literal["golden", "bench"] | None:
        """Which checkpoint this project writes at ``source`` (None: real weights)."""
        return "golden" if self.golden else "bench" if self.bench else None

    @model_validator(mode="after")
    def _one_synthetic_kind(self) -> ModelSpec:
        if self.golden and self.bench:
            raise ValueError("a model is golden or a bench model, not both")
        return self


class SyntheticAcceptance(_Strict):
    """Made-up MTP acceptance through vLLM's synthetic rejection sampler
    (``rejection_sample_method: synthetic``, vllm/config/speculative.py): drafts are
    accepted at these rates whatever they say. Only bench models take it."""

    rates: list[float] | None = Field(
        None,
        min_length=1,
        max_length=8,
        description="per draft position, unconditional (position i: the chance that the "
        "first i+1 drafts are all accepted), non-increasing, each in [0, 1]",
    )
    length: float | None = Field(
        None,
        ge=1,
        description="mean acceptance length, the target's own token counted; vLLM makes it "
        "the least-variance schedule (first drafts always accepted, the rest never)",
    )

    @model_validator(mode="after")
    def _one_form(self) -> SyntheticAcceptance:
        if (self.rates is None) == (self.length is None):
            raise ValueError("give exactly one of rates or length")
        rates = self.rates or []
        if any(not 0 <= r <= 1 for r in rates):
            raise ValueError(f"rates must each be in [0, 1], got {rates}")
        if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
            raise ValueError(f"rates must not increase with the position, got {rates}")
        return self

    def for_k(self, k: int) -> dict[str, Any]:
        """vLLM's speculative-config fields for ``k`` draft tokens."""
        if self.rates is not None:
            if k > len(self.rates):
                raise ValueError(
                    f"k={k} drafts but synthetic_acceptance.rates has {len(self.rates)}"
                )
            return {
                "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": self.rates[:k],
            }
        assert self.length is not None
        if self.length > k + 1:
            raise ValueError(f"synthetic_acceptance.length {self.length} exceeds k + 1 = {k + 1}")
        return {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": self.length}


class Speculation(_Strict):
    method: Literal["mtp", "dspark", "none"]
    num_speculative_tokens: int = Field(0, ge=0, le=8)
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(
        None,
        description="vLLM's draft sampling (unset: vLLM's greedy); a preset's setting stays "
        "when --set speculation.method=none turns speculation off, with nothing to sample",
    )
    guard: GuardSettings = Field(
        default_factory=GuardSettings,
        description="off: static k; batch: vLLM's batch-size table; adaptive: k per step "
        "from live acceptance and measured step cost (model_overrides/guard/spec_guard.py)",
    )
    synthetic_acceptance: SyntheticAcceptance | None = Field(
        None,
        description="bench models only: drafts accepted at made-up rates (vLLM's synthetic "
        "rejection sampler), since a model without weights drafts nothing right",
    )

    @model_validator(mode="after")
    def _k_matches_method(self) -> Speculation:
        if self.method == "none" and self.num_speculative_tokens:
            raise ValueError("num_speculative_tokens must be 0 when method is 'none'")
        if self.method != "none" and not self.num_speculative_tokens:
            raise ValueError(f"method {self.method!r} needs num_speculative_tokens >= 1")
        if self.method == "none" and self.guard.mode != "off":
            raise ValueError(f"guard mode {self.guard.mode!r} needs a speculative method")
        self.guard.check_k(self.num_speculative_tokens)
        if self.synthetic_acceptance:
            if self.method == "none":
                raise ValueError("synthetic_acceptance needs a speculative method")
            self.synthetic_acceptance.for_k(self.num_speculative_tokens)
        return self

    def info_labels(self) -> dict[str, str]:
        """The labels of the gateway's dsv4_speculation_info: what the dashboard and the
        acceptance alerts say about this preset's drafting. Unset draft sampling is
        vLLM's default, greedy (vllm/config/speculative.py); a bench model's synthetic
        acceptance decides acceptance by itself, whatever the drafts."""
        if self.method == "none":
            sampling = "none"
        elif self.synthetic_acceptance:
            sampling = "synthetic"
        else:
            sampling = self.draft_sample_method or "greedy"
        return {
            "method": self.method,
            "num_speculative_tokens": str(self.num_speculative_tokens),
            "draft_sample_method": sampling,
        }

    def synthetic_for(self, k: int) -> dict[str, Any]:
        """The synthetic-acceptance fields of vLLM's speculative config at ``k`` drafts."""
        return self.synthetic_acceptance.for_k(k) if self.synthetic_acceptance and k else {}

    def vllm_config(
        self,
        max_num_seqs: int | None = None,
        k: int | None = None,
        batch_table: list | None = None,
        guard_tables: bool = True,
    ) -> dict[str, Any] | None:
        """vLLM's ``speculative_config``: the one place a preset's speculation becomes it
        (the Serve app, the local launchers, every bench arm and the golden engine).
        ``k`` replaces the preset's draft count (a bench arm at another k); ``batch_table``
        gives vLLM's per-batch-size table; ``guard_tables`` off leaves the guard's out (a
        static-k arm); ``max_num_seqs`` places the adaptive guard's graph table
        (GuardSettings.graph_table)."""
        k = self.num_speculative_tokens if k is None else k
        if self.method == "none" or not k:
            return None
        out: dict[str, Any] = {"method": self.method, "num_speculative_tokens": k}
        if self.draft_sample_method:
            out["draft_sample_method"] = self.draft_sample_method
        out |= self.synthetic_for(k)
        if batch_table is not None:
            out["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in batch_table]
        elif not guard_tables:
            pass
        elif self.guard.mode == "batch":
            out["num_speculative_tokens_per_batch_size"] = [
                list(entry) for entry in self.guard.batch_table or []
            ]
        elif table := self.guard.graph_table(k, max_num_seqs):
            out["num_speculative_tokens_per_batch_size"] = table
        return out


class Accelerator(_Strict):
    kind: Literal["nvidia", "amd", "cpu"]
    type: Literal["H100", "H200", "B200", "GB300", "MI300X", "MI355X"] | None = None
    per_replica: int = Field(ge=1, description="GPUs (or CPU slots) one replica uses")
    gpu_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="share of one GPU a one-GPU replica asks Ray for; below 1, replicas of a "
        "small model share a GPU (Ray Serve LLM's fractional GPU serving)",
    )

    @model_validator(mode="after")
    def _type_matches_kind(self) -> Accelerator:
        vendor = dict.fromkeys(NVIDIA_TYPES, "nvidia") | dict.fromkeys(AMD_TYPES, "amd")
        if self.kind == "cpu" and self.type is not None:
            raise ValueError("a cpu accelerator has no type")
        if self.kind != "cpu" and (self.type is None or vendor[self.type] != self.kind):
            raise ValueError(f"type {self.type!r} is not a {self.kind} accelerator")
        if self.gpu_share < 1 and (self.kind == "cpu" or self.per_replica != 1):
            # vLLM's ranks each need a whole device: only a one-GPU replica can share one.
            raise ValueError("gpu_share below 1 needs a GPU accelerator with per_replica 1")
        return self


class Parallelism(_Strict):
    tensor: int = Field(1, ge=1)
    pipeline: int = Field(1, ge=1)
    data: int = Field(1, ge=1)
    expert: bool = False
    nodes: int = Field(1, ge=1, description="hosts one replica spans")


class Autoscaling(_Strict):
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    target_ongoing_requests: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


class PerKeyLimits(_Strict):
    """Limits per API key, enforced by each replica's gateway (serving/gateway/limits.py)."""

    max_concurrent: int | None = Field(
        None, ge=1, description="generation requests of one key in flight per replica"
    )
    tokens_per_minute: int | None = Field(
        None, ge=1, description="prompt + completion tokens of one key per minute per replica"
    )


class Deployment(_Strict):
    replicas: int = Field(1, ge=1)
    autoscaling: Autoscaling | None = None
    max_ongoing_requests: int = Field(ge=1, description="in flight per replica")
    max_queued_requests: int = Field(-1, ge=-1, description="-1: unbounded queue")
    per_key: PerKeyLimits = PerKeyLimits()


class PrefixRouting(_Strict):
    """``serving.routing: prefix`` (serving/routing/): a request goes to the replica its
    key hashes to, unless that replica holds more than its share of the load."""

    key_chars: int = Field(
        1024,
        ge=16,
        le=65536,
        description="characters of the leading chat messages (system, tools, first user "
        "message) or of a completion prompt that make the routing key",
    )
    balance_factor: float = Field(
        1.2,
        ge=1.0,
        le=4.0,
        description="a replica takes a request while its in-flight load stays within "
        "this times the mean; above it the key spills to its next replica",
    )
    load_ttl_ms: int = Field(
        50, ge=1, le=10000, description="how long a replica's probed load is reused"
    )
    router_replicas: int = Field(
        2, ge=1, le=16, description="Ray's ingress router replicas HAProxy asks (no shared state)"
    )
    body_limit_bytes: int = Field(
        1 << 20,
        ge=1 << 16,
        le=1 << 26,
        description="HAProxy's buffer (tune.bufsize, every connection's): a request body "
        "longer than this reaches the router cut short and is balanced by load only",
    )


class Serving(_Strict):
    """How requests reach the engine (see serving/app.py)."""

    path: Literal["direct", "ingress"] = Field(
        "direct",
        description="direct: the engine replica serves vLLM's OpenAI app itself; ingress: "
        "a separate OpenAI ingress replica in front of the engines (what disaggregation "
        "needs)",
    )
    proxy: Literal["auto", "haproxy", "python"] = Field(
        "auto",
        description="HTTP proxy in front of the replicas: HAProxy (auto: when its binary "
        "is installed) or Ray's Python proxy",
    )
    stream_batching_interval_ms: int = Field(
        0, ge=0, description="Ray Serve LLM's stream-chunk batching (ingress path only)"
    )
    routing: Literal["default", "prefix"] = Field(
        "default",
        description="default: HAProxy's leastconn over the replicas; prefix: requests "
        "sharing a prefix (a conversation, a system prompt with its first turn) go to one "
        "replica, within a load bound (serving/routing/)",
    )
    prefix: PrefixRouting = PrefixRouting()
    ingress_resource: bool = Field(
        False,
        description="ingress path: each ingress replica asks for one unit of a custom Ray "
        "resource (serving/disagg/placement.py INGRESS_RESOURCE) that only some nodes "
        "advertise (the Helm chart's head), so the gateway metrics port has one home",
    )

    def prefix_routing(self) -> PrefixRouting | None:
        """The prefix router's settings when ``routing`` is ``prefix``, else None."""
        return self.prefix if self.routing == "prefix" else None

    @model_validator(mode="after")
    def _prefix_needs_the_direct_path(self) -> Serving:
        if self.routing == "prefix" and (self.path != "direct" or self.proxy == "python"):
            raise ValueError(
                "routing 'prefix' needs path 'direct' and the HAProxy proxy: HAProxy asks "
                "Ray's ingress router for each request's replica (Ray 2.60 rejects a "
                "request router on any other ingress)"
            )
        return self

    @model_validator(mode="after")
    def _ingress_resource_needs_the_ingress_path(self) -> Serving:
        if self.ingress_resource and self.path != "ingress":
            raise ValueError("ingress_resource places the ingress replica: it needs path 'ingress'")
        return self


class Monitoring(_Strict):
    """Alert thresholds for this preset (exported by the gateway, used by the rules)."""

    acceptance_baseline: float = Field(
        0.6, gt=0, le=1, description="lowest healthy draft acceptance rate (warning below)"
    )
    acceptance_floor: float = Field(
        0.3, gt=0, le=1, description="acceptance rate that means MTP is broken (page below)"
    )
    ttft_slo_seconds: float = Field(2.0, gt=0, description="p90 time to first token target")
    tpot_slo_seconds: float = Field(0.1, gt=0, description="p90 time per output token target")
    draft_cost_ratio: float = Field(
        0.1, gt=0, lt=1, description="cost of one draft step relative to one target step"
    )
    guard_off_alert_seconds: float = Field(
        600,
        gt=0,
        description="the speculation guard keeping drafting off this long on every engine "
        "of a model means its checkpoint or draft head needs attention (warning)",
    )

    @model_validator(mode="after")
    def _floor_below_baseline(self) -> Monitoring:
        if self.acceptance_floor > self.acceptance_baseline:
            raise ValueError("acceptance_floor must not exceed acceptance_baseline")
        return self


class Preset(_Strict):
    name: str
    description: str
    sources: list[str] = Field(min_length=1, description="where the values come from")
    unvalidated: str | None = Field(
        None,
        min_length=1,
        description="why no published recipe validates this preset (None: one does)",
    )
    model: ModelSpec
    speculation: Speculation
    accelerator: Accelerator
    parallelism: Parallelism = Parallelism()
    engine_args: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    deployment: Deployment
    serving: Serving = Serving()
    disaggregation: Disaggregation | None = Field(
        None, description="prefill and decode on separate engines (serving/disagg)"
    )
    monitoring: Monitoring = Monitoring()

    @model_validator(mode="after")
    def _consistent(self) -> Preset:
        par, acc = self.parallelism, self.accelerator
        ranks = par.tensor * par.pipeline * par.data
        if acc.kind != "cpu" and ranks != acc.per_replica:
            raise ValueError(
                f"parallelism tensor*pipeline*data = {ranks} but accelerator.per_replica = "
                f"{acc.per_replica}: each rank needs exactly one GPU"
            )
        if acc.type is not None:
            per_node = GPUS_PER_NODE[acc.type]
            if acc.per_replica > per_node * par.nodes:
                raise ValueError(
                    f"{acc.per_replica} GPUs per replica do not fit on {par.nodes} node(s) "
                    f"of {per_node} {acc.type}"
                )
        if par.nodes > 1:
            # One pod per node holds per_replica/nodes GPUs; vLLM numbers ranks node by
            # node, so a TP group stays on one node only if it divides that count.
            per_pod, rest = divmod(acc.per_replica, par.nodes)
            if rest or per_pod % par.tensor:
                raise ValueError(
                    f"tensor={par.tensor} across {par.nodes} nodes of {acc.per_replica} GPUs: "
                    "each node must hold whole tensor-parallel groups "
                    "(per_replica/nodes a multiple of tensor)"
                )
        guard = self.speculation.guard
        if guard.mode != "off" and par.data > 1:
            # The guard would not install there (model_overrides/patches/spec_guard.py
            # install: ranks would pick different k) and its alert could never fire.
            raise ValueError(
                f"speculation.guard mode {guard.mode!r} with parallelism.data={par.data}: "
                "the guard cannot run with data parallelism (each rank would pick its own k); "
                "set speculation.guard.mode off"
            )
        graphs = guard.mode in ("adaptive", "script") and acc.kind != "cpu"
        if graphs and not self.engine_args.get("max_num_seqs"):
            raise ValueError(
                f"speculation.guard mode {guard.mode!r} on a GPU needs "
                "engine_args.max_num_seqs: the guard's table places a CUDA graph for "
                "every k below it (GuardSettings.graph_table)"
            )
        if self.speculation.synthetic_acceptance and not self.model.bench:
            raise ValueError(
                "speculation.synthetic_acceptance needs a bench model (model.bench): a "
                "deployment of real weights must report the acceptance its drafts earn"
            )
        if self.model.bench and self.engine_args.get("load_format", "dummy") != "dummy":
            raise ValueError(
                f"a bench model has no weights: engine_args.load_format must be 'dummy' "
                f"(or unset), got {self.engine_args['load_format']!r}"
            )
        if self.disaggregation:
            self._check_disaggregation()
        reserved = {"speculative_config", "tensor_parallel_size", "pipeline_parallel_size", "model"}
        clash = reserved & set(self.engine_args)
        if clash:
            raise ValueError(
                f"engine_args must not set {sorted(clash)}: use speculation/parallelism/model"
            )
        return self

    def _check_disaggregation(self) -> None:
        pd, acc = self.disaggregation, self.accelerator
        assert pd is not None
        where = "disaggregation"
        if self.serving.path != "ingress":
            raise ValueError(
                f"{where} needs serving.path 'ingress': the client's request goes to the "
                "decode engines through Ray Serve LLM's OpenAI ingress"
            )
        if self.deployment.autoscaling:
            raise ValueError(
                f"{where} sizes each role itself (prefill/decode .replicas, or their "
                ".autoscaling): drop deployment.autoscaling (--set deployment.autoscaling=null)"
            )
        if self.parallelism.data > 1:
            raise ValueError(f"{where} with parallelism.data > 1 is not supported")
        if "kv_transfer_config" in self.engine_args:
            raise ValueError(f"{where} sets engine_args.kv_transfer_config itself")
        for role in ("prefill", "decode"):
            try:
                self.role_accelerator(role)
            except ValidationError as exc:
                why = exc.errors()[0]["msg"].removeprefix("Value error, ")
                raise ValueError(f"{where}.{role}: {why}") from None
        if pd.kv_buffer_device == "cuda" and acc.kind == "cpu":
            raise ValueError(f"{where}.kv_buffer_device 'cuda' on a cpu accelerator")
        drafting = self.speculation.method != "none"
        if pd.connector == "nixl" and pd.mtp_on == "decode" and drafting and acc.kind != "cpu":
            # vLLM 0.34's NixlConnector moves DSV4's KV as packed rows and refuses a
            # handshake whose rows differ (nixl/base_worker.py, add_remote_agent: "Packed KV
            # block rows differ between P and D"); decode's MTP layer adds caches to each
            # row that a prefill engine without the drafter lacks. Seen on an H100: every
            # transfer failed and decode recomputed every prompt.
            raise ValueError(
                f"{where}.mtp_on 'decode' with NIXL on a GPU: prefill's KV rows would lack "
                "the MTP layer's caches and NIXL refuses every transfer (vLLM's packed-row "
                "check); use mtp_on 'both'"
            )

    def role_accelerator(self, role: str) -> Accelerator:
        """The accelerator of a disaggregated role: the preset's, with the role's GPU
        share, under the accelerator's own rules."""
        assert self.disaggregation is not None
        share = getattr(self.disaggregation, role).gpu_share
        if share is None:
            return self.accelerator
        return Accelerator.model_validate(self.accelerator.model_dump() | {"gpu_share": share})

    def engine_env(self) -> dict[str, str]:
        """The engine's environment: the preset's, the guard's settings (adaptive), and a
        shared GPU's share for vLLM's Ray workers."""
        env = {**self.env, **self.speculation.guard.engine_env()}
        if self.model.bench:
            # No silent fallback: without the patch a bench model runs on garbage FP4
            # weights and bias-picked routing and measures the wrong thing.
            required = {n for n in env.get(REQUIRE_ENV, "").split(",") if n}
            required.add(DUMMY_WEIGHTS_PATCH)
            env[REQUIRE_ENV] = ",".join(sorted(required))
        if self.accelerator.gpu_share < 1:
            # vLLM's Ray executor asks VLLM_RAY_PER_WORKER_GPUS (default 1) of the bundle
            # for its worker (vllm/v1/executor/ray_executor_v2.py); Ray Serve LLM 2.60 does
            # not set it (its VLLMEngineConfig.get_runtime_env_with_local_env_vars, which
            # would, has no caller), and a whole GPU does not fit a 0.45 bundle.
            env["VLLM_RAY_PER_WORKER_GPUS"] = str(self.accelerator.gpu_share)
        return env

    def engine_kwargs(self) -> dict[str, Any]:
        """The resolved vLLM engine arguments (what `dsv4-serve check` prints)."""
        kwargs: dict[str, Any] = dict(self.engine_args)
        if self.model.bench:  # weights made up by vLLM's dummy loader
            kwargs["load_format"] = "dummy"
        if self.model.tokenizer_mode:
            kwargs.setdefault("tokenizer_mode", self.model.tokenizer_mode)
        par = self.parallelism
        kwargs["tensor_parallel_size"] = par.tensor
        kwargs["pipeline_parallel_size"] = par.pipeline
        if par.data > 1:
            kwargs["data_parallel_size"] = par.data
        if par.expert:
            kwargs["enable_expert_parallel"] = True
        if par.nodes > 1:  # ranks on several hosts: vLLM's Ray executor places them
            kwargs["distributed_executor_backend"] = "ray"
        spec = self.speculation.vllm_config(self.engine_args.get("max_num_seqs"))
        if spec:
            kwargs["speculative_config"] = spec
        # The workers answer the gateway's status question (model_overrides/engine_status.py).
        kwargs.setdefault("worker_extension_cls", WORKER_EXTENSION)
        return kwargs


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` over ``base``, nested mappings merged key by key (Helm's rule too)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_set(assignment: str) -> dict[str, Any]:
    """'deployment.replicas=2' -> {'deployment': {'replicas': 2}} (value parsed as YAML)."""
    if "=" not in assignment:
        raise PresetError(f"--set {assignment!r}: expected key.path=value")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(keys):
        raise PresetError(f"--set {assignment!r}: empty key in {path!r}")
    try:
        value: Any = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise PresetError(f"--set {path}: value {raw!r} is not valid YAML: {exc}") from None
    for key in reversed(keys):
        value = {key: value}
    return value


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PresetError(f"{what} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PresetError(f"{what} {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{what} {path} must be a mapping, got {type(data).__name__}")
    return data


def raw_preset(preset: str) -> dict[str, Any]:
    path = Path(preset)
    if not (path.suffix in {".yaml", ".yml"} and path.exists()):
        path = PRESETS_DIR / f"{preset}.yaml"
        if not path.exists():
            raise PresetError(f"unknown preset {preset!r}; known: {', '.join(list_presets())}")
    return _read_yaml(path, "preset")


def _format(exc: ValidationError, preset: str) -> str:
    lines = [f"preset {preset!r} is invalid:"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


def load_preset(
    preset: str,
    overrides: list[dict[str, Any]] | None = None,
    override_files: list[str | Path] | None = None,
) -> Preset:
    data = raw_preset(preset)
    for file in override_files or []:
        data = deep_merge(data, _read_yaml(Path(file), "override file"))
    for extra in overrides or []:
        data = deep_merge(data, extra)
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise PresetError(_format(exc, preset)) from None
