"""Finding 1: the chart's NetworkPolicies against the flows a RayService needs.

The evaluator (tests/support/netpol_eval.py) is checked on its own first, then every flow of the
table in tests/support/netpol_flows.py is evaluated against the policies `helm template` renders.
"""

from pathlib import Path

import pytest

from tests.support.chart_render import render
from tests.support.netpol_eval import Cluster, Endpoint, Port, selector_matches
from tests.support.netpol_flows import (
    API_SERVER_IP,
    DENIED,
    DENIED_EGRESS,
    NEEDED,
    NEEDED_EGRESS,
    Flow,
    check,
    cluster_endpoints,
)

WITH_JOBS = {"model": {"download": {"enabled": True}}}
RESTRICTED = {
    "model": {"download": {"enabled": True}},
    "networkPolicy": {
        "egress": {"restrict": True, "apiServer": {"cidrs": [f"{API_SERVER_IP}/32"]}}
    },
}


# --- the evaluator itself -------------------------------------------------------------


def _policy(ns: str, spec: dict) -> dict:
    return {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": ns}, "spec": spec}


def test_selectors_follow_label_selector_semantics():
    labels = {"app": "ray", "tier": "gpu"}
    assert selector_matches({}, labels) and selector_matches(None, {})
    assert selector_matches({"matchLabels": {"app": "ray"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "web"}}, labels)
    expr = lambda op, values=None: {  # noqa: E731
        "matchExpressions": [{"key": "tier", "operator": op, "values": values or []}]
    }
    assert selector_matches(expr("In", ["gpu", "cpu"]), labels)
    assert not selector_matches(expr("In", ["cpu"]), labels)
    assert selector_matches(expr("NotIn", ["cpu"]), labels)
    assert selector_matches(expr("NotIn", ["cpu"]), {})  # NotIn matches a missing key
    assert selector_matches(expr("Exists"), labels) and not selector_matches(expr("Exists"), {})
    assert selector_matches(expr("DoesNotExist"), {}) and not selector_matches(
        expr("DoesNotExist"), labels
    )


def test_evaluator_policy_types_peers_and_ports():
    server = Endpoint("srv", "a", {"app": "srv"}, "10.0.0.2", [Port(8080, "TCP", "http")])
    same_ns = Endpoint("c1", "a", {"app": "client"}, "10.0.0.3")
    other_ns = Endpoint("c2", "b", {"app": "client"}, "10.0.0.4")
    outside = Endpoint("ext", None, ip="8.8.8.8")
    namespaces = {"a": {}, "b": {"env": "prod"}}
    # No policy: everything flows.
    assert Cluster(namespaces, []).allows(other_ns, server, Port(8080))
    # Ingress isolation with a named port and a pod selector (the policy's namespace only).
    named = _policy(
        "a",
        {
            "podSelector": {"matchLabels": {"app": "srv"}},
            "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": "http"}]}],
        },
    )
    cluster = Cluster(namespaces, [named])
    assert cluster.allows(same_ns, server, Port(8080))
    assert not cluster.allows(same_ns, server, Port(9090))
    assert not cluster.allows(other_ns, server, Port(8080))
    assert not cluster.allows(same_ns, server, Port(8080, "UDP"))
    # namespaceSelector alone: every pod of matching namespaces; with a podSelector: both.
    by_ns = _policy(
        "a",
        {
            "podSelector": {},
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"env": "prod"}},
                            "podSelector": {"matchLabels": {"app": "client"}},
                        }
                    ]
                }
            ],
        },
    )
    assert Cluster(namespaces, [by_ns]).allows(other_ns, server, Port(1))
    assert not Cluster(namespaces, [by_ns]).allows(same_ns, server, Port(1))
    # Ranges, ipBlock with except, and egress isolation (policyTypes implied by `egress`).
    egress = _policy(
        "a",
        {
            "podSelector": {"matchLabels": {"app": "client"}},
            "egress": [
                {"to": [{"ipBlock": {"cidr": "8.0.0.0/8", "except": ["8.8.0.0/16"]}}]},
                {"ports": [{"port": 30000, "endPort": 30010, "protocol": "UDP"}]},
            ],
        },
    )
    cluster = Cluster(namespaces, [egress])
    assert not cluster.allows(same_ns, outside, Port(443))  # in the except range
    assert cluster.allows(same_ns, Endpoint("x", None, ip="8.9.9.9"), Port(443))
    assert cluster.allows(same_ns, server, Port(30005, "UDP"))
    assert not cluster.allows(same_ns, server, Port(30011, "UDP"))
    # policyTypes [Ingress] only: egress rules in the same object are not enforced.
    ingress_only = _policy("a", {**egress["spec"], "policyTypes": ["Ingress"]})
    assert Cluster(namespaces, [ingress_only]).allows(same_ns, outside, Port(443))
    # An isolating policy with no rules denies everything in its direction.
    deny = _policy("a", {"podSelector": {}, "policyTypes": ["Ingress"]})
    assert not Cluster(namespaces, [deny]).allows(other_ns, server, Port(8080))
    # Policies only select pods of their own namespace.
    assert Cluster({"a": {}, "b": {}}, [_policy("b", deny["spec"])]).allows(
        other_ns, server, Port(8080)
    )


