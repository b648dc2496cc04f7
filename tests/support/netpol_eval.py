"""A NetworkPolicy evaluator (test helper): does the policy set allow a connection?

Implements the networking.k8s.io/v1 semantics the API documents and CNIs (Calico, Cilium)
enforce: a pod is isolated for a direction when a policy in its namespace selects it and
lists that direction in policyTypes (which defaults to Ingress, plus Egress when the policy
has egress rules); an isolated pod admits a connection when any rule of any such policy
matches it; a connection needs the source's egress and the destination's ingress. Peers:
podSelector (the policy's namespace), namespaceSelector, both (pods of matching namespaces)
or ipBlock (with except); an empty peer list admits everything. Ports: protocol (default
TCP), number or named container port of the destination, endPort ranges; no ports admits
every port. Label selectors support matchLabels and matchExpressions (In, NotIn, Exists,
DoesNotExist).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Port:
    number: int
    protocol: str = "TCP"
    name: str = ""


@dataclass
class Endpoint:
    """A pod (namespace set) or an address outside the cluster (namespace None)."""

    name: str
    namespace: str | None
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.0.0.1"
    ports: list[Port] = field(default_factory=list)

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector matches everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            raise ValueError(f"unknown selector operator {op!r}")
    return True


class Cluster:
    def __init__(self, namespaces: dict[str, dict[str, str]], policies: list[dict[str, Any]]):
        # The API server labels every namespace with its name.
        self.namespaces = {
            name: {**labels, "kubernetes.io/metadata.name": name}
            for name, labels in namespaces.items()
        }
        self.policies = policies

    def _selecting(self, pod: Endpoint, direction: str) -> list[dict[str, Any]]:
        out = []
        for policy in self.policies:
            meta, spec = policy["metadata"], policy["spec"]
            if meta.get("namespace") != pod.namespace:
                continue
            if not selector_matches(spec.get("podSelector"), pod.labels):
                continue
            types = spec.get("policyTypes") or (
                ["Ingress", "Egress"] if "egress" in spec else ["Ingress"]
            )
            if direction in types:
                out.append(policy)
        return out

    def _peer_matches(self, peer: dict[str, Any], policy_ns: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            address = ipaddress.ip_address(other.ip)
            if address not in ipaddress.ip_network(block["cidr"]):
                return False
            return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
        if not other.is_pod:
            return False
        if "namespaceSelector" in peer:
            ns_labels = self.namespaces.get(other.namespace, {})
            if not selector_matches(peer["namespaceSelector"], ns_labels):
                return False
        elif other.namespace != policy_ns:
            return False
        return selector_matches(peer.get("podSelector"), other.labels)

    @staticmethod
    def _port_matches(rule_ports: list[dict[str, Any]] | None, dest: Endpoint, port: Port) -> bool:
        if not rule_ports:
            return True
        for rp in rule_ports:
            if rp.get("protocol", "TCP") != port.protocol:
                continue
            value = rp.get("port")
            if value is None:
                return True
            if isinstance(value, str):
                # A named port refers to the destination pod's container port of that name.
                named = [p for p in dest.ports if p.name == value and p.protocol == port.protocol]
                if any(p.number == port.number for p in named):
                    return True
                continue
            if value <= port.number <= rp.get("endPort", value):
                return True
        return False

    def _admits(self, pod: Endpoint, direction: str, other: Endpoint, dest: Endpoint, port: Port):
        policies = self._selecting(pod, direction)
        if not policies:
            return True  # not isolated in this direction
        key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for policy in policies:
            for rule in policy["spec"].get(key) or []:
                peers = rule.get(peers_key)
                peer_ok = not peers or any(
                    self._peer_matches(p, policy["metadata"]["namespace"], other) for p in peers
                )
                if peer_ok and self._port_matches(rule.get("ports"), dest, port):
                    return True
        return False

    def allows(self, source: Endpoint, dest: Endpoint, port: Port) -> bool:
        egress_ok = not source.is_pod or self._admits(source, "Egress", dest, dest, port)
        ingress_ok = not dest.is_pod or self._admits(dest, "Ingress", source, dest, port)
        return egress_ok and ingress_ok
