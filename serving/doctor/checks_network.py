"""Preflight: the NetworkPolicy's KubeRay-operator rule against where the operator runs.

The chart admits the operator to the Ray dashboard (8265, which runs Ray jobs) from one
namespace, `networkPolicy.kuberayOperator.namespace`, which has no default. A rule naming
another namespace than the operator's leaves the RayService unconfigured for good: KubeRay
cannot push the Serve config (rayservice_controller.go, FetchHeadServiceURL with
DashboardPortName)."""

from __future__ import annotations

from serving.doctor.checks_cluster import find_operators
from serving.doctor.cluster import Cluster
from serving.doctor.context import PreflightContext
from serving.doctor.errors import Unavailable
from serving.doctor.findings import Check, Finding, fail, ok, warn
from serving.doctor.k8s import Obj, dig, namespace

OPERATOR_NAMESPACE_VALUE = "networkPolicy.kuberayOperator.namespace"
DASHBOARD_PORT = 8265
ANY = "any namespace"  # no namespace name has a space


def operator_namespaces(cluster: Cluster) -> list[str]:
    """Where KubeRay operators run (none where the cluster cannot say)."""
    try:
        return sorted({namespace(d) for d in find_operators(cluster)})
    except Unavailable:
        return []


def operator_namespace_to_fill(cluster: Cluster, user_values: dict) -> str | None:
    """The operator's namespace, where the user's values leave the required value out and
    exactly one namespace runs a KubeRay operator; else None (helm then names the value)."""
    policy = user_values.get("networkPolicy") or {}
    operator = policy.get("kuberayOperator") or {}
    if policy.get("enabled") is False or operator.get("namespace") or operator.get("anyNamespace"):
        return None
    found = operator_namespaces(cluster)
    return found[0] if len(found) == 1 else None


def admitted_namespace(objects: list[Obj]) -> str | None:
    """The namespace whose operator pods the rendered NetworkPolicy lets reach the dashboard:
    a name, ANY for an empty namespaceSelector, None when no rule covers the dashboard."""
    for policy in objects:
        if policy.get("kind") != "NetworkPolicy":
            continue
        for rule in dig(policy, "spec", "ingress", default=[]) or []:
            if not any(p.get("port") == DASHBOARD_PORT for p in rule.get("ports") or []):
                continue
            for peer in rule.get("from") or []:
                selector = peer.get("namespaceSelector")
                if selector is None:
                    continue
                names = (selector.get("matchLabels") or {}).get("kubernetes.io/metadata.name")
                return names or ANY
    return None


def check_operator_namespace(ctx: PreflightContext) -> Finding | None:
    filled, admitted = ctx.filled_operator_namespace, admitted_namespace(ctx.plan.objects)
    if admitted is None:  # no NetworkPolicy, or the chart did not render
        return None
    running = operator_namespaces(ctx.cluster)
    if not running:  # kuberay.operator says so
        return None
    if filled:
        return warn(
            f"{OPERATOR_NAMESPACE_VALUE} is not set, and helm install fails without it; the "
            f"KubeRay operator runs in {filled} (checked here as if set)",
            f"add --set {OPERATOR_NAMESPACE_VALUE}={filled}",
        )
    if admitted == ANY:
        return warn(
            "the NetworkPolicy admits pods with the KubeRay operator's labels from any "
            "namespace to the Ray dashboard, which runs Ray jobs "
            "(networkPolicy.kuberayOperator.anyNamespace=true)",
            f"on a shared cluster set {OPERATOR_NAMESPACE_VALUE}={running[0]} instead",
        )
    if admitted not in running:
        return fail(
            f"the NetworkPolicy admits the KubeRay operator from namespace {admitted}, but it "
            f"runs in {', '.join(running)}: KubeRay could not configure the RayService",
            f"set {OPERATOR_NAMESPACE_VALUE}={running[0]}",
        )
    return ok(f"the NetworkPolicy admits the KubeRay operator from its namespace, {admitted}")


CHECKS = [Check("network.operator", "Network", check_operator_namespace)]
