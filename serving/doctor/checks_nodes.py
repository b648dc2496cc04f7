"""Preflight: can the worker pods the chart renders land on this cluster's GPU nodes?"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from serving.doctor.context import PreflightContext
from serving.doctor.findings import Check, Finding, fail, ok, warn
from serving.doctor.k8s import (
    Obj,
    arch,
    blocking_taints,
    dig,
    gib,
    labels,
    name,
    node_ready,
    node_selection_problem,
    quantity,
    taint_text,
)
from serving.doctor.plan import PodPlan

# Where GPU models are written on nodes: NVIDIA GPU feature discovery (the NVML name,
# sanitised: "NVIDIA-H200"; "-SHARED" when time-sliced), the AMD device plugin's node
# labeller (sysfs product_name, spaces to "_": "AMD_Instinct_MI300X"; its beta. twin), GKE.
PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "amd.com/gpu.product-name",
    "beta.amd.com/gpu.product-name",
    "cloud.google.com/gke-accelerator",
)
# The AMD labeller's device-id label when no product name is set (ids from its amdgpu.ids).
AMD_DEVICE_IDS = {"74a1": "MI300X", "74a9": "MI300X", "74bd": "MI300X", "74b5": "MI300X"}
MAX_LISTED = 8


def gpu_product(node: Obj) -> tuple[str | None, str | None]:
    """(the GPU model, the label it was read from)."""
    have = labels(node)
    for key in PRODUCT_LABELS:
        if have.get(key):
            return have[key], key
    for key in have:  # a node with several products: amd.com/gpu.product-name.<NAME>=<count>
        if key.startswith("amd.com/gpu.product-name."):
            return key.removeprefix("amd.com/gpu.product-name."), None
    device = have.get("amd.com/gpu.device-id", "").lower()
    return AMD_DEVICE_IDS.get(device), None


def product_matches(product: str, gpu_type: str) -> bool:
    return gpu_type.upper() in re.split(r"[^A-Z0-9]+", product.upper())


@dataclass
class NodeFit:
    """One node judged against the worker pod the chart renders."""

    node: Obj
    name: str
    allocatable: int
    free: int | None
    product: str | None
    product_label: str | None
    product_ok: bool | None
    arch: str
    arch_ok: bool
    ready: bool
    cordoned: bool
    taints: list[Obj]
    selection: str | None
    memory: Decimal | None
    cpu: Decimal | None

    @property
    def user_taints(self) -> list[Obj]:
        """Taints someone put there, not the node controller's (NotReady, cordoned: those
        are said as such, and a toleration is not their fix)."""
        return [t for t in self.taints if not t.get("key", "").startswith("node.kubernetes.io/")]

    def reasons(self, pod: PodPlan) -> list[str]:
        out = []
        if not self.ready:
            out.append("NotReady")
        if self.cordoned:
            out.append("cordoned (unschedulable)")
        if self.selection:
            out.append(self.selection)
        if self.user_taints:
            out.append("untolerated taint " + ", ".join(taint_text(t) for t in self.user_taints))
        if not self.arch_ok:
            out.append(f"arch {self.arch}")
        if self.product_ok is False:
            out.append(f"GPU {self.product}")
        if self.allocatable < pod.gpus:
            out.append(f"{self.allocatable} {pod.gpu_resource} allocatable")
        elif self.free is not None and self.free < pod.gpus:
            out.append(f"{self.free} of {self.allocatable} {pod.gpu_resource} free")
        if pod.memory is not None and self.memory is not None and self.memory < pod.memory:
            out.append(f"memory {gib(self.memory)} allocatable < {gib(pod.memory)} requested")
        if pod.cpu is not None and self.cpu is not None and self.cpu < pod.cpu:
            out.append(f"cpu {self.cpu} allocatable < {pod.cpu} requested")
        return out

    def room(self, pod: PodPlan) -> int:
        """How many of these pods fit (0 when any reason excludes the node)."""
        if self.reasons(pod):
            return 0
        fits = (self.free if self.free is not None else self.allocatable) // max(pod.gpus, 1)
        if pod.memory and self.memory:
            fits = min(fits, int(self.memory // pod.memory))
        if pod.cpu and self.cpu:
            fits = min(fits, int(self.cpu // pod.cpu))
        return fits


def fit_node(
    node: Obj,
    pod: PodPlan,
    gpu_type: str | None,
    in_use: dict[str, int] | None,
    image_arches: tuple[str, ...] | None,
) -> NodeFit:
    """Judge one node for one pod (in_use None: free GPUs unknown; arches None: any)."""
    resource = pod.gpu_resource or ""
    allocatable = int(quantity(dig(node, "status", "allocatable", resource)) or 0)
    free = None if in_use is None else allocatable - in_use.get(name(node), 0)
    product, label = gpu_product(node)
    gpu_type = gpu_type if resource else None  # the head needs no GPU
    return NodeFit(
        node=node,
        name=name(node),
        allocatable=allocatable,
        free=free,
        product=product,
        product_label=label,
        product_ok=None if product is None or not gpu_type else product_matches(product, gpu_type),
        arch=arch(node),
        arch_ok=image_arches is None or arch(node) in image_arches,
        ready=node_ready(node),
        cordoned=bool(dig(node, "spec", "unschedulable")),
        taints=blocking_taints(node, pod.spec.get("tolerations") or []),
        selection=node_selection_problem(node, pod.spec),
        memory=quantity(dig(node, "status", "allocatable", "memory")),
        cpu=quantity(dig(node, "status", "allocatable", "cpu")),
    )


def _fit(ctx: PreflightContext, node: Obj, pod: PodPlan) -> NodeFit:
    in_use = ctx.gpus_in_use() if pod.gpu_resource else {}
    return fit_node(node, pod, ctx.plan.gpu_type, in_use, ctx.image_arches)


def gpu_fits(ctx: PreflightContext, pod: PodPlan | None = None) -> list[NodeFit]:
    """Every node that has the platform's GPUs at all, judged for one worker group's pod
    (by default the first: what the groups share)."""
    pod = pod or ctx.plan.workers
    fits = [_fit(ctx, node, pod) for node in ctx.nodes()]
    return [f for f in fits if f.allocatable > 0]


def _listed(lines: list[str]) -> list[str]:
    if len(lines) > MAX_LISTED:
        return [*lines[:MAX_LISTED], f"… and {len(lines) - MAX_LISTED} more"]
    return lines


def check_gpu_nodes(ctx: PreflightContext) -> Finding:
    workers = ctx.plan.workers
    resource = workers.gpu_resource
    fits = gpu_fits(ctx)
    if not fits:
        other = "amd.com/gpu" if resource == "nvidia.com/gpu" else "nvidia.com/gpu"
        has_other = any(dig(n, "status", "allocatable", other) for n in ctx.nodes())
        hint = (
            f"the nodes offer {other}: this preset is for the other vendor's GPUs"
            if has_other
            else "install the GPU operator / device plugin so nodes advertise "
            f"{resource}, or add GPU nodes"
        )
        return fail(f"no node has allocatable {resource} (of {len(ctx.nodes())} nodes)", hint)
    big = [f for f in fits if f.allocatable >= workers.gpus]
    sizes = sorted({f.allocatable for f in fits}, reverse=True)
    if not big:
        return fail(
            f"no node has {workers.gpus} allocatable {resource}: each worker pod needs "
            f"{workers.gpus} on one node; the largest has {sizes[0]}",
            "choose a preset sized for your nodes, or add nodes with "
            f"{workers.gpus} GPUs (a preset's GPUs per pod come from its parallelism)",
        )
    return ok(
        f"{len(big)} node(s) with >= {workers.gpus} allocatable {resource} "
        f"({len(fits)} GPU node(s) in all)"
    )


def check_gpu_product(ctx: PreflightContext) -> Finding | None:
    gpu_type = ctx.plan.gpu_type
    workers = ctx.plan.workers
    fits = [f for f in gpu_fits(ctx) if f.allocatable >= workers.gpus]
    if not fits or not gpu_type:
        return None  # check_gpu_nodes has said what is wrong
    unlabeled = [f.name for f in fits if f.product is None]
    wrong = [f for f in fits if f.product_ok is False]
    right = [f for f in fits if f.product_ok]
    shared = [f.name for f in fits if f.product and f.product.upper().endswith("-SHARED")]
    if shared:
        return warn(
            f"GPUs are time-sliced (shared) on {', '.join(shared[:3])}",
            "DSV4 needs whole GPUs: turn off time-slicing / MPS for these nodes",
        )
    if wrong and not right:
        seen = sorted({f.product or "?" for f in wrong})
        return fail(
            f"the preset {ctx.plan.preset_name} needs {gpu_type}; "
            f"the GPU nodes have {', '.join(seen)}",
            "choose the preset for your GPUs (presets: serving/presets; dsv4-serve check "
            f"PRESET shows one), or add {gpu_type} nodes",
            [f"{f.name}: {f.product}" for f in wrong][:MAX_LISTED],
        )
    if wrong:
        selector = ctx.plan.workers.spec.get("nodeSelector") or {}
        if not any(key in PRODUCT_LABELS for key in selector):
            label = right[0].product_label or PRODUCT_LABELS[0]
            escaped = label.replace(".", "\\.")  # helm --set: dots in a key are escaped
            return warn(
                f"{len(wrong)} GPU node(s) have another GPU than {gpu_type}, and nothing keeps "
                "the workers off them",
                f"pin the workers: --set scheduling.nodeSelector.{escaped}={right[0].product}",
                [f"{f.name}: {f.product}" for f in wrong][:MAX_LISTED],
            )
    if unlabeled and not right:
        return warn(
            f"cannot tell the GPU model: no node carries {PRODUCT_LABELS[0]} or "
            f"{PRODUCT_LABELS[1]}",
            "install GPU feature discovery (NVIDIA GPU operator) or the AMD node labeller "
            f"so nodes say which GPU they have; make sure they are {gpu_type}",
        )
    products = sorted({f.product for f in right if f.product})
    return ok(f"GPU model {', '.join(products)} matches the preset's {gpu_type}")


def check_arch(ctx: PreflightContext) -> Finding | None:
    workers = ctx.plan.workers
    fits = [f for f in gpu_fits(ctx) if f.allocatable >= workers.gpus]
    if not fits:
        return None
    arches = sorted({f.arch for f in fits})
    images = "/".join(ctx.image_arches)
    source = "" if ctx.image_arch_given else f" (the chart's image.{ctx.plan.platform}.arches)"
    good = [f for f in fits if f.arch_ok]
    if not good:
        return fail(
            f"the GPU nodes are {', '.join(arches)} but the image {workers.image} is "
            f"{images}{source}",
            f"build and push an image for {arches[0]} (e.g. buildah build --platform "
            f"linux/{arches[0]}) and set image.{ctx.plan.platform}.repository/tag",
        )
    if len(good) < len(fits):
        return warn(
            f"{len(fits) - len(good)} GPU node(s) are not {images}; the scheduler keeps the "
            "workers off them only if the image says its architecture",
            "pin the workers: --set scheduling.nodeSelector.kubernetes\\.io/arch=" + good[0].arch,
        )
    return ok(f"GPU nodes are {', '.join(arches)}; the image is built for {images}{source}")


def check_node_resources(ctx: PreflightContext) -> Iterator[Finding]:
    for group in ctx.plan.worker_groups:
        yield from _group_resources(ctx, group)


def _group_resources(ctx: PreflightContext, workers: PodPlan) -> Iterator[Finding]:
    """One worker group's memory, CPU and /dev/shm against the GPU nodes (a disaggregated
    release's roles may ask for different resources)."""
    fits = [f for f in gpu_fits(ctx, workers) if f.allocatable >= workers.gpus]
    if not fits:
        return
    plural, key = f"{workers.noun}s", workers.values_key
    pods = "" if workers.role == "worker" else f" for the {workers.role} pods"
    if workers.memory is None:
        yield warn(f"{workers.noun} memory request unknown (no values.yaml): memory not checked")
    else:
        roomy = [f for f in fits if f.memory is None or f.memory >= workers.memory]
        largest = max((f.memory for f in fits if f.memory is not None), default=None)
        if not roomy:
            yield fail(
                f"{plural} request {gib(workers.memory)} of memory; the GPU nodes have at most "
                f"{gib(largest)} allocatable",
                f"lower it: --set {key}.resources.memory={gib(largest)} (keep room for "
                "/dev/shm, which counts against the pod's memory)",
            )
        else:
            yield ok(
                f"memory: {len(roomy)} GPU node(s) have >= {gib(workers.memory)} allocatable{pods}"
            )
    if workers.cpu is not None:
        roomy = [f for f in fits if f.cpu is None or f.cpu >= workers.cpu]
        if not roomy:
            largest = max((f.cpu for f in fits if f.cpu is not None), default=None)
            yield fail(
                f"{plural} request {workers.cpu} CPUs; the GPU nodes have at most {largest}",
                f"lower it: --set {key}.resources.cpu={largest}",
            )
    if workers.shm is not None and workers.memory_limit is not None:
        if workers.shm > workers.memory_limit:
            yield warn(
                f"/dev/shm ({gib(workers.shm)}) is larger than the {workers.noun} memory limit "
                f"({gib(workers.memory_limit)})",
                "shared memory counts against the limit: lower workers.shmSize or raise "
                f"{key}.resources.memory",
            )
        else:
            yield ok(
                f"/dev/shm {gib(workers.shm)} fits in the {workers.noun} memory limit "
                f"{gib(workers.memory_limit)}"
            )


