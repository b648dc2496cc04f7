"""The preset section that turns one engine deployment into prefill and decode ones."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoleAutoscaling(_Strict):
    """Serve's autoscaling of one role's deployment (its ``autoscaling_config``). A role
    never scales to zero: decode has no engine to hand a prompt to without prefill, and
    the client's request waits on decode."""

    min_replicas: int = Field(ge=1, description="fewest engine replicas of this role")
    max_replicas: int = Field(ge=1, description="most engine replicas of this role")
    target_ongoing_requests: int = Field(ge=1, description="Serve's target per replica")

    @model_validator(mode="after")
    def _ordered(self) -> RoleAutoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) must not exceed max_replicas "
                f"({self.max_replicas})"
            )
        return self


class Role(_Strict):
    """One side of the split: its replica count or autoscaling and, on a shared GPU, its
    share."""

    replicas: int = Field(1, ge=1, description="engine replicas of this role (no autoscaling)")
    autoscaling: RoleAutoscaling | None = Field(
        None, description="Serve autoscales this role's deployment between its bounds"
    )
    gpu_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="share of one GPU each replica asks Ray for (one-GPU replicas); "
        "default: accelerator.gpu_share. Prefill and decode at 0.45 share one GPU",
    )


class Disaggregation(_Strict):
    """Prefill replicas compute the prompt's KV and hand it to decode replicas over a KV
    connector (Ray Serve LLM's P/D pattern: the client's request goes to decode, which
    asks prefill for one token first)."""

    connector: Literal["nixl", "mooncake"] = Field(
        "nixl",
        description="vLLM's KV connector: nixl (NixlConnector, needs vLLM >= 0.34 for "
        "DSV4) or mooncake (MooncakeConnector); both carry the hybrid KV cache's groups",
    )
    prefill: Role = Role()
    decode: Role = Role()
    mtp_on: Literal["decode", "both"] = Field(
        "both",
        description="where the MTP drafter runs: both roles (the default: prefill's KV rows "
        "then carry the MTP layer's caches, as decode's do) or decode only (prefill computes "
        "no drafts; the handshake's speculative-config check is relaxed for it; the CPU "
        "backend only: NIXL on a GPU refuses KV rows that differ between the roles)",
    )
    on_transfer_failure: Literal["recompute", "fail"] = Field(
        "recompute",
        description="when decode cannot read a request's KV (prefill died or its memory "
        "went away): recompute the prompt on decode (the answer comes late, never wrong) "
        "or fail the request with an error (vLLM's kv_load_failure_policy)",
    )
    kv_buffer_device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        description="where the connector stages KV: auto is the GPU on GPU presets and "
        "host memory on the CPU backend",
    )
    role_resources: bool = Field(
        False,
        description="each role's placement bundles ask for its custom Ray resource "
        "(serving/disagg/placement.py ROLE_RESOURCES, one unit per GPU), which only that "
        "role's nodes advertise: the Helm chart's prefill and decode worker groups",
    )
