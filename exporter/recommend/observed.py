"""Observed usage from samples (snapshot files, --from) turned into a time-resolved Demand.

An *instance* is one process on one device, (node, GPU uuid, gi, pid); its *workload* is the
identity the exporter resolved for it (ProcessInfo.workload), never the pid. An instance is
alive from its first to its last sample: a gap in a node's samples inside that span (the
exporter was down, a snapshot was missed) is treated as alive throughout, and an instance
not seen again after a gap ended at its last sample. A restarted process is a new instance
that follows the old one, so the two share a slot unless a sample saw both.

Per workload: the planned peak is a high quantile of its instances' peaks; ``count`` is the
most instances alive at once; ``counts`` gives them at every sample time of the fleet. A
device (GPU or MIG instance) where two instances were alive at the same sample time is a
*shared device*: MPS clients or time-slicing.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from exporter import catalog
from exporter.catalog import GpuModel
from exporter.foresight.workload import workload_label
from exporter.recommend import demand_build
from exporter.recommend.demand import (DEFAULT_OBSERVED_MARGIN, DEFAULT_PEAK_QUANTILE, Basis, Demand, FleetGpu,
                                       Grid, SharedDevice)

MIN_TIMELINE_SAMPLES = 3
GAP_FACTOR = 3.0  # a pause longer than this many median intervals between two looks at a node is a gap


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


@dataclass(frozen=True)
class Device:
    """Where instances run: a whole GPU (gi "") or one MIG instance."""

    node: str
    uuid: str
    gi: str
    key: str  # "node-a gpu0" or "node-a gpu0 gi3 (3g.40gb)"
    model: str
    gpu_index: int
    capacity_bytes: int | None
    sms: int | None
    profile: str | None = None


@dataclass
class _Instance:
    device: Device
    workload: str
    first: float
    last: float
    peak: int = 0
    samples: list = field(default_factory=list)  # (t, memory)
    sms: list = field(default_factory=list)
    tensor: list = field(default_factory=list)
    mps: bool = False
    expected_peak: int = 0  # learned peak of its workload reported by the exporter


class ObservedFleet:
    """Mutable collector; ``to_demand`` freezes it."""

    def __init__(self) -> None:
        self._gpus: dict[tuple[str, int], FleetGpu] = {}
        self._instances: dict[tuple, _Instance] = {}
        self._times: dict[str, list[float]] = defaultdict(list)
        self._oom: set[tuple[str, str, str]] = set()  # (node, uuid, gi)
        self._profiles: dict[str, int] = {}  # learned peak by profile label (workload_label of key@NGiB)
        self._sources: list[str] = []
        self._notes: dict[str, None] = {}
        self.clock = "unix"

    def source(self, text: str) -> None:
        self._sources.append(text)

    def note(self, text: str) -> None:
        self._notes[text] = None

    def gpu(self, node: str, index: int, name: str, uuid: str, sharing: str = "") -> GpuModel | None:
        """Register a GPU; its catalog model, or None (noted) for an unknown product name."""
        try:
            model = catalog.resolve_model(name)
        except KeyError:
            self.note(f"GPU model {name!r} is not in the catalog: its GPUs and processes are skipped")
            return None
        old = self._gpus.get((node, index))
        self._gpus[(node, index)] = FleetGpu(node, index, model.key, uuid, old.layout if old else None, sharing)
        return model

    def layout(self, node: str, index: int, layout: tuple | None) -> None:
        gpu = self._gpus[(node, index)]
        self._gpus[(node, index)] = FleetGpu(gpu.node, gpu.index, gpu.model, gpu.uuid, layout, gpu.sharing)

    def seen(self, node: str, timestamp: float) -> None:
        """A complete observation of ``node`` at ``timestamp``."""
        self._times[node].append(timestamp)

    def oom(self, node: str, uuid: str, gi: str) -> None:
        """An OOM kill happened on this device (the simulator reports them)."""
        self._oom.add((node, uuid, gi))

    def profile_peak(self, label: str, peak: int) -> None:
        """A learned workload profile the exporter reports (label of ``<key>@<N>GiB``)."""
        self._profiles[label] = max(peak, self._profiles.get(label, 0))

    def sample(self, *, device: Device, pid: int, workload: str, timestamp: float, memory: int | None,
               sms: float | None, tensor: float | None, mps: bool, expected: int | None = None) -> None:
        """One process seen on ``device`` at ``timestamp``."""
        key = (device.node, device.uuid, device.gi, pid, workload)
        inst = self._instances.get(key)
        if inst is None:
            inst = self._instances[key] = _Instance(device, workload, timestamp, timestamp)
        inst.first, inst.last = min(inst.first, timestamp), max(inst.last, timestamp)
        if memory is not None:
            inst.peak = max(inst.peak, int(memory))
            inst.samples.append((timestamp, int(memory)))
        if sms is not None:
            inst.sms.append(sms)
        if tensor is not None:
            inst.tensor.append(tensor)
        inst.mps = inst.mps or mps
        if expected:
            inst.expected_peak = max(inst.expected_peak, int(expected))

    # --- freezing ---------------------------------------------------------------------------

    def to_demand(self, margin: float | None = None, quantile: float | None = None,
                  min_window: float = 0.0) -> Demand:
        margin = DEFAULT_OBSERVED_MARGIN if margin is None else margin
        quantile = DEFAULT_PEAK_QUANTILE if quantile is None else quantile
        instances = [i for i in self._instances.values() if i.samples]
        for i in self._instances.values():
            if not i.samples:
                self.note(f"{i.workload} on {i.device.key}: no memory reading, left out")
        times = sorted({t for ts in self._times.values() for t in ts} | {i.first for i in instances}
                       | {i.last for i in instances})
        grid = np.asarray(times, dtype=float)
        alive = {id(i): (grid >= i.first) & (grid <= i.last) for i in instances}
        groups: dict[tuple[str, str, int], list[_Instance]] = defaultdict(list)
        for i in instances:
            groups[_class(i)].append(i)
        classes = defaultdict(set)
        for key, model, size in groups:
            classes[key].add((model, size))
        naming = demand_build.names(classes)
        workloads = []
        for cls, members in sorted(groups.items()):
            key, model, _ = cls
            name = naming[cls]
            counts = np.sum([alive[id(i)] for i in members], axis=0).astype(np.int64)
            expected = max([i.expected_peak for i in members]
                           + [self._profiles.get(workload_label(f"{key}@{cls[2]}GiB"), 0)])
            sms = [statistics.fmean(i.sms) for i in members if i.sms]
            tensor = [statistics.fmean(i.tensor) for i in members if i.tensor]
            workloads.append(demand_build.observed_workload(
                name=name, model=model, peaks=[i.peak for i in members], counts=counts, margin=margin,
                quantile=quantile, learned_peak=expected,
                sms=statistics.fmean(sms) if sms else None,
                tensor=statistics.fmean(tensor) if tensor else None,
                timeline=self._timeline(members),
                devices=[i.device for i in members], oom=self._oom,
                samples=sum(len(i.samples) for i in members)))
        shared = self._shared(instances, grid, alive, naming)
        basis = Basis(start=times[0] if times else None, end=times[-1] if times else None, clock=self.clock,
                      samples=sum(len(i.samples) for i in instances), instances=len(instances),
                      nodes=len(self._times), min_window_seconds=min_window, gaps=tuple(self._gaps()),
                      learned_profiles=sum(1 for w in workloads if "learned" in w.sized_by))
        # (learned profiles from --state-dir are applied to every input alike: profiles_input.py)
        return Demand(
            workloads=tuple(workloads),
            gpus=tuple(self._gpus[k] for k in sorted(self._gpus)),
            shared=shared, sources=tuple(self._sources), notes=tuple(self._notes),
            grid=Grid(tuple(times), None, self.clock) if times else None, basis=basis,
        )

    def _timeline(self, members: list[_Instance]):
        """Memory timeline of the workload's largest instance whose whole life was seen."""
        best = None
        for inst in members:
            times = sorted(set(self._times.get(inst.device.node, [])))
            points = sorted(inst.samples)
            if len(points) < MIN_TIMELINE_SAMPLES or not times:
                continue
            if inst.first <= times[0] or inst.last >= times[-1]:
                continue  # running at the first or the last look: start or end (often the peak) unknown
            after = next(t for t in times if t > inst.last)  # gone by then: assume it ran until it
            first = points[0][0]
            line = held_max([(t - first, m) for t, m in points] + [(after - first, points[-1][1])])
            if best is None or (inst.peak, line[-1][0]) > (best[0], best[1][-1][0]):
                best = (inst.peak, line)
        return best[1] if best else None

    def _shared(self, instances, grid, alive, naming) -> tuple[SharedDevice, ...]:
        per_device: dict[Device, list[_Instance]] = defaultdict(list)
        for i in instances:
            per_device[i.device].append(i)
        out = []
        for device, members in sorted(per_device.items(), key=lambda kv: kv[0].key):
            together = np.sum([alive[id(i)] for i in members], axis=0)
            if len(members) < 2 or together.max() < 2:
                continue
            memory_at: dict[float, int] = defaultdict(int)
            for i in members:
                for t, m in i.samples:
                    memory_at[t] += m
            counts: dict[str, np.ndarray] = {}
            for i in members:
                name = naming[_class(i)]
                counts[name] = counts.get(name, 0) + alive[id(i)].astype(np.int64)
            out.append(SharedDevice(
                key=device.key, model=device.model, capacity_bytes=int(device.capacity_bytes or 0),
                sms=int(device.sms or 0), mps=any(i.mps for i in members), workloads=tuple(sorted(counts)),
                node=device.node, gpu_index=device.gpu_index, gi=device.gi, counts=counts,
                concurrency=int(together.max()), together_peak_bytes=max(memory_at.values(), default=0),
                alive=together > 0, oom=(device.node, device.uuid, device.gi) in self._oom,
                profile=device.profile))
        return tuple(d for d in out if d.capacity_bytes)

    def _gaps(self) -> list[str]:
        """Pauses between two looks at a node much longer than its usual interval."""
        gaps = []
        for node in sorted(self._times):
            times = sorted(set(self._times[node]))
            steps = [b - a for a, b in zip(times, times[1:])]
            if len(steps) < 2:
                continue
            usual = statistics.median(steps)
            for a, b in zip(times, times[1:]):
                if usual > 0 and b - a > GAP_FACTOR * usual:
                    gaps.append(f"{node}: nothing seen for {b - a:g} s after t={a:g}")
        return gaps


def _class(i: _Instance) -> tuple[str, str, int]:
    return (i.workload, i.device.model, demand_build.size_class(i.device.capacity_bytes))
