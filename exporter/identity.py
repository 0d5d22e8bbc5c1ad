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
from typing import Hashable, Iterable, Mapping, Protocol

from exporter.foresight.workload import WorkloadRule, workload_key
from exporter.snapshot import GpuInfo, PodDevice


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
    """Finds the pod of a host pid; None when the process is not in a (known) pod.

    Optional extras a resolver may have (exporter.k8s.resolver.KubernetesResolver has both):
    ``generation``, a value that changes whenever an earlier "unknown" may have become known
    (the process reader then asks again for pids it could not place), and
    ``pod_devices(gpus)``, the devices the kubelet allocated to each container.
    """

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

    def generation(self) -> Hashable:
        """Changes when the pod resolver learned something (see PodResolver); constant without one."""
        return getattr(self.pods, "generation", None)

    def pod_devices(self, gpus: Iterable[GpuInfo]) -> tuple[PodDevice, ...]:
        """Devices allocated to Kubernetes containers on these GPUs; () without a resolver that knows."""
        devices = getattr(self.pods, "pod_devices", None)
        return devices(gpus) if devices is not None else ()

    def identify(self, pid: int, name: str, cmdline: str, environ: Mapping[str, str]) -> ProcessIdentity:
        """The identity of one process; never raises for a process that is gone (pod unknown)."""
        pod = self.pods.resolve(pid) if self.pods is not None else None
        if pod is None:
            pod = pod_from_environ(environ)
        return ProcessIdentity(workload_key(cmdline, name, environ, self.rules, pod=pod), pod)
