"""Device ids as the kubelet reports them (pod-resources) -> this host's GPUs and MIG instances.

Shapes (NVIDIA k8s-device-plugin and GKE's plugin):

- ``GPU-<uuid>``: a whole GPU (``--device-id-strategy=uuid``, the default);
- ``MIG-<uuid>``: a MIG instance; ``MIG-GPU-<uuid>/<gi>/<ci>``: the same in the pre-R470 form;
- ``<id>::<n>``: replica ``n`` of a shared device (time-slicing or MPS ``replicas``);
- ``<n>``: GPU index ``n`` (``--device-id-strategy=index``); ``<n>:<m>``: MIG device ``m`` of GPU ``n``;
- ``nvidia<n>``, ``nvidia<n>/vgpu<m>``, ``nvidia<n>/gi<g>[/vgpu<m>]``: GKE.
- DRA device names of NVIDIA's GPU driver (``gpu.nvidia.com``, k8s-dra-driver-gpu): ``gpu-<n>`` for
  a whole GPU, and for a MIG instance on GPU ``n``, by driver release,
  ``gpu-<n>-mig-<profile id>-<placement start>-<placement size>`` (first releases),
  ``gpu-<n>-mig-<profile>-<start>[-<end>]`` (partitionable devices) and
  ``gpu-<n>-mig-<profile>-<profile id>-<start>`` (current), ``<profile>`` being the profile name
  without dots and with ``+`` as ``-`` (``1g10gb``, ``1g10gb-me``). The driver numbers GPUs by
  minor number (``/dev/nvidia<n>``), which is the NVML index on every node whose GPUs were
  enumerated in PCI order (the default); a node where they differ maps ``gpu-<n>`` by index.

An id that names nothing on this host (a stale allocation, an unknown shape) is dropped.
"""

from __future__ import annotations

import re
from typing import Iterable

from exporter.k8s.allocations import ContainerDevices
from exporter.snapshot import GpuInfo, PodDevice

_GKE = re.compile(r"^nvidia(?P<gpu>\d+)(?:/gi(?P<gi>\d+))?(?:/vgpu\d+)?$")
_INDEX = re.compile(r"^(?P<gpu>\d+)(?::(?P<mig>\d+))?$")
_LEGACY_MIG = re.compile(r"^MIG-(?P<gpu>GPU-[0-9a-fA-F-]+)/(?P<gi>\d+)/(?P<ci>\d+)$")


def split_replica(device_id: str) -> tuple[str, int | None]:
    """``GPU-x::2`` -> (``GPU-x``, 2); an id without a replica suffix -> (id, None)."""
    base, sep, replica = device_id.rpartition("::")
    if sep and replica.isdigit():
        return base, int(replica)
    return device_id, None


def dra_profile_name(profile: str) -> str:
    """A MIG profile as DRA device names spell it: no dots, lowercase, other characters as '-'."""
    name = re.sub(r"[^a-z0-9-]", "-", profile.replace(".", "").lower())
    return name.strip("-")


def dra_mig_names(gpu: int, profile: str, profile_id: int, start: int, size: int) -> tuple[str, ...]:
    """Every name NVIDIA's DRA driver releases give one MIG instance (see the module docstring)."""
    pname = dra_profile_name(profile)
    span = f"{start}" if size <= 1 else f"{start}-{start + size - 1}"
    return (f"gpu-{gpu}-mig-{profile_id}-{start}-{size}", f"gpu-{gpu}-mig-{pname}-{span}",
            f"gpu-{gpu}-mig-{pname}-{profile_id}-{start}")


class DeviceMap:
    """Lookups from the forms above to (GPU index, GPU uuid, GI or None), for one poll's GPUs."""

    def __init__(self, gpus: Iterable[GpuInfo]) -> None:
        self._by_uuid: dict[str, tuple[int, str, int | None]] = {}
        self._by_index: dict[int, GpuInfo] = {}
        self._by_dra_name: dict[str, tuple[int, str, int | None]] = {}
        for gpu in gpus:
            self._by_index[gpu.index] = gpu
            self._by_uuid[gpu.uuid.lower()] = (gpu.index, gpu.uuid, None)
            self._by_dra_name[f"gpu-{gpu.index}"] = (gpu.index, gpu.uuid, None)
            for inst in gpu.mig_instances:
                self._by_uuid[inst.mig_uuid.lower()] = (gpu.index, gpu.uuid, inst.gi)
                for name in dra_mig_names(gpu.index, inst.profile, inst.profile_id, inst.placement_start,
                                          inst.placement_size):
                    self._by_dra_name[name] = (gpu.index, gpu.uuid, inst.gi)

    def resolve(self, device_id: str) -> tuple[int, str, int | None] | None:
        """(gpu index, gpu uuid, gi) the id names; gi None for a whole GPU; None when unknown."""
        base, _ = split_replica(device_id.strip())
        found = self._by_uuid.get(base.lower()) or self._by_dra_name.get(base)
        if found is not None:
            return found
        legacy = _LEGACY_MIG.match(base)
        if legacy is not None:
            gpu = self._by_uuid.get(legacy.group("gpu").lower())
            return None if gpu is None else (gpu[0], gpu[1], int(legacy.group("gi")))
        shape = _GKE.match(base) or _INDEX.match(base)
        if shape is None:
            return None
        gpu = self._by_index.get(int(shape.group("gpu")))
        if gpu is None:
            return None
        groups = shape.groupdict()
        if groups.get("gi") is not None:
            return gpu.index, gpu.uuid, int(groups["gi"])
        if groups.get("mig") is not None:
            ordered = sorted(gpu.mig_instances, key=lambda i: i.mig_index)
            position = int(groups["mig"])
            return (gpu.index, gpu.uuid, ordered[position].gi) if position < len(ordered) else None
        return gpu.index, gpu.uuid, None


def pod_devices(allocations: Iterable[ContainerDevices], gpus: Iterable[GpuInfo]) -> tuple[PodDevice, ...]:
    """Every (container, device) allocation that names a device of this host, sorted, replicas counted."""
    lookup = DeviceMap(gpus)
    counts: dict[tuple, int] = {}
    for alloc in allocations:
        for device_id in alloc.device_ids:
            where = lookup.resolve(device_id)
            if where is None:
                continue
            key = (alloc.namespace, alloc.pod, alloc.container, alloc.resource) + where
            counts[key] = counts.get(key, 0) + 1
    return tuple(
        PodDevice(namespace=ns, pod=pod, container=container, resource=resource, gpu_index=index,
                  uuid=uuid, gi=gi, count=count)
        for (ns, pod, container, resource, index, uuid, gi), count in sorted(
            counts.items(), key=lambda kv: (kv[0][4], -1 if kv[0][6] is None else kv[0][6]) + kv[0][:4])
    )