# --- the chart's policies against the flows table --------------------------------------


def _ids(flows: list[Flow]) -> list[str]:
    return [f"{f.source}->{f.dest}:{f.port}/{f.protocol}" for f in flows]


@pytest.fixture(scope="module")
def default_release(tmp_path_factory):
    return render(tmp_path_factory.mktemp("np"), {**WITH_JOBS})


@pytest.fixture(scope="module")
def restricted_release(tmp_path_factory):
    return render(tmp_path_factory.mktemp("npe"), RESTRICTED)


@pytest.mark.parametrize("flow", NEEDED, ids=_ids(NEEDED))
def test_needed_flows_are_allowed(flow: Flow, default_release):
    cluster, endpoints = cluster_endpoints(default_release)
    assert check(cluster, endpoints, flow), f"blocked: {flow.why}"


@pytest.mark.parametrize("flow", DENIED, ids=_ids(DENIED))
def test_other_flows_are_denied(flow: Flow, default_release):
    cluster, endpoints = cluster_endpoints(default_release)
    assert not check(cluster, endpoints, flow), f"allowed: {flow.why}"


@pytest.mark.parametrize("flow", NEEDED + NEEDED_EGRESS, ids=_ids(NEEDED + NEEDED_EGRESS))
def test_needed_flows_survive_restricted_egress(flow: Flow, restricted_release):
    cluster, endpoints = cluster_endpoints(restricted_release)
    assert check(cluster, endpoints, flow), f"blocked: {flow.why}"


@pytest.mark.parametrize("flow", DENIED + DENIED_EGRESS, ids=_ids(DENIED + DENIED_EGRESS))
def test_restricted_egress_denies_the_rest(flow: Flow, restricted_release):
    cluster, endpoints = cluster_endpoints(restricted_release)
    assert not check(cluster, endpoints, flow), f"allowed: {flow.why}"


def test_operator_namespace_is_required_and_pins_the_dashboard_rule(tmp_path: Path):
    unset = {"networkPolicy": {"kuberayOperator": {"namespace": ""}}}
    stderr = render(tmp_path, unset, expect_ok=False)
    assert "networkPolicy.kuberayOperator.namespace is required" in stderr
    assert render(tmp_path, {"networkPolicy": {"enabled": False, "kuberayOperator": {}}})
    spoofed = Flow("spoofed-operator", "head", 8265, "")
    # A named namespace: the operator there reaches the dashboard and the proxy, pods with
    # its labels anywhere else do not.
    pinned = render(tmp_path, {"networkPolicy": {"kuberayOperator": {"namespace": "ray-system"}}})
    assert check(*cluster_endpoints(pinned, "ray-system"), NEEDED[0])
    assert check(*cluster_endpoints(pinned, "ray-system"), NEEDED[1])
    assert not check(*cluster_endpoints(pinned, "ray-system"), spoofed)
    assert not check(*cluster_endpoints(pinned, "kuberay-operator"), NEEDED[0])
    # anyNamespace is the explicit choice to admit the labels from every namespace.
    anywhere = render(
        tmp_path, {"networkPolicy": {"kuberayOperator": {"namespace": "", "anyNamespace": True}}}
    )
    for namespace in ("kuberay-operator", "ray-system", "default"):
        assert check(*cluster_endpoints(anywhere, namespace), NEEDED[0]), namespace
    assert check(*cluster_endpoints(anywhere), spoofed)
    both = {"networkPolicy": {"kuberayOperator": {"namespace": "ray", "anyNamespace": True}}}
    assert "contradict each other" in render(tmp_path, both, expect_ok=False)
    for bad in ("Ray-System", "ray_system", "*", "a" * 64):
        stderr = render(
            tmp_path, {"networkPolicy": {"kuberayOperator": {"namespace": bad}}}, expect_ok=False
        )
        assert "kuberayOperator" in stderr and "namespace" in stderr, bad


def test_api_peers_restrict_clients_but_not_the_operator_or_helm_test(tmp_path: Path):
    objects = render(
        tmp_path,
        {"networkPolicy": {"apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]}},
    )
    cluster, endpoints = cluster_endpoints(objects)
    assert check(cluster, endpoints, Flow("ml-client", "head", 8000, ""))
    assert not check(cluster, endpoints, Flow("tenant", "head", 8000, ""))
    assert not check(cluster, endpoints, Flow("same-ns-app", "worker-0", 8000, ""))
    assert check(cluster, endpoints, Flow("helm-test", "head", 8000, ""))
    assert check(cluster, endpoints, Flow("operator", "head", 8000, ""))


def test_restricted_egress_with_autoscaling_needs_the_api_server(tmp_path: Path):
    values = {"networkPolicy": {"egress": {"restrict": True}}}
    stderr = render(tmp_path, values, expect_ok=False)
    assert "networkPolicy.egress.apiServer.cidrs" in stderr
    # Without autoscaling nothing in the release calls the Kubernetes API.
    fixed = {**values, "workers": {"minReplicas": 2, "maxReplicas": 2}}
    cluster, endpoints = cluster_endpoints(render(tmp_path, fixed))
    assert not check(cluster, endpoints, Flow("head", "api-server", 443, ""))
    assert check(cluster, endpoints, Flow("head", "kube-dns", 53, "", "UDP"))