def toleration_fix(taints: list[Obj]) -> str:
    items = []
    for taint in taints:
        value = f", value: {taint['value']}, operator: Equal" if taint.get("value") else ""
        op = "" if value else ", operator: Exists"
        items.append(f"{{key: {taint.get('key')}{value}{op}, effect: {taint.get('effect')}}}")
    return "add to your values: scheduling: {tolerations: [" + ", ".join(items) + "]}"


def check_taints(ctx: PreflightContext) -> Finding | None:
    workers = ctx.plan.workers
    fits = [f for f in gpu_fits(ctx) if f.allocatable >= workers.gpus]
    if not fits:
        return None
    blocked = [f for f in fits if f.user_taints]
    if not blocked:
        return ok("no untolerated taint on the GPU nodes")
    taints: dict[str, Obj] = {}
    for fit in blocked:
        for taint in fit.user_taints:
            taints[taint_text(taint)] = taint
    only_gpu_key = all(t.get("key") == workers.gpu_resource for t in taints.values())
    details = [f"{f.name}: {', '.join(taint_text(t) for t in f.user_taints)}" for f in blocked][
        :MAX_LISTED
    ]
    title = f"{len(blocked)} of {len(fits)} GPU node(s) have taints the workers do not tolerate"
    fix = toleration_fix(list(taints.values()))
    if only_gpu_key:
        # The ExtendedResourceToleration admission plugin (on in GKE) adds exactly this one.
        return warn(
            title + f" (unless the API server adds {workers.gpu_resource} tolerations itself)",
            fix,
            details,
        )
    if len(blocked) == len(fits):
        return fail(title, fix, details)
    return warn(title, fix, details)


