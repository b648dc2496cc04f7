"""Running the doctor: the cluster source, the namespace, the plan, the checks."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from serving.doctor import checks_cluster, checks_network, checks_nodes, checks_storage, kinds
from serving.doctor import status as status_checks
from serving.doctor.cluster import Cluster
from serving.doctor.context import PreflightContext, StatusContext
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.findings import Finding, run_checks
from serving.doctor.k8s import semver
from serving.doctor.progress import Progress
from serving.doctor.report import Header


def _cluster(args: argparse.Namespace, progress: Progress) -> Cluster:
    if args.from_dump is not None:
        from serving.doctor.dump import DumpCluster

        return DumpCluster(args.from_dump, progress)
    from serving.doctor.live import LiveCluster, load_client

    api, description, namespace = load_client(args.kubeconfig, args.context)
    return LiveCluster(api, description, namespace, progress, args.request_timeout)


def _namespace(cluster: Cluster, args: argparse.Namespace) -> str:
    namespace = args.namespace or cluster.default_namespace
    if cluster.namespace_exists(namespace) is False:
        where = "in the dump" if not cluster.live else "in the cluster"
        raise DoctorError(
            f"namespace {namespace} does not exist {where} (create it: kubectl create "
            f"namespace {namespace}, or pass -n NAMESPACE)"
        )
    return namespace


def _kube_version(cluster: Cluster) -> str | None:
    try:
        info = cluster.version()
    except Unavailable:
        return None
    return info.get("gitVersion")


def _monitoring_apis(cluster: Cluster) -> list[str]:
    apis = []
    for kind, crd in checks_cluster.MONITORING_CRDS.items():
        try:
            if cluster.get(kinds.CRD, crd) is not None:
                apis.append(f"monitoring.coreos.com/v1/{kind}")
        except Unavailable:
            return []
    return apis


def _min_kube_version(chart: Path) -> tuple[int, int, int]:
    try:
        wanted = yaml.safe_load((chart / "Chart.yaml").read_text()).get("kubeVersion", "")
    except (OSError, AttributeError, yaml.YAMLError):
        wanted = ""
    return semver(wanted.lstrip(">= ")) or (1, 28, 0)


def preflight(args: argparse.Namespace, progress: Progress) -> tuple[Header, list[Finding]]:
    from serving.doctor.checks_network import OPERATOR_NAMESPACE_VALUE, operator_namespace_to_fill
    from serving.doctor.plan import find_helm, image_arches, make_plan, user_values

    cluster = _cluster(args, progress)
    kube_version = _kube_version(cluster)  # the first call: fails fast on a dead server
    namespace = _namespace(cluster, args)
    # A value the chart requires and the cluster answers: the rest is checked as if it were
    # set, and network.operator says what to add.
    values = user_values(args.values, args.set)  # validates the files before helm sees them
    filled = operator_namespace_to_fill(cluster, values)
    sets = [*args.set, f"{OPERATOR_NAMESPACE_VALUE}={filled}"] if filled else args.set
    progress.step("rendering the chart…")
    plan = make_plan(
        args.preset,
        args.platform,
        args.release,
        namespace,
        args.values,
        sets,
        find_helm(args.helm),
        args.chart,
        kube_version,
        _monitoring_apis(cluster),
    )
    arches = tuple(args.image_arch or image_arches(args.chart, values, plan.platform))
    ctx = PreflightContext(
        cluster,
        plan,
        arches,
        image_arch_given=bool(args.image_arch),
        min_kube_version=_min_kube_version(args.chart),
        filled_operator_namespace=filled,
    )
    checks = [
        *checks_cluster.CHECKS,
        *checks_network.CHECKS,
        *checks_nodes.CHECKS,
        *checks_storage.CHECKS,
        *checks_cluster.LATE_CHECKS,
    ]
    findings = run_checks(checks, ctx, progress)
    header = Header(
        "preflight",
        f"{args.preset}: release {args.release} in namespace {namespace}",
        cluster.description,
        {
            "preset": args.preset,
            "platform": plan.platform,
            "release": args.release,
            "namespace": namespace,
        },
    )
    return header, findings


def status(args: argparse.Namespace, progress: Progress) -> tuple[Header, list[Finding]]:
    cluster = _cluster(args, progress)
    _kube_version(cluster)  # as for preflight: a dead server or a bad token fails here
    namespace = _namespace(cluster, args)
    ctx = StatusContext(cluster, namespace, args.release, args.log_lines, args.prometheus)
    findings = run_checks(status_checks.CHECKS, ctx, progress)
    header = Header(
        "status",
        f"{args.release} in namespace {namespace}",
        cluster.description,
        {"release": args.release, "namespace": namespace},
    )
    return header, findings
