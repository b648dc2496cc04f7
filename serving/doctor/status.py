"""`doctor status`: what an installed release is doing, what is wrong, and what to do.

Field names and reasons follow KubeRay 1.x (ray-project/kuberay,
ray-operator/apis/ray/v1/rayservice_types.go and raycluster_types.go): RayService
`status.conditions` Ready (reasons Initializing, InitializingTimeout, ValidationFailed,
ZeroServeEndpoints, NonZeroServeEndpoints) and UpgradeInProgress, the deprecated
`serviceStatus`, `numServeEndpoints`, `activeServiceStatus` / `pendingServiceStatus` with
`rayClusterName` and `applicationStatuses` (Serve's NOT_STARTED, DEPLOYING, RUNNING,
DEPLOY_FAILED, DELETING, UNHEALTHY); RayCluster conditions HeadPodReady,
RayClusterProvisioned and ReplicaFailure, `readyWorkerReplicas` / `desiredWorkerReplicas`.
KubeRay names pods `<cluster>-head-xxxxx` and `<cluster>-<group>-worker-xxxxx` and labels
RayClusters with `ray.io/originated-from-cr-name`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import yaml

from serving.config.preset import PresetError, load_preset
from serving.doctor import kinds
from serving.doctor.checks_cluster import check_kuberay_crds, check_kuberay_operator
from serving.doctor.checks_nodes import fit_node, toleration_fix
from serving.doctor.context import LIVE_PODS, StatusContext, gpus_in_use
from serving.doctor.errors import Unavailable
from serving.doctor.findings import Check, Finding, fail, ok, warn
from serving.doctor.k8s import (
    Obj,
    age,
    condition,
    dig,
    event_message,
    event_object,
    event_time,
    is_true,
    labels,
    name,
    taint_text,
    timestamp,
)
from serving.doctor.plan import pod_plan

STARTUP_HINT = (
    "DSV4 loads for many minutes (the chart's startup probe allows probes.startupSeconds, "
    "90m by default); watch: kubectl -n {ns} get pods -w"
)


def _log_lines(ctx: StatusContext, pod: str, container: str, previous: bool) -> list[str]:
    text = ctx.cluster.pod_log(ctx.namespace, pod, container, previous, ctx.log_lines)
    flag = " --previous" if previous else ""
    command = f"kubectl -n {ctx.namespace} logs {pod} -c {container}{flag} --tail {ctx.log_lines}"
    if text is None:
        where = "unavailable" if ctx.cluster.live else "not in the dump"
        return [f"(logs {where}: {command})"]
    lines = text.rstrip("\n").splitlines()[-ctx.log_lines :]
    return [f"last log lines ({command}):", *(f"  | {line}" for line in lines)]


def check_rayservice(ctx: StatusContext) -> Iterator[Finding]:
    services = ctx.rayservices()
    if not services:
        yield fail(
            f"no RayService of release {ctx.release} in namespace {ctx.namespace}",
            f"is it installed? helm -n {ctx.namespace} list; kubectl -n {ctx.namespace} get "
            "rayservices",
        )
        return
    now = ctx.cluster.now()
    for svc in services:
        svc_name = name(svc)
        endpoints = dig(svc, "status", "numServeEndpoints", default=0)
        ready = condition(svc, "Ready")
        if ready is None:  # KubeRay < 1.3 sets no conditions, only serviceStatus
            if dig(svc, "status", "serviceStatus") == "Running":
                yield ok(f"RayService {svc_name} Running ({endpoints} serve endpoint(s))")
            else:
                yield warn(
                    f"RayService {svc_name} not running and without conditions "
                    "(KubeRay older than 1.3?)",
                    "upgrade KubeRay to >= 1.3; see the pods below",
                )
            continue
        since = age(timestamp(ready.get("lastTransitionTime")), now)
        reason, message = ready.get("reason", ""), ready.get("message", "")
        if ready.get("status") == "True":
            yield ok(f"RayService {svc_name} Ready: {endpoints} serve endpoint(s)")
        elif reason == "Initializing":
            yield warn(
                f"RayService {svc_name} initializing for {since}",
                STARTUP_HINT.format(ns=ctx.namespace) + "; problems below hold it back",
            )
        elif reason == "InitializingTimeout":
            yield fail(
                f"RayService {svc_name} gave up initializing: {message}",
                "fix what the findings below show, then delete the RayCluster or reinstall",
            )
        elif reason == "ValidationFailed":
            yield fail(
                f"KubeRay rejected RayService {svc_name}: {message}",
                "the spec is invalid for this KubeRay version: upgrade KubeRay (>= 1.3)",
            )
        elif reason == "ZeroServeEndpoints":
            yield fail(
                f"RayService {svc_name} lost all serve endpoints ({since} ago)",
                "the Serve proxies are unhealthy: see the pods and the Serve application below",
            )
        else:
            yield fail(f"RayService {svc_name} not ready: {reason} {message}".strip())
        upgrade = condition(svc, "UpgradeInProgress")
        if upgrade and upgrade.get("status") == "True":
            pending = dig(svc, "status", "pendingServiceStatus", "rayClusterName", default="?")
            yield warn(
                f"upgrade in progress: new RayCluster {pending} is preparing",
                "traffic stays on the active cluster until the new one serves",
            )


def check_rayclusters(ctx: StatusContext) -> Iterator[Finding]:
    now = ctx.cluster.now()
    for svc in ctx.rayservices():
        active = dig(svc, "status", "activeServiceStatus", "rayClusterName")
        pending = dig(svc, "status", "pendingServiceStatus", "rayClusterName")
        clusters = ctx.cluster.list(
            kinds.RAY_CLUSTER,
            ctx.namespace,
            label_selector=f"ray.io/originated-from-cr-name={name(svc)}",
        )
        if not clusters:
            yield warn(
                f"RayService {name(svc)} has no RayCluster yet",
                "KubeRay creates it within seconds: is the operator running and watching "
                f"{ctx.namespace}?",
            )
        for cluster in clusters:
            cluster_name = name(cluster)
            role = (
                "active"
                if cluster_name == active
                else "pending"
                if cluster_name == pending
                else "old"
            )
            status = cluster.get("status") or {}
            ready_workers = status.get("readyWorkerReplicas", 0)
            desired = status.get("desiredWorkerReplicas", 0)
            failure = condition(cluster, "ReplicaFailure")
            head = condition(cluster, "HeadPodReady")
            label = f"RayCluster {cluster_name} ({role})"
            created = timestamp(dig(cluster, "metadata", "creationTimestamp"))
            if failure and failure.get("status") == "True":
                yield fail(
                    f"{label} cannot create pods: {failure.get('message', '')}".strip(),
                    "often a ResourceQuota or admission policy: kubectl -n "
                    f"{ctx.namespace} describe raycluster {cluster_name}",
                )
            elif head is not None and head.get("status") != "True":
                yield warn(
                    f"{label}: head pod not ready ({head.get('reason', '?')}), "
                    f"{ready_workers}/{desired} workers ready, age {age(created, now)}"
                )
            elif ready_workers < desired:
                yield warn(
                    f"{label}: {ready_workers}/{desired} worker pods ready, age {age(created, now)}"
                )
            else:
                yield ok(f"{label}: head and {ready_workers}/{desired} worker pods ready")


# How the scheduler explains itself (FailedScheduling), and what to change.
def scheduling_fixes(message: str) -> list[str]:
    text = message.split(". preemption:")[0]
    fixes = []
    for resource in re.findall(r"Insufficient ([\w./-]+)", text):
        if resource.endswith("/gpu"):
            fixes.append(
                f"not enough free {resource}: free GPUs, add nodes, or lower "
                "workers.maxReplicas / replicas"
            )
        elif resource == "memory":
            fixes.append("not enough memory: lower workers.resources.memory or use bigger nodes")
        elif resource == "cpu":
            fixes.append("not enough CPU: lower workers.resources.cpu")
        else:
            fixes.append(f"not enough {resource}")
    for taint in re.findall(r"untolerated taint\(?s?\)? (\{[^}]*\})", text):
        fixes.append(f"tolerate taint {taint}: add it to scheduling.tolerations")
    if "didn't match Pod's node affinity/selector" in text:
        fixes.append("no node matches scheduling.nodeSelector / affinity: fix the labels")
    if "unbound immediate PersistentVolumeClaims" in text or "persistentvolumeclaim" in text:
        fixes.append("the model claim is not bound: kubectl describe pvc (storage class?)")
    if "were unschedulable" in text:
        fixes.append("nodes are cordoned: kubectl uncordon NODE")
    if "Too many pods" in text:
        fixes.append("nodes are at their pod limit")
    return fixes


def _scheduling_message(ctx: StatusContext, pod: Obj) -> str:
    events = [
        e
        for e in ctx.events()
        if event_object(e) == ("Pod", name(pod)) and e.get("reason") == "FailedScheduling"
    ]
    if events:
        latest = max(events, key=lambda e: event_time(e) or timestamp("1970-01-01T00:00:00Z"))
        return event_message(latest)
    cond = condition(pod, "PodScheduled")
    return (cond or {}).get("message", "")


def _gpu_type(ctx: StatusContext) -> str | None:
    """The preset's GPU, read back from the RayService's Serve config."""
    for svc in ctx.rayservices():
        try:
            config = yaml.safe_load(dig(svc, "spec", "serveConfigV2", default="")) or {}
            preset = config["applications"][0]["args"]["preset"]
            return load_preset(preset).accelerator.type
        except (yaml.YAMLError, KeyError, IndexError, TypeError, PresetError):
            continue
    return None


def _node_analysis(ctx: StatusContext, pod: Obj) -> tuple[list[str], list[Obj]]:
    """Why each GPU node turns this pod away, judged like preflight; and their taints."""
    spec = pod.get("spec") or {}
    limits = dig(spec, "containers", 0, "resources", "limits", default={}) or {}
    resource = next((r for r in ("nvidia.com/gpu", "amd.com/gpu") if r in limits), None)
    if resource is None:
        return [], []
    key = f"nodes-and-use:{resource}"
    if key not in ctx._cache:  # read once however many pods are Pending
        try:
            nodes = ctx.cluster.list(kinds.NODE)
        except Unavailable:
            nodes = None
        try:
            pods = ctx.cluster.list(kinds.POD, field_selector=LIVE_PODS)
            in_use: dict[str, int] | None = gpus_in_use(pods, resource)
        except Unavailable:
            in_use = None
        ctx._cache[key] = (nodes, in_use)
    nodes, in_use = ctx._cache[key]
    if nodes is None:
        return [], []
    plan = pod_plan("worker", spec, resource)
    gpu_type = _gpu_type(ctx)
    lines, taints = [], {}
    for node in nodes:
        fit = fit_node(node, plan, gpu_type, in_use, None)
        if fit.allocatable == 0:
            continue
        reasons = fit.reasons(plan)
        lines.append(f"{fit.name}: {'; '.join(reasons) if reasons else 'would fit now'}")
        for taint in fit.user_taints:
            taints[taint_text(taint)] = taint
    return lines, list(taints.values())


def _role(pod: Obj) -> str:
    have = labels(pod)
    return {
        "head": "head",
        "worker": "worker",
    }.get(have.get("ray.io/node-type", ""), have.get("app.kubernetes.io/component", "pod"))


def _statuses(pod: Obj, init: bool = False) -> list[Obj]:
    key = "initContainerStatuses" if init else "containerStatuses"
    return dig(pod, "status", key, default=[]) or []


BAD_WAITING = {
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


# The JIT warm Job (templates/warm-job.yaml): its label, its container, and the workers'
# init container that waits for it.
WARM_COMPONENT = "jit-warm"
WARM_CONTAINER = "warm"
WARM_WAIT = "wait-jit-warm"


# What a worker's init container waits for while it runs.
INIT_WAITS = {
    "wait-for-weights": "waiting for the download Job to fill the volume",
    # templates/_jit_warm.tpl: it ends on its own after jitCache.warm.waitSeconds.
    WARM_WAIT: "waiting for the JIT warm Job to fill the kernel cache (at most "
    "jitCache.warm.waitSeconds, then the engine compiles its own)",
}


def check_pods(ctx: StatusContext) -> Iterator[Finding]:
    # Finished pods (a download Job's, a warm Job's failed attempts) are the Job's story, and
    # `helm test` pods come and go.
    pods = [
        p
        for p in ctx.pods()
        if _role(p) != "helm-test"
        and dig(p, "status", "phase") != "Succeeded"
        and not (_role(p) == WARM_COMPONENT and dig(p, "status", "phase") == "Failed")
    ]
    if not pods:
        if ctx.rayservices():
            yield warn(
                f"no pod of release {ctx.release} in {ctx.namespace}",
                "KubeRay has not created any: see the RayCluster finding above",
            )
        return
    now = ctx.cluster.now()
    healthy = []
    for pod in sorted(pods, key=name):
        pod_name, role = name(pod), _role(pod)
        label = f"{role} pod {pod_name}"
        phase = dig(pod, "status", "phase", default="?")
        scheduled = condition(pod, "PodScheduled")
        created = timestamp(dig(pod, "metadata", "creationTimestamp"))
        if phase == "Pending" and scheduled and scheduled.get("status") == "False":
            message = _scheduling_message(ctx, pod)
            nodes, taints = _node_analysis(ctx, pod)
            fixes = [toleration_fix(taints)] if taints else []
            short = any("free" in n or "allocatable" in n for n in nodes)
            for fix in scheduling_fixes(message):
                # The node analysis is sharper than the scheduler's per-node tallies: nodes
                # without GPUs count as "Insufficient nvidia.com/gpu" there too.
                if nodes and (("taint" in fix and taints) or ("/gpu" in fix and not short)):
                    continue
                fixes.append(fix)
            details = [f"scheduler: {message}"] if message else []
            if nodes:
                details += ["GPU nodes, judged against this pod:", *(f"  {n}" for n in nodes)]
            yield fail(
                f"{label} Pending for {age(created, now)}: cannot be scheduled",
                "; ".join(fixes) or "kubectl describe pod " + pod_name,
                details,
            )
            continue
        if phase == "Failed":
            reason = dig(pod, "status", "reason", default="")
            yield fail(
                f"{label} Failed {reason}: {dig(pod, 'status', 'message', default='')}".strip()
            )
            continue
        problem = None
        for status in [*_statuses(pod, init=True), *_statuses(pod)]:
            container = status.get("name", "?")
            waiting = dig(status, "state", "waiting", default={})
            last = dig(status, "lastState", "terminated", default={})
            reason = waiting.get("reason", "")
            if reason in BAD_WAITING:
                image = status.get("image", "")
                fix = (
                    f"check that {image} exists and is pushed (make push REGISTRY=...), and "
                    "set image.pullSecrets for a private registry"
                    if "Image" in reason
                    else f"kubectl -n {ctx.namespace} describe pod {pod_name}"
                )
                problem = fail(
                    f"{label}: container {container} {reason}",
                    fix,
                    [waiting.get("message", "")] if waiting.get("message") else [],
                )
                break
            recovered = bool(status.get("ready"))
            if last.get("reason") == "OOMKilled":
                problem = (warn if recovered else fail)(
                    f"{label}: container {container} was OOMKilled "
                    f"({status.get('restartCount', 0)} restart(s))"
                    + ("; running again" if recovered else ""),
                    "raise workers.resources.memory (the limit; /dev/shm counts against it) "
                    "or lower max_num_seqs / max_model_len in serve.set",
                    _log_lines(ctx, pod_name, container, previous=True),
                )
                break
            restarted = last and status.get("restartCount", 0) > 0 and not recovered
            if reason == "CrashLoopBackOff" or restarted:
                exit_code = last.get("exitCode", "?")
                problem = fail(
                    f"{label}: container {container} "
                    f"{reason or 'restarted'} (exit {exit_code}, "
                    f"{status.get('restartCount', 0)} restart(s))",
                    "read the log below; the engine's error is usually its last lines",
                    _log_lines(ctx, pod_name, container, previous=True),
                )
                break
            running = dig(status, "state", "running")
            if status in _statuses(pod, init=True) and running:
                wait = INIT_WAITS.get(container, f"init container {container} running")
                since = age(timestamp(running.get("startedAt")), now)
                problem = warn(f"{label}: {wait} ({since})")
                break
        if problem:
            yield problem
            continue
        if phase == "Running" and not is_true(pod, "Ready"):
            started = timestamp(dig(pod, "status", "startTime"))
            yield warn(
                f"{label} running, not ready yet ({age(started, now)})",
                STARTUP_HINT.format(ns=ctx.namespace),
            )
            continue
        if phase == "Pending":
            yield warn(f"{label} Pending for {age(created, now)}")
            continue
        healthy.append(pod_name)
    if healthy:
        yield ok(f"{len(healthy)} pod(s) running and ready", *healthy[:8])


def _job_pods(ctx: StatusContext, job_name: str) -> list[Obj]:
    """A Job's pods, oldest first."""
    return sorted(
        (p for p in ctx.pods() if labels(p).get("job-name") == job_name),
        key=lambda p: dig(p, "metadata", "creationTimestamp", default=""),
    )