def check_placement(ctx: PreflightContext) -> Iterator[Finding]:
    groups = ctx.plan.worker_groups
    if len(groups) == 1:
        yield from _placement(ctx, groups[0])
    else:
        yield from _placement_of_roles(ctx, groups)
    head = ctx.plan.head
    head_fits = [_fit(ctx, node, head) for node in ctx.nodes()]
    if not any(not f.reasons(head) for f in head_fits):
        yield fail(
            f"no node can take the Ray head ({head.cpu} CPU, {gib(head.memory)} memory)",
            "lower head.resources or check the nodeSelector/tolerations",
            _listed([f"{f.name}: {'; '.join(f.reasons(head))}" for f in head_fits]),
        )


def _usage(ctx: PreflightContext) -> str:
    unknown = ctx.in_use_unknown_reason()
    return f" (GPUs other pods hold not counted: {unknown})" if unknown else ""


def _placement(ctx: PreflightContext, workers: PodPlan) -> Iterator[Finding]:
    fits = gpu_fits(ctx, workers)
    room = sum(f.room(workers) for f in fits)
    need, most = workers.min_pods, workers.max_pods
    shape = f"{workers.min_replicas} replica(s) x {workers.hosts} pod(s) of {workers.gpus} GPUs"
    usage = _usage(ctx)
    if fits and room < need:
        excluded = [
            f"{f.name}: {'; '.join(f.reasons(workers))}" for f in fits if not f.room(workers)
        ]
        yield fail(
            f"room for {room} worker pod(s), {need} needed ({shape}){usage}",
            "free or add GPU nodes, or fix what excludes them (listed); the RayService stays "
            "unready with Pending workers until every pod of a replica is placed",
            _listed(excluded),
        )
    elif fits:
        title = f"room for {room} worker pod(s), {need} needed ({shape}){usage}"
        if room < most:
            yield warn(
                f"{title}; autoscaling to {workers.max_replicas} replica(s) needs {most}",
                f"cap autoscaling: --set workers.maxReplicas={room // workers.hosts}, or add nodes",
            )
        else:
            yield ok(title)


