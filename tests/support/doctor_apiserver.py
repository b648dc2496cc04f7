"""A small Kubernetes API server on 127.0.0.1 for the doctor's live path.

It answers the REST paths the official `kubernetes` client calls (lists with
labelSelector / fieldSelector / limit / continue, reads, pod logs, /version,
SelfSubjectAccessReview) with the JSON shapes the real API server uses, including its
`Status` bodies for 401 / 403 / 404. The client under test is the real one, speaking HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]
TOKEN = "doctor-test-token"


def status_body(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _labels_match(obj: Obj, selector: str) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if have.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if have.get(key) != value:
                return False
        elif term not in have:
            return False
    return True


def _fields_match(obj: Obj, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        have: Any = obj
        for key in path.split("."):
            have = have.get(key) if isinstance(have, dict) else None
        if (str(have or "") == value) == negate:
            return False
    return True


class FakeApiServer:
    def __init__(
        self,
        objects: list[Obj],
        version: Obj | None = None,
        logs: dict[tuple[str, str, bool], str] | None = None,
        forbidden: set[str] | None = None,
        page_limit: int | None = None,
    ) -> None:
        self.version = version or {"major": "1", "minor": "30", "gitVersion": "v1.30.4"}
        self.logs = logs or {}
        self.forbidden = forbidden or set()  # plurals the user may not read
        self.page_limit = page_limit  # the server's own cap on a page (as etcd paging)
        self.requests: list[str] = []
        self.store: dict[str, list[Obj]] = {}
        self.reviews: list[Obj] = []
        for obj in objects:
            if obj["kind"] == "SelfSubjectAccessReview":
                self.reviews.append(obj)
                continue
            self.store.setdefault(_plural(obj["kind"]), []).append(obj)

    # -- routing
    def handle(
        self, method: str, raw_path: str, headers: Any, body: bytes
    ) -> tuple[int, str, bytes]:
        url = urlparse(raw_path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append(f"{method} {url.path}")
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._json(401, status_body(401, "Unauthorized", "Unauthorized"))
        parts = [p for p in url.path.split("/") if p]
        if parts == ["version"]:
            return self._json(200, self.version)
        if parts[:1] == ["api"]:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[3:]
        else:
            return self._json(
                404,
                status_body(404, "NotFound", "the server could not find the requested resource"),
            )
        if method == "POST" and rest == ["selfsubjectaccessreviews"]:
            return self._review(json.loads(body))
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif rest[:1] == ["namespaces"] and len(rest) == 2:
            rest = ["namespaces", rest[1]]
        plural = rest[0] if rest else ""
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if plural in self.forbidden:
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            verb = "list" if name is None else "get"
            return self._json(
                403,
                status_body(
                    403,
                    "Forbidden",
                    f'{plural}{"." + group if group else ""} is forbidden: User "alice" cannot '
                    f'{verb} resource "{plural}" in API group "{group}" {scope}',
                    {"kind": plural},
                ),
            )
        if group and plural and plural not in self.store and group == "ray.io":
            return self._json(
                404,
                status_body(404, "NotFound", "the server could not find the requested resource"),
            )
        items = [
            o
            for o in self.store.get(plural, [])
            if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace
        ]
        if name is not None:
            found = [o for o in items if o["metadata"]["name"] == name]
            if sub == "log":
                key = (name, query.get("container", ""), query.get("previous") == "true")
                if key not in self.logs:
                    return self._json(
                        400,
                        status_body(
                            400,
                            "BadRequest",
                            f'previous terminated container "{key[1]}" in pod "{name}" not found',
                        ),
                    )
                lines = self.logs[key].splitlines()[-int(query.get("tailLines", "100000")) :]
                return 200, "text/plain", ("\n".join(lines) + "\n").encode()
            if not found:
                resource = f"{plural}.{group}" if group else plural
                return self._json(
                    404,
                    status_body(
                        404,
                        "NotFound",
                        f'{resource} "{name}" not found',
                        {"name": name, "kind": plural},
                    ),
                )
            return self._json(200, found[0])
        items = [o for o in items if _labels_match(o, query.get("labelSelector", ""))]
        items = [o for o in items if _fields_match(o, query.get("fieldSelector", ""))]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        if self.page_limit:
            limit = min(limit, self.page_limit)
        page = items[start : start + limit]
        meta: Obj = {"resourceVersion": "123456"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
        kind = (items[0]["kind"] if items else plural.capitalize()) + "List"
        api_version = f"{group}/{parts[2]}" if group else "v1"
        # Real lists leave kind/apiVersion off their items.
        stripped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in page]
        return self._json(
            200, {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": stripped}
        )

    def _review(self, review: Obj) -> tuple[int, str, bytes]:
        attrs = review.get("spec", {}).get("resourceAttributes", {})
        allowed = False
        for known in self.reviews:
            have = known["spec"]["resourceAttributes"]
            if all(
                have.get(k, "") == attrs.get(k, "")
                for k in ("verb", "group", "resource", "namespace")
            ):
                allowed = known["status"]["allowed"]
        review = {**review, "metadata": {"creationTimestamp": None}, "status": {"allowed": allowed}}
        return self._json(201, review)

    @staticmethod
    def _json(code: int, body: Obj) -> tuple[int, str, bytes]:
        return code, "application/json", json.dumps(body).encode()


def _plural(kind: str) -> str:
    special = {"StorageClass": "storageclasses", "NetworkPolicy": "networkpolicies"}
    return special.get(kind, kind.lower() + ("es" if kind.endswith("s") else "s"))


@contextmanager
def serving(api: FakeApiServer) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def _do(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            code, ctype, payload = api.handle(method, self.path, self.headers, body)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802
            self._do("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._do("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(path: Path, server: str, token: str = TOKEN, namespace: str = "dsv4") -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": server}}],
                "users": [{"name": "alice", "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "test",
                        "context": {"cluster": "test", "user": "alice", "namespace": namespace},
                    }
                ],
                "current-context": "test",
            }
        )
    )
    return path
