"""Accumulates observed usage (snapshots or Prometheus) and turns it into a Demand.

A workload is one process on one GPU of one node, keyed (node, GPU uuid, pid). Its peak is
the largest memory seen; its compute need the mean SM-equivalents; its memory timeline is
kept when its end falls inside the observation (it disappeared before the last look), so
the whole run up to its final peak was seen. The timeline starts at its first sample: for a
process already running at the first look the start may be cut off, which the report says.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from exporter import catalog
from exporter.catalog import GpuModel
from exporter.recommend.demand import DEFAULT_OBSERVED_MARGIN, Demand, FleetGpu, SharedDevice, Workload

MIN_TIMELINE_SAMPLES = 3


def held_max(points) -> tuple:
    """Samples (t, bytes) as a step timeline holding, between two samples, the larger of them.

    Memory between two looks is unknown; a spike seen at one sample may have begun right
    after the previous one. Linear interpolation would shorten every spike by up to one
    sampling interval, and a stagger computed from it would be too tight.
    """
    out: list = []
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        high = max(v0, v1)
        for point in ((t0, high), (t1, high)):
            if not out or out[-1] != point:
                out.append(point)
    return tuple(out) if out else tuple(points)


@dataclass
class _Process:
    node: str
    name: str
    pid: int
    model: str
    device: str
    samples: list = field(default_factory=list)  # (timestamp, memory, sms, tensor)
    mps: bool = False
    timeline: tuple | None = None  # set directly by a history source (Prometheus)


class ObservedFleet:
    """Mutable collector; ``to_demand`` freezes it."""

    def __init__(self) -> None:
        self._gpus: dict[tuple[str, int], FleetGpu] = {}
        self._procs: dict[tuple[str, str, int], _Process] = {}
        self._devices: dict[str, dict] = {}
        self._together: dict[tuple[str, float], set[str]] = defaultdict(set)
        self._times: dict[str, list[float]] = defaultdict(list)
        self._sources: list[str] = []
        self._notes: dict[str, None] = {}

    def source(self, text: str) -> None:
        self._sources.append(text)

    def note(self, text: str) -> None:
        self._notes[text] = None

    def gpu(self, node: str, index: int, name: str, uuid: str) -> GpuModel | None:
        """Register a GPU; its catalog model, or None (noted) for an unknown product name."""
        try:
            model = catalog.resolve_model(name)
        except KeyError:
            self.note(f"GPU model {name!r} is not in the catalog: its GPUs and processes are skipped")
            return None
        old = self._gpus.get((node, index))
        self._gpus[(node, index)] = FleetGpu(node, index, model.key, uuid, old.layout if old else None)
        return model

    def layout(self, node: str, index: int, layout: tuple) -> None:
        gpu = self._gpus[(node, index)]
        self._gpus[(node, index)] = FleetGpu(gpu.node, gpu.index, gpu.model, gpu.uuid, layout)

    def seen(self, node: str, timestamp: float) -> None:
        """A complete observation of ``node`` at ``timestamp`` (for start/end detection)."""
        self._times[node].append(timestamp)

    def sample(self, *, node, uuid, pid, name, model, device, timestamp, memory, sms, tensor,
               mps, capacity, device_sms) -> None:
        key = (node, uuid, pid)
        proc = self._procs.get(key)
        if proc is None:
            proc = self._procs[key] = _Process(node, name, pid, model, device)
        proc.samples.append((timestamp, memory, sms, tensor))
        proc.mps = proc.mps or mps
        if device not in self._devices:
            self._devices[device] = {"model": model, "capacity": capacity, "sms": device_sms}
        if timestamp is not None:  # processes in the same observation of a device run together
            self._together[(device, timestamp)].add(self._name(proc))

    def mark_shared(self, device: str, keys: list[tuple[str, str, int]]) -> None:
        """Processes ``keys`` ran on ``device`` at the same time (a history source says so)."""
        names = {self._name(self._procs[k]) for k in keys if k in self._procs}
        self._together[(device, None)] |= names

    def set_timeline(self, node: str, uuid: str, pid: int, points: tuple) -> None:
        proc = self._procs.get((node, uuid, pid))
        if proc is not None and len(points) >= MIN_TIMELINE_SAMPLES:
            proc.timeline = held_max(points)

    @staticmethod
    def _name(proc: _Process) -> str:
        return f"{proc.node}:{proc.name}[{proc.pid}]"

    def _timeline(self, proc: _Process):
        if proc.timeline is not None:
            return proc.timeline
        times = sorted(set(self._times.get(proc.node, [])))
        if not times:
            return None
        points = sorted((t, m) for t, m, _, _ in proc.samples if m is not None and t is not None)
        if len(points) < MIN_TIMELINE_SAMPLES:
            return None
        first, last = points[0][0], points[-1][0]
        if last >= times[-1]:
            return None  # still running at the last look: its end (often its peak) is unknown
        if first <= times[0]:
            self.note(f"{self._name(proc)}: running at the first look, its timeline may miss its start")
        after = next(t for t in times if t > last)  # it was gone by then: assume it ran until it
        return held_max([(t - first, m) for t, m in points] + [(after - first, points[-1][1])])

    def to_demand(self, margin: float | None = None) -> Demand:
        margin = DEFAULT_OBSERVED_MARGIN if margin is None else margin
        shared_members: dict[str, set[str]] = defaultdict(set)
        for (device, _), names in self._together.items():
            if len(names) > 1:
                shared_members[device] |= names
        workloads = []
        mps_devices = set()
        for proc in self._procs.values():
            memories = [m for _, m, _, _ in proc.samples if m is not None]
            if not memories:
                self.note(f"{self._name(proc)}: no memory reading, left out")
                continue
            sms = [s for _, _, s, _ in proc.samples if s is not None]
            tensor = [x for _, _, _, x in proc.samples if x is not None]
            name = self._name(proc)
            shared = name in shared_members.get(proc.device, ())
            if shared and proc.mps:
                mps_devices.add(proc.device)
            workloads.append(Workload(
                name=name, peak_memory_bytes=int(max(memories)), margin_ratio=margin,
                compute_sms=statistics.fmean(sms) if sms else None,
                tensor_ratio=statistics.fmean(tensor) if tensor else None,
                timeline=self._timeline(proc), gpu_model=proc.model, node=proc.node,
                location=proc.device, sized_by="observed peak",
                mps_group=proc.device if shared else None,
            ))
        shared = tuple(
            SharedDevice(device, self._devices[device]["model"], int(self._devices[device]["capacity"] or 0),
                         int(self._devices[device]["sms"] or 0), device in mps_devices,
                         tuple(sorted(names)))
            for device, names in sorted(shared_members.items())
            if self._devices[device]["capacity"]
        )
        return Demand(
            workloads=tuple(sorted(workloads, key=lambda w: w.name)),
            gpus=tuple(self._gpus[k] for k in sorted(self._gpus)),
            shared=shared, sources=tuple(self._sources), notes=tuple(self._notes),
        )
