"""The snapshot as NVIDIA dcgm-exporter's /metrics: its series names, labels, units and types.

Shape (dcgm-exporter d5e5f51: internal/pkg/rendermetrics, collector/gpu_collector.go,
devicemonitoring, transformation/kubernetes.go and process_metrics.go; docs/dcgm-exporter.md):

- one entity per GPU; a MIG GPU with GPU instances is one entity per GPU instance instead
  (dcgm-exporter's default ``--devices f``), each carrying the device's values again plus its
  own memory and activity, with ``GPU_I_PROFILE`` and ``GPU_I_ID`` (the NVML GI id);
- labels, in dcgm-exporter's order: ``gpu`` (DCGM's gpuId under --backend dcgm, the NVML index
  under nvml), ``UUID``, ``pci_bus_id``, ``device`` (nvidia<gpu>), ``modelName``, the MIG pair,
  ``hostname``, then ``DCGM_FI_DRIVER_VERSION``, then the attributes sorted by name
  (``container``, ``err_code``, ``err_msg``, ``namespace``, ``pod``);
- pod/namespace/container on every series of an entity the kubelet allocated to one pod;
  an entity several pods share (time-slicing, MPS) keeps its device series unlabelled and adds,
  for DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_GPU_UTIL, one series per pod with that pod's own
  value (dcgm-exporter PR #594) taken from this exporter's per-pod shares (exporter.podshare):
  never the device's value copied to each pod (dcgm-exporter #582, #642), MPS clients included
  (#478);
- the text format 0.0.4 only, counters named as the CSV names them (no ``_total``).

Rendering is a pure function of the snapshot, except for the NVLink rate, which needs the byte
counters of the previous poll.
"""

from __future__ import annotations

import logging
import socket
from typing import Iterable

from exporter.compat.dcgm_fields import (DRIVER_VERSION_LABEL, FIELDS, MIB, PER_POD_FIELDS, UNKNOWN_XID, XID_NAMES,
                                         Entity, format_value)
from exporter.encode import _escape_value as escape
from exporter.podshare import PodShare, device_shares
from exporter.snapshot import GpuInfo, MigInstance, PodDevice, Snapshot

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]


class _Site:
    """One entity's series: base labels, the values it reports, and the pods it belongs to."""

    def __init__(self, labels: Labels, entity: Entity, pods: list[tuple[str, str, str]],
                 shares: dict[tuple[str, str], PodShare]) -> None:
        self.labels = labels
        self.entity = entity
        self.pods = pods  # (namespace, pod, container), sorted
        self.shares = shares  # (namespace, pod) -> this exporter's per-pod row

    @property
    def owner(self) -> tuple[str, str, str] | None:
        """The one pod the entity is allocated to, else None (none, or shared by several)."""
        return self.pods[0] if len(self.pods) == 1 else None


def _pod_attrs(pod: tuple[str, str, str]) -> dict[str, str]:
    namespace, name, container = pod
    return {"container": container, "namespace": namespace, "pod": name}


def _line(name: str, labels: Labels, attrs: dict[str, str], value: str) -> str:
    parts = [f'{k}="{escape(v)}"' for k, v in labels] + [f'{k}="{escape(attrs[k])}"' for k in sorted(attrs)]
    return f"{name}{{{','.join(parts)}}} {value}\n"