class _Left:
    """What the GPU nodes have left while pods are placed on them, by node name."""

    def __init__(self, fits: list[NodeFit]) -> None:
        self.gpus = {f.name: f.free if f.free is not None else f.allocatable for f in fits}
        self.memory = {f.name: f.memory for f in fits}
        self.cpu = {f.name: f.cpu for f in fits}

    def take(self, fit: NodeFit, pod: PodPlan) -> bool:
        """Place one pod on the node if what is left there holds it."""
        node = fit.name
        memory, cpu = self.memory[node], self.cpu[node]
        if fit.reasons(pod) or self.gpus[node] < pod.gpus:
            return False
        if pod.memory and memory is not None and memory < pod.memory:
            return False
        if pod.cpu and cpu is not None and cpu < pod.cpu:
            return False
        self.gpus[node] -= pod.gpus
        if pod.memory and memory is not None:
            self.memory[node] = memory - pod.memory
        if pod.cpu and cpu is not None:
            self.cpu[node] = cpu - pod.cpu
        return True


def _place(left: _Left, fits: list[NodeFit], pod: PodPlan, count: int) -> int:
    """Place up to `count` pods, first fit over the nodes; how many were placed."""
    placed = 0
    for fit in fits:
        while placed < count and left.take(fit, pod):
            placed += 1
    return placed


