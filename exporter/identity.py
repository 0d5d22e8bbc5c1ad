"""Who a GPU process is: its workload and, on Kubernetes, its namespace, pod and container.

Identity is resolved once per process (the backend caches it with the rest of a pid's /proc
metadata) and travels in the Snapshot (``ProcessInfo.workload`` / ``namespace`` / ``pod`` /
``container``), so the collectors, the forecasts and ``exporter recommend`` all see the same
answer and nothing downstream re-derives it.

The pod part is pluggable: a :class:`PodResolver` maps a pid to its pod (from the cgroup and
the kubelet or API server). Without one, the downward-API variables of the process
(``POD_NAMESPACE``, ``POD_NAME``, ``CONTAINER_NAME``) are the last fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from exporter.foresight.workload import WorkloadRule, workload_key


@dataclass(frozen=True)
class PodRef:
    """A Kubernetes container: where a process runs. Empty strings mean unknown."""

    namespace: str
    pod: str
    container: str = ""


@dataclass(frozen=True)
class ProcessIdentity:
    """Workload key (see exporter.foresight.workload) plus the pod, when the process has one."""

    workload: str
    pod: PodRef | None = None


class PodResolver(Protocol):
    """Finds the pod of a host pid; None when the process is not in a (known) pod."""

    def resolve(self, pid: int) -> PodRef | None: ...


def pod_from_environ(environ: Mapping[str, str]) -> PodRef | None:
    """The pod named by downward-API variables of the process, if both namespace and name are set."""
    namespace, pod = environ.get("POD_NAMESPACE", "").strip(), environ.get("POD_NAME", "").strip()
    if not (namespace and pod):
        return None
    return PodRef(namespace, pod, environ.get("CONTAINER_NAME", "").strip())


class Identifier:
    """Resolves :class:`ProcessIdentity` for processes; thread-safe (no mutable state of its own)."""

    def __init__(self, rules: Iterable[WorkloadRule] = (), pods: PodResolver | None = None) -> None:
        self.rules = tuple(rules)
        self.pods = pods

    def identify(self, pid: int, name: str, cmdline: str, environ: Mapping[str, str]) -> ProcessIdentity:
        """The identity of one process; never raises for a process that is gone (pod unknown)."""
        pod = self.pods.resolve(pid) if self.pods is not None else None
        if pod is None:
            pod = pod_from_environ(environ)
        return ProcessIdentity(workload_key(cmdline, name, environ, self.rules, pod=pod), pod)
