"""The live cluster through the official `kubernetes` client.

Every read asks for the raw response (`_preload_content=False`) and parses its JSON, so the
checks see exactly what the API server sent, the same objects `kubectl get -o yaml` writes
into a dump. Client failures become one-line `DoctorError`s (or `Unavailable` for a
forbidden read, which only costs the check that needed it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from serving.doctor import kinds
from serving.doctor.cluster import Cluster
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.k8s import Obj
from serving.doctor.kinds import Kind
from serving.doctor.progress import Progress

PAGE = 500  # list page size: big clusters stream in pages, with progress


def _status_message(exc: ApiException) -> str:
    """The API server's own sentence from a Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason or "error")


def _network_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    for known in ("Connection refused", "timed out", "Name or service not known", "certificate"):
        if known.lower() in text.lower():
            return {"certificate": "TLS certificate problem"}.get(known, known.lower())
    return text.split(": ", 1)[-1] if ": " in text else text


def load_client(kubeconfig: str | None, context: str | None) -> tuple[client.ApiClient, str, str]:
    """An ApiClient from kubeconfig (or in-cluster), its description and default namespace."""
    configuration = client.Configuration()
    # Connection refused or a dead address should fail in seconds, not after many retries.
    configuration.retries = 1
    path = kubeconfig or os.environ.get("KUBECONFIG")
    default_path = Path("~/.kube/config").expanduser()
    namespace = "default"
    if path is None and not default_path.exists():
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException as exc:
                raise DoctorError(f"in-cluster config unusable: {exc}") from None
            ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            if ns_file.exists():
                namespace = ns_file.read_text().strip() or namespace
            return client.ApiClient(configuration), f"in-cluster {configuration.host}", namespace
        raise DoctorError(
            f"no kubeconfig: {default_path} does not exist and KUBECONFIG is not set "
            "(pass --kubeconfig FILE, run inside a pod, or use --from-dump DIR)"
        )
    path = path or str(default_path)
    existing = [p for p in path.split(os.pathsep) if p and Path(p).expanduser().exists()]
    if not existing:
        raise DoctorError(f"kubeconfig {path} does not exist (pass --kubeconfig FILE)")
    try:
        contexts, current = config.list_kube_config_contexts(path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        if context and chosen is None:
            names = ", ".join(c["name"] for c in contexts) or "none"
            raise DoctorError(f"kubeconfig {path} has no context {context!r} (it has: {names})")
        config.load_kube_config(
            path, context=context, client_configuration=configuration, persist_config=False
        )
    except DoctorError:
        raise
    except Exception as exc:  # the loader raises many types for a garbled file
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DoctorError(f"kubeconfig {path} cannot be used: {detail}") from None
    namespace = (chosen or {}).get("context", {}).get("namespace") or namespace
    label = f"cluster {configuration.host} (context {(chosen or {}).get('name', '?')})"
    return client.ApiClient(configuration), label, namespace


class LiveCluster(Cluster):
    live = True

    def __init__(
        self,
        api: client.ApiClient,
        description: str,
        default_namespace: str,
        progress: Progress,
        timeout: float = 10.0,
    ) -> None:
        self.api = api
        self.server = api.configuration.host
        self.description = description
        self.default_namespace = default_namespace
        self.progress = progress
        self.timeout = (timeout, max(timeout, 60.0))
        self.core = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.auth = client.AuthorizationV1Api(api)
        self.versions = client.VersionApi(api)

    # -- one place turns the client's failures into the doctor's
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            message = _status_message(exc)
            if exc.status == 401:
                raise DoctorError(
                    f"the API server at {self.server} rejected the credentials (401 "
                    f"Unauthorized): the token is expired or invalid; log in again "
                    f"(e.g. your cloud's get-credentials command) and retry"
                ) from None
            if exc.status == 403:
                raise Unavailable(
                    f"cannot read {what}: {message}",
                    "ask your cluster admin for read access, or run the doctor with a "
                    "kubeconfig that has it",
                ) from None
            if exc.status == 404:
                raise LookupError(message) from None
            raise DoctorError(
                f"the API server at {self.server} answered {exc.status} ({message}) "
                f"while reading {what}"
            ) from None
        except urllib3.exceptions.HTTPError as exc:
            raise DoctorError(
                f"cannot reach the API server at {self.server}: {_network_reason(exc)} "
                "(is the cluster up, the VPN on, the kubeconfig context right?)"
            ) from None
        try:
            return json.loads(response.data) if response.data else {}
        except ValueError:
            raise DoctorError(
                f"the API server at {self.server} sent something that is not JSON for {what} "
                "(is this a Kubernetes API server?)"
            ) from None

    def version(self) -> Obj:
        return self._call("the server version", self.versions.get_code)

    def _lister(self, kind: Kind, namespace: str | None) -> tuple[Callable[..., Any], tuple]:
        if kind.group in ("ray.io",):
            if namespace is None:
                return self.custom.list_cluster_custom_object, (
                    kind.group,
                    kind.version,
                    kind.plural,
                )
            return self.custom.list_namespaced_custom_object, (
                kind.group,
                kind.version,
                namespace,
                kind.plural,
            )
        table: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {
            "Node": (self.core.list_node, None),
            "Namespace": (self.core.list_namespace, None),
            "Pod": (self.core.list_pod_for_all_namespaces, self.core.list_namespaced_pod),
            "Event": (self.core.list_event_for_all_namespaces, self.core.list_namespaced_event),
            "PersistentVolumeClaim": (
                self.core.list_persistent_volume_claim_for_all_namespaces,
                self.core.list_namespaced_persistent_volume_claim,
            ),
            "ResourceQuota": (
                self.core.list_resource_quota_for_all_namespaces,
                self.core.list_namespaced_resource_quota,
            ),
            "StorageClass": (self.storage.list_storage_class, None),
            "CustomResourceDefinition": (self.extensions.list_custom_resource_definition, None),
            "Deployment": (
                self.apps.list_deployment_for_all_namespaces,
                self.apps.list_namespaced_deployment,
            ),
            "Job": (self.batch.list_job_for_all_namespaces, self.batch.list_namespaced_job),
        }
        everywhere, in_namespace = table[kind.kind]
        if namespace is not None and in_namespace is not None:
            return in_namespace, (namespace,)
        return everywhere, ()

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        fn, args = self._lister(kind, namespace)
        what = kind.resource + (f" in {namespace}" if namespace else "")
        items: list[Obj] = []
        token: str | None = None
        pages = 0
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE}
            if token:
                kwargs["_continue"] = token
            if label_selector:
                kwargs["label_selector"] = label_selector
            if field_selector:
                kwargs["field_selector"] = field_selector
            try:
                page = self._call(what, fn, *args, **kwargs)
            except LookupError:
                return []  # a custom resource whose CRD is not installed: none exist
            pages += 1
            for item in page.get("items") or []:
                # Lists leave kind/apiVersion off their items; a dump's List keeps them.
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            self.progress.page(what, len(items), pages)
            if not token:
                return items

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        readers: dict[str, Callable[..., Any]] = {
            "CustomResourceDefinition": self.extensions.read_custom_resource_definition,
            "Namespace": self.core.read_namespace,
            "PersistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim,
            "StorageClass": self.storage.read_storage_class,
            "Node": self.core.read_node,
            "Job": self.batch.read_namespaced_job,
        }
        if kind.group == "ray.io":
            fn: Callable[..., Any] = self.custom.get_namespaced_custom_object
            args: tuple = (kind.group, kind.version, namespace, kind.plural, name)
        else:
            fn = readers[kind.kind]
            args = (name, namespace) if kind.namespaced else (name,)
        try:
            obj = self._call(f"{kind.resource} {name}", fn, *args)
        except LookupError:
            return None
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        return obj

    def namespace_exists(self, namespace: str) -> bool | None:
        try:
            return self.get(kinds.NAMESPACE, namespace) is not None
        except Unavailable:
            return None

    def pod_log(
        self, namespace: str, pod: str, container: str, previous: bool, tail: int
    ) -> str | None:
        try:
            response = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                previous=previous,
                tail_lines=tail,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except (ApiException, urllib3.exceptions.HTTPError):
            return None  # logs are a bonus: a gone container or no rights is not fatal
        return response.data.decode("utf-8", "replace")

    def can_i(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        review = client.V1SelfSubjectAccessReview(
            api_version="authorization.k8s.io/v1",
            kind="SelfSubjectAccessReview",
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, group=group, resource=resource
                )
            ),
        )
        answer = self._call(
            "selfsubjectaccessreviews", self.auth.create_self_subject_access_review, review
        )
        return bool((answer.get("status") or {}).get("allowed"))