def check_download(ctx: StatusContext) -> Iterator[Finding]:
    jobs = ctx.cluster.list(
        kinds.JOB,
        ctx.namespace,
        label_selector=f"{ctx.selector},app.kubernetes.io/component=model-download",
    )
    now = ctx.cluster.now()
    for job in jobs:
        job_name = name(job)
        status = job.get("status") or {}
        started = timestamp(status.get("startTime"))
        if is_true(job, "Complete") or status.get("succeeded"):
            done = timestamp(status.get("completionTime"))
            took = age(started, done) if started and done else "?"
            yield ok(f"download Job {job_name} completed (took {took})")
            continue
        job_pods = _job_pods(ctx, job_name)
        logs = _log_lines(ctx, name(job_pods[-1]), "download", False) if job_pods else []
        failed = condition(job, "Failed")
        if failed and failed.get("status") == "True":
            yield fail(
                f"download Job {job_name} failed: {failed.get('reason', '')} "
                f"{failed.get('message', '')}".strip(),
                "read the log below (a gated repo needs model.download.tokenSecret; S3 needs "
                f"credentials); rerun: kubectl -n {ctx.namespace} delete job {job_name} && "
                "helm upgrade ...",
                logs,
            )
        else:
            yield warn(
                f"download Job {job_name} running for {age(started, now)} "
                f"({status.get('failed', 0)} failed attempt(s))",
                "the workers wait for it; ~160 GB (Flash) to ~865 GB (Pro) take a while",
                logs,
            )