def _pods_of(devices: Iterable[PodDevice], shares: Iterable[PodShare], gi: int | None,
             processes_container: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    """(namespace, pod, container) of the pods allocated this entity or running on it."""
    containers: dict[tuple[str, str], str] = {}
    for device in sorted(devices, key=lambda d: (d.namespace, d.pod, d.container)):
        if device.gi == gi:
            containers.setdefault((device.namespace, device.pod), device.container)
    for row in shares:
        if row.gi == gi and row.attributed:
            containers.setdefault((row.namespace, row.pod), processes_container.get((row.namespace, row.pod), ""))
    return [(ns, pod, container) for (ns, pod), container in sorted(containers.items())]


class DcgmExporterOutput:
    """Renders each good snapshot as dcgm-exporter's /metrics; ``observe`` is a poller observer.

    ``hostname``: the ``hostname`` label (dcgm-exporter: $NODE_NAME, else the host's name);
    "" leaves it out (dcgm-exporter's --no-hostname).
    """

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = socket.gethostname() if hostname is None else hostname
        self._nvlink_previous: dict[str, tuple[float, int]] = {}  # uuid -> (timestamp, tx+rx bytes)
        self.body: bytes | None = None
        self.snapshot: Snapshot | None = None

    def observe(self, snapshot: Snapshot) -> None:
        """Render ``snapshot``; a failure raises and the previous body stays (the poller logs it)."""
        body = self.render(snapshot)
        self.body, self.snapshot = body, snapshot

    def render(self, snapshot: Snapshot) -> bytes:
        sites = [site for gpu in snapshot.gpus if gpu.up for site in self._sites(snapshot, gpu)]
        driver = ((DRIVER_VERSION_LABEL, snapshot.driver_version),) if snapshot.driver_version else ()
        out: list[str] = []
        for field in FIELDS:
            lines: list[str] = []
            for site in sites:
                value = field.read(site.entity)
                if value is None:
                    continue
                labels = site.labels + driver
                attrs = _pod_attrs(site.owner) if site.owner else {}
                if field.name == "DCGM_FI_DEV_XID_ERRORS":
                    attrs["err_code"] = str(int(value))
                    attrs["err_msg"] = XID_NAMES.get(int(value), UNKNOWN_XID)
                lines.append(_line(field.name, labels, attrs, format_value(value, field.double)))
                if field.name in PER_POD_FIELDS and len(site.pods) > 1:
                    lines.extend(self._per_pod(field.name, site, labels))
            if lines:
                out.append(f"# HELP {field.name} {field.help}\n# TYPE {field.name} {field.type}\n")
                out.extend(lines)
        return "".join(out).encode("utf-8")

    @staticmethod
    def _per_pod(name: str, site: _Site, labels: Labels) -> list[str]:
        """One series per pod sharing the entity, with the pod's own value (PR #594's shape): its
        processes' memory, its share of SM time; 0 for a pod with no process on the device."""
        lines = []
        for pod in site.pods:
            row = site.shares.get(pod[:2])
            if name == "DCGM_FI_DEV_FB_USED":
                value = 0 if row is None else (None if row.memory_bytes is None else row.memory_bytes // MIB)
            else:
                value = 0 if row is None else (None if row.sm_share is None else round(row.sm_share * 100))
            if value is not None:
                lines.append(_line(name, labels, _pod_attrs(pod), f"{int(value):d}"))
        return lines

    def _sites(self, snapshot: Snapshot, gpu: GpuInfo) -> list[_Site]:
        gpu_id = gpu.dcgm_gpu_id if gpu.dcgm_gpu_id is not None else gpu.index
        base: Labels = (("gpu", str(gpu_id)), ("UUID", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id),
                        ("device", f"nvidia{gpu_id}"), ("modelName", gpu.name))
        host: Labels = (("hostname", self.hostname),) if self.hostname else ()
        nvlink = self._nvlink_rate(snapshot.timestamp, gpu)
        devices = [d for d in snapshot.pod_devices if d.uuid == gpu.uuid]
        rows = [r for r in device_shares(gpu, snapshot.pod_devices) if r.attributed]
        containers = {(p.namespace, p.pod): p.container for p in gpu.processes if p.pod}
        if not gpu.mig_instances:
            entity = Entity(gpu, gpu.memory_used_bytes, gpu.memory_free_bytes, gpu.memory_reserved_bytes,
                            gpu.activity, nvlink)
            shares = {(r.namespace, r.pod): r for r in rows if r.gi is None}
            return [_Site(base + host, entity, _pods_of(devices, rows, None, containers), shares)]
        sites = []
        seen: set[int] = set()
        for inst in sorted(gpu.mig_instances, key=lambda i: (i.gi, i.ci)):
            if inst.gi in seen:
                continue  # one entity per GPU instance; its compute instances share its memory
            seen.add(inst.gi)
            sites.append(self._instance_site(base, host, gpu, inst, nvlink, devices, rows, containers))
        return sites

    @staticmethod
    def _instance_site(base: Labels, host: Labels, gpu: GpuInfo, inst: MigInstance, nvlink: float | None,
                       devices: list[PodDevice], rows: list[PodShare], containers: dict) -> _Site:
        labels = base + (("GPU_I_PROFILE", inst.profile), ("GPU_I_ID", str(inst.gi))) + host
        entity = Entity(gpu, inst.memory_used_bytes, inst.memory_free_bytes, None, inst.activity, nvlink)
        shares = {(r.namespace, r.pod): r for r in rows if r.gi == inst.gi}
        return _Site(labels, entity, _pods_of(devices, rows, inst.gi, containers), shares)

    def _nvlink_rate(self, now: float, gpu: GpuInfo) -> float | None:
        """MB/s of NVLink data (TX + RX, every link) since the previous poll; None on the first
        poll, without NVLink, or when a counter went back (driver reload)."""
        counts = [n for link in gpu.health.nvlinks for n in (link.tx_bytes, link.rx_bytes)]
        if not counts or any(n is None for n in counts):
            self._nvlink_previous.pop(gpu.uuid, None)
            return None
        total = sum(counts)
        previous = self._nvlink_previous.get(gpu.uuid)
        self._nvlink_previous[gpu.uuid] = (now, total)
        if previous is None or now <= previous[0] or total < previous[1]:
            return None
        return (total - previous[1]) / (now - previous[0]) / 1e6
