"""A cluster read from files: `kubectl get ... -o yaml` (or -o json) output in a directory.

Accepted: single objects, multi-document YAML, `kind: List` (kubectl's) and typed lists
(`PodList` from the raw API, whose items carry no kind), `kubectl version -o yaml` or a raw
`/version` document, SelfSubjectAccessReviews with their status (what `kubectl create -o
yaml` returns) and container logs as `logs/POD/CONTAINER.log` (`.previous.log` for the
container before its last restart). A file named `dumped-at` holds the dump's time.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from serving.doctor import kinds
from serving.doctor.cluster import Cluster
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.k8s import (
    Obj,
    dig,
    matches_field_selector,
    matches_label_selector,
    timestamp,
)
from serving.doctor.kinds import Kind
from serving.doctor.progress import Progress

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~8x faster
SUFFIXES = {".yaml", ".yml", ".json"}
BIG_FILE = 20_000_000
BY_PLURAL = {k.plural: k.kind for k in kinds.READABLE}


def _collect_command(kind: Kind) -> str:
    scope = "-n NAMESPACE " if kind.namespaced else ""
    return f"kubectl get {kind.resource} {scope}-o yaml > DIR/{kind.plural}.yaml"


class DumpCluster(Cluster):
    def __init__(self, root: Path, progress: Progress, default_namespace: str = "default"):
        self.root = root
        self.description = f"dump {root}"
        self.default_namespace = default_namespace
        self._objects: dict[str, dict[tuple[str | None, str], Obj]] = {}
        self._collected: set[str] = set()
        self._version: Obj | None = None
        self._logs: dict[tuple[str, str, bool], str] = {}
        self._dumped_at: datetime | None = None
        self._read(progress)

    # -- reading
    def _read(self, progress: Progress) -> None:
        if not self.root.exists():
            raise DoctorError(f"--from-dump {self.root}: no such file or directory")
        files = [self.root] if self.root.is_file() else sorted(self.root.rglob("*"))
        data_files = [f for f in files if f.is_file() and f.suffix in SUFFIXES]
        for index, path in enumerate(data_files, 1):
            size = path.stat().st_size
            if size > BIG_FILE:  # a big cluster's pods or events: worth a line in any log
                progress.note(f"reading {path.name} ({size / 1e6:.0f} MB)…")
            else:
                progress.step(f"reading dump: {index}/{len(data_files)} files ({path.name})")
            self._read_file(path)
        for path in files:
            if path.is_file() and path.suffix == ".log":
                self._read_log(path)
            elif path.is_file() and path.name == "dumped-at":
                self._dumped_at = timestamp(path.read_text().strip())
        if not self._objects and self._version is None:
            raise DoctorError(
                f"malformed dump: {self.root} holds no Kubernetes objects "
                "(expected `kubectl get ... -o yaml` output in .yaml/.yml/.json files)"
            )

    def _read_file(self, path: Path) -> None:
        try:
            if path.suffix == ".json":  # json is much faster than YAML on big dumps
                text = path.read_text()
                documents = [json.loads(text)] if text.strip() else []
            else:
                with path.open("rb") as handle:
                    documents = list(yaml.load_all(handle, Loader=_Loader))
        except json.JSONDecodeError as exc:
            raise DoctorError(f"malformed dump: {path} line {exc.lineno}: {exc.msg}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise DoctorError(f"malformed dump: {path}{where}: {problem}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise DoctorError(f"malformed dump: {path}: {exc}") from None
        for number, doc in enumerate(documents, 1):
            if doc is None:
                continue
            where = f"{path} (document {number})" if len(documents) > 1 else str(path)
            if not isinstance(doc, dict):
                raise DoctorError(
                    f"malformed dump: {where} is a {type(doc).__name__}, not a Kubernetes "
                    "object (is it `kubectl get -o yaml` output?)"
                )
            self._add_document(doc, where, path)

    def _add_document(self, doc: Obj, where: str, path: Path) -> None:
        if "serverVersion" in doc or ("gitVersion" in doc and "major" in doc):
            self._version = doc.get("serverVersion") or doc
            return
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            raise DoctorError(
                f"malformed dump: {where} has no `kind` (is it `kubectl get -o yaml` output?)"
            )
        if "items" in doc and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise DoctorError(f"malformed dump: {where}: `items` is not a list")
            item_kind = kind[: -len("List")] or None  # PodList -> Pod; List -> per item
            stem = re.split(r"[-_.]", path.stem)[0]  # deployments-0.yaml -> deployments
            if not items and item_kind is None and stem in BY_PLURAL:
                self._collected.add(BY_PLURAL[stem])  # `kubectl get jobs -o yaml` found none
            if item_kind:
                self._collected.add(item_kind)
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    raise DoctorError(f"malformed dump: {where}: item {index} is not an object")
                if item_kind and "kind" not in item:
                    item = {"kind": item_kind, "apiVersion": doc.get("apiVersion"), **item}
                self._add_object(item, f"{where} item {index}")
            return
        self._add_object(doc, where)

    def _add_object(self, obj: Obj, where: str) -> None:
        kind = obj.get("kind")
        obj_name = dig(obj, "metadata", "name")
        if not isinstance(kind, str) or not kind:
            raise DoctorError(f"malformed dump: {where} has no `kind`")
        if kind == kinds.ACCESS_REVIEW.kind:
            obj_name = obj_name or str(len(self._objects.get(kind, {})))
        elif not isinstance(obj_name, str) or not obj_name:
            raise DoctorError(f"malformed dump: {where}: {kind} without metadata.name")
        self._collected.add(kind)
        key = (dig(obj, "metadata", "namespace"), obj_name)
        self._objects.setdefault(kind, {})[key] = obj  # a later copy replaces an earlier one

    def _read_log(self, path: Path) -> None:
        # logs/POD/CONTAINER.log, logs/POD/CONTAINER.previous.log or logs/POD.log
        stem = path.name[: -len(".log")]
        previous = stem.endswith(".previous")
        stem = stem.removesuffix(".previous")
        if path.parent.name != "logs" and path.parent != self.root:
            pod, container = path.parent.name, stem
        else:
            pod, container = stem, ""
        self._logs[(pod, container, previous)] = path.read_text(errors="replace")

    # -- the Cluster interface
    def _require(self, kind: Kind) -> dict[tuple[str | None, str], Obj]:
        if kind.kind not in self._collected:
            if kind in (kinds.EVENT, kinds.RESOURCE_QUOTA):
                return {}  # often legitimately none: absence is not worth a warning
            if kind is kinds.ACCESS_REVIEW:
                raise Unavailable(
                    "the dump holds no access reviews (RBAC is asked of the API server)",
                    "collect the dump with `dsv4-serve doctor dump-script`, which asks them",
                )
            raise Unavailable(
                f"the dump holds no {kind.kind} objects", f"add them: {_collect_command(kind)}"
            )
        return self._objects.get(kind.kind, {})

    def version(self) -> Obj:
        if self._version is None:
            raise Unavailable(
                "the dump holds no server version",
                "add it: kubectl version -o yaml > DIR/version.yaml",
            )
        return self._version

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return [
            obj
            for (ns, _), obj in self._require(kind).items()
            if (namespace is None or ns == namespace)
            and matches_label_selector(obj, label_selector)
            and matches_field_selector(obj, field_selector)
        ]

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        return self._require(kind).get((namespace if kind.namespaced else None, name))

    def namespace_exists(self, namespace: str) -> bool | None:
        if kinds.NAMESPACE.kind in self._collected:
            return (None, namespace) in self._objects.get(kinds.NAMESPACE.kind, {})
        return None

    def pod_log(
        self, namespace: str, pod: str, container: str, previous: bool, tail: int
    ) -> str | None:
        text = self._logs.get((pod, container, previous))
        if text is None and not previous:
            text = self._logs.get((pod, "", False))
        if text is None:
            return None
        return "\n".join(text.rstrip("\n").splitlines()[-tail:])

    def can_i(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        reviews = self._require(kinds.ACCESS_REVIEW).values()
        for review in reviews:
            attrs = dig(review, "spec", "resourceAttributes", default={})
            if (
                attrs.get("verb") == verb
                and (attrs.get("group") or "") == group
                and attrs.get("resource") == resource
                and (attrs.get("namespace") or "") in ("", namespace)
            ):
                return bool(dig(review, "status", "allowed"))
        raise Unavailable(
            f"the dump holds no access review for {verb} {resource} in {namespace}",
            "collect the dump with `dsv4-serve doctor dump-script -n NAMESPACE`",
        )

    def now(self) -> datetime:
        """The dump's own time: its `dumped-at` file, else the newest time inside it."""
        if self._dumped_at:
            return self._dumped_at
        newest: datetime | None = None
        for objects in self._objects.values():
            for obj in objects.values():
                for when in _times(obj):
                    if newest is None or when > newest:
                        newest = when
        return newest or super().now()


def _times(obj: Any) -> list[datetime]:
    found = []
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and (
                    key.endswith(("Time", "Timestamp")) or key in ("startedAt", "finishedAt")
                ):
                    when = timestamp(value)
                    if when:
                        found.append(when)
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found
