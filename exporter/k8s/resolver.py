"""The Kubernetes :class:`~exporter.identity.PodResolver`: pid -> cgroup -> pod, by the best source at hand.

Per process, first answer wins:

1. ``/proc/<pid>/cgroup`` gives the pod UID and container id (:mod:`exporter.k8s.cgroup`);
   a process whose cgroup names no pod is not in one (host process, plain Docker): None.
2. The API server's pods of this node (:mod:`exporter.k8s.apiserver`), joined on the UID
   and the container id: exact, and not forgeable from inside the container.
3. The kubelet's pod-resources answer (:mod:`exporter.k8s.allocations`), which names pods
   but carries no UID: the pod whose name is the process's ``HOSTNAME`` (the runtime sets it
   to the pod name), if exactly one namespace has such a pod; the container is the pod's only
   one, else its only one holding GPU devices, else the one holding the devices in the
   process's ``NVIDIA_VISIBLE_DEVICES``. A process can set its own ``HOSTNAME``, so bill with
   (2) where that matters.
4. (in :class:`~exporter.identity.Identifier`) the downward-API variables of the process.

Stateless per call: the process reader caches the answer per pid and asks again when
``generation`` moves (a pod the watch had not delivered yet may be known now).
"""

from __future__ import annotations

from typing import Iterable

from exporter.backend.procinfo import ProcFs
from exporter.identity import PodRef
from exporter.k8s.cgroup import parse_cgroup
from exporter.k8s.devices import pod_devices, split_replica
from exporter.k8s.pods import PodIndex
from exporter.snapshot import GpuInfo, PodDevice


class KubernetesResolver:
    """pid -> PodRef from the cgroup, the pod index (API server) and the kubelet's allocations."""

    def __init__(self, procfs: ProcFs, index: PodIndex | None = None, allocations=None, closers=()) -> None:
        self.procfs = procfs
        self.index = index
        self.allocations = allocations  # KubeletAllocations / StaticAllocations, or None
        self._closers = tuple(closers)
        self._devices_key: tuple | None = None
        self._devices: tuple[PodDevice, ...] = ()

    @property
    def generation(self) -> tuple[int, int]:
        """Changes whenever what the sources know changes."""
        return (self.index.generation if self.index is not None else 0,
                self.allocations.generation if self.allocations is not None else 0)

    def resolve(self, pid: int) -> PodRef | None:
        text = self.procfs.cgroup(pid)
        ref = parse_cgroup(text) if text else None
        if ref is None or ref.pod_uid is None:
            return None
        if self.index is not None:
            pod = self.index.get(ref.pod_uid)
            if pod is not None:
                return PodRef(pod.namespace, pod.name, pod.container_of(ref.container_id))
        if self.allocations is None:
            return None
        self.allocations.wake()  # a new pod: the kubelet's list may be older than it
        return self._from_allocations(pid)

    def _from_allocations(self, pid: int) -> PodRef | None:
        environ = self.procfs.environ(pid) or {}
        hostname = environ.get("HOSTNAME", "").strip()
        if not hostname:
            return None
        matches = [p for p in self.allocations.pods() if p.pod == hostname]
        if len({p.namespace for p in matches}) != 1:
            return None
        pod = matches[0]
        return PodRef(pod.namespace, pod.pod, self._container(pod, environ))

    def _container(self, pod, environ) -> str:
        if len(pod.containers) == 1:
            return pod.containers[0]
        held: dict[str, set[str]] = {}
        for alloc in self.allocations.devices():
            if alloc.namespace == pod.namespace and alloc.pod == pod.pod:
                held.setdefault(alloc.container, set()).update(split_replica(d)[0].lower() for d in alloc.device_ids)
        if len(held) == 1:
            return next(iter(held))
        visible = {v.strip().lower() for v in environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if v.strip()}
        candidates = [name for name, ids in held.items() if ids & visible]
        return candidates[0] if len(candidates) == 1 else ""

    def pod_devices(self, gpus: Iterable[GpuInfo]) -> tuple[PodDevice, ...]:
        """The kubelet's device allocations resolved to this poll's GPUs and MIG instances.

        Recomputed only when the allocations or the devices (GPUs, MIG instances) changed.
        """
        if self.allocations is None:
            return ()
        gpus = list(gpus)
        devices = self.allocations.devices()
        key = (id(devices), self.allocations.generation,
               tuple((g.index, g.uuid, tuple((i.gi, i.mig_index, i.mig_uuid) for i in g.mig_instances)) for g in gpus))
        if self._devices_key != key:
            self._devices = pod_devices(devices, gpus)
            self._devices_key = key
        return self._devices

    def close(self) -> None:
        for close in self._closers:
            close()