def _placement_of_roles(ctx: PreflightContext, groups: list[PodPlan]) -> Iterator[Finding]:
    """A disaggregated release: the prefill and decode groups' pods share the GPU nodes, so
    they are placed together, each judged as its own pod (its resources, its reasons)."""
    # The same GPU nodes, in the same order, each judged for every role's pod.
    fits = {g.role: gpu_fits(ctx, g) for g in groups}
    if not fits[groups[0].role]:
        return  # gpu.nodes says there is no GPU node
    left = _Left(fits[groups[0].role])
    need = [g.min_pods for g in groups]
    placed = [_place(left, fits[g.role], g, n) for g, n in zip(groups, need, strict=True)]
    # Autoscaling's extra pods go where the minimum left room.
    extra = [g.max_pods - g.min_pods for g in groups]
    more = [_place(left, fits[g.role], g, n) for g, n in zip(groups, extra, strict=True)]
    gpus = sum(g.min_pods * g.gpus for g in groups)
    shape = ", ".join(
        f"{g.role} {g.min_replicas} replica(s) x {g.hosts} pod(s) of {g.gpus} GPUs" for g in groups
    )
    usage = _usage(ctx)
    if sum(placed) < sum(need):
        short = [
            f"{g.role}: room for {p} of {n} pod(s)"
            for g, p, n in zip(groups, placed, need, strict=True)
            if p < n
        ]
        yield fail(
            f"room for {sum(placed)} of the {sum(need)} worker pod(s) needed ({shape}: "
            f"{gpus} GPUs){usage}",
            "free or add GPU nodes, or fix what excludes them (listed); the RayService stays "
            "unready with Pending workers until every pod of a replica is placed",
            _listed([*short, *_excluded(groups, fits)]),
        )
        return
    title = f"room for the {sum(need)} worker pod(s) needed ({shape}: {gpus} GPUs){usage}"
    if sum(more) < sum(extra):
        bounds = " + ".join(f"{g.max_replicas} {g.role}" for g in groups)
        caps = [
            f"--set {g.values_key}.maxReplicas={g.min_replicas + m // g.hosts}"
            for g, m, e in zip(groups, more, extra, strict=True)
            if m < e
        ]
        yield warn(
            f"{title}; autoscaling to {bounds} replica(s) needs "
            f"{sum(g.max_pods for g in groups)} pod(s), room for {sum(need) + sum(more)}",
            f"cap autoscaling: {' '.join(caps)}, or add nodes",
        )
    else:
        yield ok(title)


def _excluded(groups: list[PodPlan], fits: dict[str, list[NodeFit]]) -> list[str]:
    """Each node that cannot take a role's pod, and why (once when the roles agree)."""
    lines = []
    for at in zip(*(fits[g.role] for g in groups), strict=True):
        reasons = {g.role: "; ".join(f.reasons(g)) for g, f in zip(groups, at, strict=True)}
        node = at[0].name
        if len(set(reasons.values())) == 1:
            if reasons[groups[0].role]:
                lines.append(f"{node}: {reasons[groups[0].role]}")
            continue
        lines += [f"{node} ({role}): {why}" for role, why in reasons.items() if why]
    return lines


CHECKS = [
    Check("gpu.nodes", "GPU nodes", check_gpu_nodes),
    Check("gpu.product", "GPU nodes", check_gpu_product),
    Check("gpu.arch", "GPU nodes", check_arch),
    Check("gpu.resources", "GPU nodes", check_node_resources),
    Check("gpu.taints", "GPU nodes", check_taints),
    Check("gpu.placement", "GPU nodes", check_placement),
]