def _terminated(pod: Obj, container: str) -> Obj:
    for status in _statuses(pod):
        if status.get("name") == container:
            return dig(status, "state", "terminated", default={}) or {}
    return {}


def _warm_awaited(ctx: StatusContext) -> bool:
    """Do the release's GPU workers wait for a warm Job (jitCache.warm on)?"""
    for svc in ctx.rayservices():
        groups = dig(svc, "spec", "rayClusterConfig", "workerGroupSpecs", default=[]) or []
        for group in groups:
            inits = dig(group, "template", "spec", "initContainers", default=[]) or []
            if any(c.get("name") == WARM_WAIT for c in inits):
                return True
    return False


def check_jit_warm(ctx: StatusContext) -> Iterator[Finding]:
    """The JIT warm Job: missing, running, failed (its pods' termination messages, the log's
    tail) or complete (the message's last line: the cache's fit line)."""
    jobs = ctx.cluster.list(
        kinds.JOB,
        ctx.namespace,
        label_selector=f"{ctx.selector},app.kubernetes.io/component={WARM_COMPONENT}",
    )
    ns = ctx.namespace
    if not jobs:
        if _warm_awaited(ctx):
            yield warn(
                f"JIT warm Job of release {ctx.release} missing: the GPU workers wait for it "
                "(jitCache.warm.waitSeconds), then compile their own kernels",
                f"helm upgrade {ctx.release} with the same values creates it again; "
                "--set jitCache.warm.enabled=false stops the wait",
            )
        return
    now = ctx.cluster.now()
    for job in jobs:
        job_name = name(job)
        status = job.get("status") or {}
        started = timestamp(status.get("startTime"))
        pods = _job_pods(ctx, job_name)
        label = f"JIT warm Job {job_name}"
        if is_true(job, "Complete") or status.get("succeeded"):
            done = timestamp(status.get("completionTime"))
            took = age(started, done) if started and done else "?"
            succeeded = [p for p in pods if dig(p, "status", "phase") == "Succeeded"]
            message = _terminated(succeeded[-1], WARM_CONTAINER) if succeeded else {}
            lines = (message.get("message") or "").strip().splitlines()
            if not lines:
                yield ok(
                    f"{label} complete (took {took}); its pod and its fit line are gone",
                    f"each GPU worker logs it: kubectl -n {ns} logs POD -c {WARM_WAIT} --tail 1",
                )
            elif "fits this node" in lines[-1]:
                yield ok(f"{label} complete (took {took})", lines[-1])
            else:
                yield warn(
                    f"{label} complete (took {took}), but the cache does not fit",
                    "the engines compile what the cache lacks (the line above says what "
                    f"differs); kubectl -n {ns} logs job/{job_name} shows the warm",
                    [lines[-1]],
                )
            continue
        failed = condition(job, "Failed")
        if failed and failed.get("status") == "True":
            ended = [(p, end) for p in pods if (end := _terminated(p, WARM_CONTAINER))]
            details = [
                f"earlier attempt: pod {name(p)}, exit {end.get('exitCode', '?')}"
                for p, end in ended[:-1]
            ]
            if ended:
                pod, end = ended[-1]
                details.append(f"pod {name(pod)}, exit {end.get('exitCode', '?')}:")
                if end.get("message"):  # the log's tail (FallbackToLogsOnError)
                    details += _message_lines(end["message"])
                else:
                    details += _log_lines(ctx, name(pod), WARM_CONTAINER, False)
            yield warn(
                f"{label} failed: {failed.get('reason', '')} {failed.get('message', '')}".strip()
                + "; the engines compile their own kernels at start",
                "the message above is its pod's log tail, the last line the cache's fit line; "
                f"rerun: kubectl -n {ns} delete job {job_name} && helm upgrade ... (same values)",
                details,
            )
            continue
        latest = pods[-1] if pods else None
        attempts = status.get("failed", 0)
        retried = f" ({attempts} failed attempt(s) before)" if attempts else ""
        if latest is not None and dig(latest, "status", "phase") == "Pending":
            since = age(timestamp(dig(latest, "metadata", "creationTimestamp")), now)
            doing = f": its pod has been Pending for {since} (see Pods above){retried}"
            logs: list[str] = []
        else:
            doing = f" running for {age(started, now)}{retried}"
            logs = _log_lines(ctx, name(latest), WARM_CONTAINER, False) if latest else []
        yield warn(
            f"{label}{doing}",
            "the GPU workers wait for it, at most jitCache.warm.waitSeconds; follow it: "
            f"kubectl -n {ns} logs -f job/{job_name}",
            logs,
        )


