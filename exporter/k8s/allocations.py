"""What the kubelet allocated to whom: the pod-resources ``List`` answer, kept fresh in the background.

The poll threads never call the kubelet: a daemon thread asks every ``interval`` seconds
(and soon after :meth:`KubeletAllocations.wake`, when a process of an unknown pod shows up),
and readers take the latest answer. A kubelet that is down or slow delays nothing but this
thread; the previous answer is kept, and the failure is logged once per distinct reason.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

# The kubelet's pod-resources socket. Here, not in podresources.py, so that looking for it
# (``--pod-resources-socket auto``) needs no gRPC: the [k8s] extra is only needed to read it.
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

log = logging.getLogger(__name__)

REFRESH_SECONDS = 10.0
MIN_REFRESH_SECONDS = 1.0  # wake() never makes it ask more often than this


@dataclass(frozen=True)
class ContainerDevices:
    """Devices of one extended resource, or of one DRA claim, allocated to one container.

    For a device plugin, ``resource`` is the extended resource (``nvidia.com/gpu``) and
    ``device_ids`` the plugin's ids. For Dynamic Resource Allocation, ``resource`` is the DRA
    driver (``gpu.nvidia.com``), ``device_ids`` the driver's device names (``gpu-0``,
    ``gpu-0-mig-1g10gb-19-0``) and ``claim`` the ResourceClaim as ``namespace/name``.
    """

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    claim: str = ""  # "" for device-plugin allocations


@dataclass(frozen=True)
class PodContainers:
    """One pod in a List answer: its containers, with or without devices."""

    namespace: str
    pod: str
    containers: tuple[str, ...]


class StaticAllocations:
    """A fixed answer (simulation, tests) with the interface of :class:`KubeletAllocations`."""

    generation = 1

    def __init__(self, pods: list[PodContainers], devices: list[ContainerDevices]) -> None:
        self._pods, self._devices = list(pods), list(devices)

    def pods(self) -> list[PodContainers]:
        return self._pods

    def devices(self) -> list[ContainerDevices]:
        return self._devices

    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass


class AllocationsError(Exception):
    """The kubelet's answer could not be read (raised by the client, exporter.k8s.podresources)."""


class KubeletAllocations:
    """The latest pod-resources List answer from ``socket_path``, asked through ``client``
    (exporter.k8s.podresources.Client: the [k8s] extra, grpcio). The client is given, not
    imported here: podresources builds on this module's types, and imports go one way."""

    def __init__(self, socket_path: str, interval: float = REFRESH_SECONDS, *, client) -> None:
        self.socket_path = socket_path
        self.interval = interval
        self._client = client
        self._pods: list[PodContainers] = []
        self._devices: list[ContainerDevices] = []
        self.generation = 0
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpushare-pod-resources", daemon=True)

    def start(self) -> KubeletAllocations:
        self._thread.start()
        return self

    def pods(self) -> list[PodContainers]:
        return self._pods

    def devices(self) -> list[ContainerDevices]:
        return self._devices

    def wake(self) -> None:
        """Ask again soon (at most once per MIN_REFRESH_SECONDS)."""
        self._wake.set()

    def refresh(self) -> bool:
        """Ask the kubelet once; True when the answer was read."""
        if not os.path.exists(self.socket_path):
            self._failed(f"{self.socket_path}: no such socket (is the kubelet's pod-resources directory mounted?)")
            return False
        try:
            pods, devices = self._client.list()
        except AllocationsError as exc:
            self._failed(str(exc))
            return False
        if self.last_error is not None:
            log.info("pod-resources: %s answers again", self.socket_path)
            self.last_error = None
        if pods != self._pods or devices != self._devices:
            self._pods, self._devices = pods, devices  # whole lists swapped: readers see one or the other
            self.generation += 1
        return True

    def _failed(self, reason: str) -> None:
        if reason != self.last_error:
            log.warning("pod-resources: %s; device allocations are not known until it answers", reason)
        self.last_error = reason

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._wake.wait(self.interval)
            if self._wake.is_set():
                self._wake.clear()
                self._stop.wait(MIN_REFRESH_SECONDS)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        self._client.close()
