"""This node's pods from the Kubernetes API server: list, then watch, with the service account.

One daemon thread keeps a :class:`~exporter.k8s.pods.PodIndex` current:

1. ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` (paged with ``limit``/``continue``)
   replaces the index;
2. ``GET ...&watch=1&resourceVersion=<rv>&allowWatchBookmarks=true&timeoutSeconds=300``
   streams ADDED / MODIFIED / DELETED / BOOKMARK events, one JSON object per line;
3. a watch that ends is resumed from the last resourceVersion; ``410 Gone`` (the version
   was compacted away) means list again; any other failure waits (1 s doubling to 60 s)
   and lists again.

Only the node's pods are asked for, so the index holds at most the node's ~110 pods. The
service-account token is read again on every connection: bound tokens are rotated by the
kubelet (about hourly) and a token read once would expire. RBAC needed: ``get``, ``list``,
``watch`` on ``pods`` (deploy/kubernetes/rbac.yaml). Standard library only (http.client, ssl).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import threading
import urllib.parse
from typing import Any, Iterator

from exporter.k8s.pods import PodIndex, pod_from_api

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
WATCH_SECONDS = 300  # the server ends each watch after this; we resume it
READ_TIMEOUT_SECONDS = WATCH_SECONDS + 30  # a silent connection longer than this is dead
PAGE_SIZE = 500
MAX_BACKOFF_SECONDS = 60.0


class ApiError(Exception):
    """A request failed; ``status`` is the HTTP status (0 for a connection failure)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def in_cluster_url(environ=os.environ) -> str | None:
    """https://<KUBERNETES_SERVICE_HOST>:<PORT> inside a pod, else None."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


class ApiServerPods:
    """Feeds ``index`` with the pods of ``node_name`` from the API server at ``url``."""

    def __init__(self, index: PodIndex, node_name: str, url: str,
                 token_file: str | None = os.path.join(SERVICE_ACCOUNT_DIR, "token"),
                 ca_file: str | None = os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt")) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"expected an http(s) URL of the API server, got {url!r}")
        self.index = index
        self.node_name = node_name
        self.url = url
        self._parsed = parsed
        self._token_file = token_file
        self._ca_file = ca_file
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="gpushare-pod-watch", daemon=True)
        self.last_error: str | None = None
        self.resource_version = ""

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ApiServerPods:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread, interrupting a watch in progress."""
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                self.list_pods()
                backoff = 1.0
                while not self._stop.is_set():
                    self.watch_once()  # returns when the server ends the watch; 410 raises
                    self._stop.wait(0.05)  # a server that ends every watch at once is not spun on
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any bad answer
                if self._stop.is_set():
                    return
                if isinstance(exc, ApiError) and exc.status == 410:
                    continue  # resourceVersion too old: list again at once
                self._failed(str(exc) if isinstance(exc, ApiError) else f"unexpected {type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(MAX_BACKOFF_SECONDS, backoff * 2)

    def _failed(self, reason: str) -> None:
        if reason != self.last_error:
            hint = ""
            if "401" in reason or "403" in reason:
                hint = " (the service account needs get/list/watch on pods: deploy/kubernetes/rbac.yaml)"
            log.warning("kubernetes API: %s%s; pod names come from the kubelet or the environment meanwhile",
                        reason, hint)
        self.last_error = reason

    # -- requests -----------------------------------------------------------------------

    def list_pods(self) -> None:
        """One full (paged) list into the index."""
        pods, token = [], ""
        while True:
            query = {"fieldSelector": f"spec.nodeName={self.node_name}", "limit": str(PAGE_SIZE)}
            if token:
                query["continue"] = token
            body = self._get_json(query)
            for item in body.get("items") or ():
                pod = pod_from_api(item)
                if pod is not None:
                    pods.append(pod)
            meta = body.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                self.resource_version = str(meta.get("resourceVersion") or "")
                break
        self.index.replace_all(pods)
        if self.last_error is not None:
            log.info("kubernetes API: listing pods of node %s works again (%d pods)", self.node_name, len(pods))
            self.last_error = None

    def watch_once(self) -> None:
        """Follow one watch until the server ends it; raises ApiError(410) when a re-list is needed."""
        query = {"fieldSelector": f"spec.nodeName={self.node_name}", "watch": "1",
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS),
                 "resourceVersion": self.resource_version}
        for event in self._stream(query):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError(code, f"watch error {code}: {obj.get('message', '')}")
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if kind in ("ADDED", "MODIFIED"):
                pod = pod_from_api(obj)
                if pod is not None:
                    self.index.upsert(pod)
            elif kind == "DELETED":
                uid = (obj.get("metadata") or {}).get("uid")
                if uid:
                    self.index.remove(str(uid))

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self._parsed.hostname, self._parsed.port
        if self._parsed.scheme == "http":
            return http.client.HTTPConnection(host, port, timeout=READ_TIMEOUT_SECONDS)
        context = ssl.create_default_context(cafile=self._ca_file if self._ca_file and
                                             os.path.exists(self._ca_file) else None)
        return http.client.HTTPSConnection(host, port, timeout=READ_TIMEOUT_SECONDS, context=context)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "gpushare-exporter"}
        if self._token_file:
            try:
                with open(self._token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError:
                token = ""
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    def _request(self, query: dict[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        path = (self._parsed.path.rstrip("/") + "/api/v1/pods?" + urllib.parse.urlencode(query))
        conn = self._connect()
        self._conn = conn
        try:
            conn.request("GET", path, headers=self._headers())
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiError(0, f"{self.url}: {type(exc).__name__}: {exc}") from None
        if response.status != 200:
            detail = response.read(2000).decode("utf-8", "replace")
            conn.close()
            try:
                detail = json.loads(detail).get("message", detail)
            except (ValueError, AttributeError):
                pass
            raise ApiError(response.status, f"{self.url}: HTTP {response.status}: {' '.join(str(detail).split())}")
        return conn, response

    def _get_json(self, query: dict[str, str]) -> dict[str, Any]:
        conn, response = self._request(query)
        try:
            return json.loads(response.read())
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ApiError(0, f"{self.url}: bad pod list: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()

    def _stream(self, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        conn, response = self._request(query)
        try:
            while not self._stop.is_set():
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise ApiError(0, f"{self.url}: watch interrupted: {type(exc).__name__}: {exc}") from None
                if not line:
                    return  # the server ended the watch (timeoutSeconds)
                if line.strip():
                    try:
                        yield json.loads(line)
                    except ValueError:
                        raise ApiError(0, f"{self.url}: watch sent a line that is not JSON") from None
        finally:
            conn.close()
