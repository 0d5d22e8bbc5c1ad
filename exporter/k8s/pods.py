"""The pods of this node, by UID, with their containers by id: what a cgroup path is joined to.

:class:`PodIndex` is written by one feeder (the API-server watch, or a simulation) and read
by the poll threads; every write replaces whole entries under a lock and bumps
``generation``, which tells the process reader that an answer "unknown" may have changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from exporter.k8s.cgroup import normalize_container_id

# Mirror pods of static pods: the UID in the cgroup path is this annotation's value.
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


@dataclass(frozen=True)
class PodMeta:
    """One pod: identity plus container id -> container name (ids without the runtime scheme)."""

    uid: str
    namespace: str
    name: str
    containers: Mapping[str, str] = field(default_factory=dict)
    container_names: tuple[str, ...] = ()  # every container of the spec, in spec order
    static_hash: str = ""  # config.hash of a mirror pod: the UID its cgroup carries

    def container_of(self, container_id: str | None) -> str:
        """The container name for an id; "" when the pod's status does not list it (yet).

        Without an id (a process directly in the pod's cgroup) a pod with a single container
        names that one.
        """
        if container_id:
            return self.containers.get(container_id, "")
        return self.container_names[0] if len(self.container_names) == 1 else ""


def pod_from_api(obj: Mapping[str, Any]) -> PodMeta | None:
    """A PodMeta from a Pod object of the Kubernetes API (as JSON); None when it lacks a UID."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return None
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers: dict[str, str] = {}
    for key in _STATUS_LISTS:
        for entry in status.get(key) or ():
            container_id = normalize_container_id(str(entry.get("containerID") or ""))
            if container_id and entry.get("name"):
                containers[container_id] = str(entry["name"])
    names = tuple(str(c.get("name")) for c in spec.get("containers") or () if c.get("name"))
    annotations = meta.get("annotations") or {}
    return PodMeta(uid=uid, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   containers=containers, container_names=names,
                   static_hash=str(annotations.get(CONFIG_HASH_ANNOTATION) or ""))


class PodIndex:
    """UID -> PodMeta for one node; thread-safe; ``generation`` counts changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodMeta] = {}
        self._uid_of: dict[str, str] = {}  # every UID a cgroup may carry -> the pod's UID
        self.generation = 0
        self.synced = False  # True once a full list has been loaded

    def get(self, uid: str) -> PodMeta | None:
        """The pod whose cgroup carries ``uid`` (its own UID or a static pod's hash)."""
        key = self._uid_of.get(uid)
        return None if key is None else self._by_uid.get(key)

    def __len__(self) -> int:
        return len(self._by_uid)

    def pods(self) -> list[PodMeta]:
        """Every pod, in UID order."""
        with self._lock:
            return [self._by_uid[uid] for uid in sorted(self._by_uid)]

    def replace_all(self, pods: Iterable[PodMeta]) -> None:
        """Load a full list (after a list call or a re-list)."""
        by_uid = {p.uid: p for p in pods}
        with self._lock:
            if by_uid != self._by_uid or not self.synced:
                self._by_uid = by_uid
                self._uid_of = self._aliases(by_uid.values())
                self.generation += 1
            self.synced = True

    def upsert(self, pod: PodMeta) -> None:
        """Add or replace one pod (a watch ADDED or MODIFIED event)."""
        with self._lock:
            if self._by_uid.get(pod.uid) == pod:
                return
            self._by_uid = {**self._by_uid, pod.uid: pod}
            self._uid_of = self._aliases(self._by_uid.values())
            self.generation += 1

    def remove(self, uid: str) -> None:
        """Forget one pod (a watch DELETED event)."""
        with self._lock:
            if uid not in self._by_uid:
                return
            self._by_uid = {k: v for k, v in self._by_uid.items() if k != uid}
            self._uid_of = self._aliases(self._by_uid.values())
            self.generation += 1

    @staticmethod
    def _aliases(pods: Iterable[PodMeta]) -> dict[str, str]:
        out: dict[str, str] = {}
        for pod in pods:
            out[pod.uid] = pod.uid
            if pod.static_hash:
                # The hash is 32 hex characters: the same shape parse_cgroup returns for it.
                out.setdefault(pod.static_hash, pod.uid)
        return out
