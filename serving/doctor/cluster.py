"""What every check reads, from a live cluster or a dump: the same calls, the same JSON."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from serving.doctor.k8s import Obj, utcnow
from serving.doctor.kinds import Kind


class Cluster(ABC):
    #: "cluster https://10.0.0.1:6443 (context prod)" or "dump ./support-dump"
    description: str
    #: the namespace used when -n is not given (the kubeconfig context's, or "default")
    default_namespace: str = "default"
    #: True for an API server, False for a dump (what "unavailable" means differs)
    live: bool = False

    @abstractmethod
    def version(self) -> Obj:
        """The API server's /version document (gitVersion, major, minor, platform)."""

    @abstractmethod
    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Objects of one kind (in one namespace, or all when None)."""

    @abstractmethod
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """One object, or None when it does not exist."""

    @abstractmethod
    def namespace_exists(self, namespace: str) -> bool | None:
        """None when it cannot be told (forbidden, or the dump has no Namespace objects)."""

    @abstractmethod
    def pod_log(
        self, namespace: str, pod: str, container: str, previous: bool, tail: int
    ) -> str | None:
        """The last lines of a container's log; None when they cannot be had."""

    @abstractmethod
    def can_i(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        """SelfSubjectAccessReview: may the current user do this?"""

    def now(self) -> datetime:
        """The time ages are measured against (a dump's own time, for a dump)."""
        return utcnow()