def _message_lines(message: str, keep: int = 6) -> list[str]:
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    if len(lines) > keep:
        lines = [lines[0], "…", *lines[-(keep - 1) :]]
    return [f"  | {ln}" for ln in lines]


def check_serve_apps(ctx: StatusContext) -> Iterator[Finding]:
    for svc in ctx.rayservices():
        for which in ("activeServiceStatus", "pendingServiceStatus"):
            apps = dig(svc, "status", which, "applicationStatuses", default={}) or {}
            cluster = dig(svc, "status", which, "rayClusterName")
            if not cluster:
                continue
            if not apps:
                yield warn(
                    f"Serve on {cluster} has reported no application yet",
                    "KubeRay submits serveConfigV2 once the head is up; see the pods above",
                )
            for app_name, app in sorted(apps.items()):
                state = app.get("status", "?")
                where = f"Serve application {app_name} on {cluster}"
                bad = [
                    f"deployment {d}: {s.get('status')} {s.get('message', '')}".strip()
                    for d, s in sorted((app.get("serveDeploymentStatuses") or {}).items())
                    if s.get("status") not in ("HEALTHY", None)
                ]
                if state == "RUNNING":
                    yield ok(f"{where} RUNNING")
                elif state in ("DEPLOY_FAILED", "UNHEALTHY"):
                    yield fail(
                        f"{where} {state}",
                        "the message is Ray's; fix its cause (often the engine's error in a "
                        "worker's log), then the RayService retries",
                        [*_message_lines(app.get("message", "")), *bad],
                    )
                else:
                    waiting = any("to be scheduled" in line for line in bad)
                    hint = (
                        "Ray waits for GPU workers to join the cluster: see the Pending pods"
                        if waiting
                        else STARTUP_HINT.format(ns=ctx.namespace)
                    )
                    yield warn(
                        f"{where} {state}",
                        hint,
                        [*_message_lines(app.get("message", ""), 3), *bad],
                    )


def check_prometheus(ctx: StatusContext) -> Iterator[Finding]:
    if not ctx.prometheus:
        return
    from serving.doctor.prometheus import release_metrics

    yield from release_metrics(ctx.prometheus, ctx.namespace)


CHECKS = [
    Check("kuberay.crds", "KubeRay", check_kuberay_crds),
    Check("kuberay.operator", "KubeRay", check_kuberay_operator),
    Check("release.rayservice", "RayService", check_rayservice),
    Check("release.raycluster", "RayService", check_rayclusters),
    Check("release.pods", "Pods", check_pods),
    Check("release.download", "Model download", check_download),
    Check("release.jit-warm", "JIT cache warm", check_jit_warm),
    Check("release.serve", "Serve application", check_serve_apps),
    Check("metrics.prometheus", "Metrics", check_prometheus),
]
