"""Where a disaggregated deployment's pieces run on a Ray cluster of role node groups
(the Helm chart's prefill and decode worker groups), and the ports NIXL uses there.

One source for the Serve config (the bundles' and the ingress's custom resources,
serving/disagg/configs.py, serving/app.py) and for the chart (the groups'
``rayStartParams.resources``, the pods' NIXL environment and ports, the NetworkPolicy):
``dsv4-serve generate`` writes this module's values to ``files/disaggregation.yaml``.
"""

from __future__ import annotations

from typing import Any

# A custom Ray resource per role: each bundle of a role's replica asks for as many units as
# GPU, and only that role's nodes advertise it (one unit per GPU), so Ray (and KubeRay's
# autoscaler, which reads rayStartParams.resources) places prefill and decode replicas on
# their own node groups.
ROLE_RESOURCES = {"prefill": "dsv4_prefill", "decode": "dsv4_decode"}
# The ingress (Dsv4Ingress: Ray Serve LLM's OpenAI ingress with our gateway) asks for one
# unit of this; the chart's head advertises one, so the gateway metrics port has one home.
INGRESS_RESOURCE = "dsv4_ingress"

# NIXL's side channel (vLLM's handshake listener, one per engine:
# vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py, port
# VLLM_NIXL_SIDE_CHANNEL_PORT + the data-parallel index). Ray Serve LLM's bases: prefill
# 20000 (engines/vllm/kv_transfer/nixl.py, _set_side_channel_port), decode 22000
# (serving_patterns/prefill_decode/builder.py, _default_decode_nixl_port_base); it adds the
# replica's rank times its GPUs unless the variable is already set. On the chart's pods one
# engine fills a pod, so the pods set the variable to the base: a fixed port per role that
# a readiness probe and the NetworkPolicy can name.
NIXL_SIDE_CHANNEL_PORTS = {"prefill": 20000, "decode": 22000}
# UCX's TCP transport (NIXL's UCX backend) listens on a port drawn from UCX_TCP_PORT_RANGE
# (0 by default: any ephemeral port); the pods pin it so the NetworkPolicy can open it.
# Over RDMA devices (rdma.enabled) the KV does not cross the pod network at all.
UCX_TCP_PORT_RANGE = (24000, 24999)
# Every NIXL port above lies in this band, which no Ray port and no chart port may use: the
# NetworkPolicy opens it between prefill and decode pods only.
NIXL_PORT_BAND = (20000, 24999)


def chart_table() -> dict[str, Any]:
    """The values above as the chart reads them (files/disaggregation.yaml)."""
    return {
        "roleResources": dict(ROLE_RESOURCES),
        "ingressResource": INGRESS_RESOURCE,
        "nixlSideChannelPorts": dict(NIXL_SIDE_CHANNEL_PORTS),
        "ucxTcpPortRange": list(UCX_TCP_PORT_RANGE),
        "nixlPortBand": list(NIXL_PORT_BAND),
    }
