"""Demand model: what each workload needs, how many of it run at once, whatever the source.

A *workload* is what the foresight calls a workload (Kubernetes owner, cleaned command line,
config rules; exporter.foresight.workload), never a process id: the replicas of a
deployment and the successive runs of a job are *instances* of one workload. Per workload:

- ``peak_memory_bytes``: a high quantile of its instances' peaks (observed) or the planned
  size; ``memory_need_bytes`` adds the margin (see ``memory_need_bytes`` for its cap);
- ``count``: the most instances alive at once, and ``counts``: instances alive over time on
  the Demand's ``grid`` (observed inputs). The planner covers the peak of what is alive
  *together*, so jobs that ran one after another share a slot.

Memory is the hard constraint (a MIG instance or an MPS client that runs out is killed);
compute is soft and kept in *SM-equivalents*, so needs observed on one profile compare with
the SM counts of another: a process busy 50% of the time on a 16-SM 1g instance needs 8.

Margins (docs/recommend.md): observed peaks get ``DEFAULT_OBSERVED_MARGIN`` (a window's
maximum is a lower bound of the true peak); planned sizes get none by default (the sizing
rule already holds 20% for activations, an explicit ``memory:`` is the engineer's number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from exporter.catalog import MIB, GpuModel
from exporter.sizing import PRECISION_BYTES, SIZING_OVERHEAD, rule_sized_bytes  # noqa: F401 - re-exported

DEFAULT_OBSERVED_MARGIN = 0.10
DEFAULT_PEAK_QUANTILE = 0.95

Timeline = tuple[tuple[float, int], ...]  # (seconds since the workload started, bytes)


def upper_quantile(values, q: float) -> float:
    """Nearest-rank quantile (the smallest value with at least q of the values at or below it).

    Always one of the values, never an interpolation: with fewer than 1/(1-q) values it is
    the maximum, so a handful of replicas is planned at its largest.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("upper_quantile of nothing")
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[rank - 1]


@dataclass(frozen=True, eq=False)
class Workload:
    """One workload: its size per instance, its compute need, how many instances run at once."""

    name: str  # the workload key (observed) or the plan's name; unique in a Demand
    peak_memory_bytes: int  # per instance, before the margin
    margin_ratio: float = 0.0
    count: int = 1  # most instances alive at once
    counts: np.ndarray | None = None  # instances alive per point of Demand.grid; None: `count` always
    compute_sms: float | None = None  # SM-equivalents per instance; None unknown
    compute_fraction: float | None = None  # plan only: share of a whole GPU of the target model
    tensor_ratio: float | None = None  # tensor-pipe activity 0..1 where it ran; None unknown
    timeline: Timeline | None = None  # memory over one instance's life, before the margin
    gpu_model: str | None = None  # catalog key it must run on (observed: where it ran); None any
    location: str = ""  # where it runs now, e.g. "node-a gpu0 gi7 (3g.40gb), node-b gpu2"
    sized_by: str = "explicit"  # "observed peak (q0.95 of 12 instances)", "params x bytes x 1.2", ...
    # The margin never pushes the need above this: the smallest device the workload ran on
    # without an OOM kill (it ran there, so it fits there). None: no cap.
    memory_cap_bytes: int | None = None
    max_peak_bytes: int | None = None  # largest instance peak seen (observed only)
    instances: int | None = None  # instances seen (observed only)
    samples: int | None = None  # memory samples behind the peak (observed only)
    gpus_seen: tuple[tuple[str, int], ...] = ()  # (node, GPU index) it ran on (observed only)
    slots_seen: tuple[str, ...] = ()  # MIG profiles it ran in, "full" for a whole GPU (observed only)

    @cached_property  # frozen dataclasses keep a __dict__, so caching works; planning asks often
    def memory_need_bytes(self) -> int:
        """Peak plus margin, bytes, capped at ``memory_cap_bytes`` but never below the peak."""
        need = math.ceil(self.peak_memory_bytes * (1.0 + self.margin_ratio))
        if self.memory_cap_bytes is not None:
            need = max(self.peak_memory_bytes, min(need, self.memory_cap_bytes))
        return need

    @cached_property
    def memory_need_mib(self) -> int:
        """Peak plus margin, in whole MiB (MIG profile sizes are MiB)."""
        return -(-self.memory_need_bytes // MIB)

    @property
    def duration_seconds(self) -> float | None:
        """Length of the learned timeline (seconds), None without one."""
        return self.timeline[-1][0] if self.timeline else None

    def sms_on(self, model: GpuModel) -> int:
        """SMs this workload needs on ``model``, rounded up to whole SMs (0 when unknown)."""
        if self.compute_sms is not None:
            return max(0, math.ceil(self.compute_sms - 1e-9))
        if self.compute_fraction is not None:
            return max(0, math.ceil(self.compute_fraction * model.sm_count - 1e-9))
        return 0

    @property
    def compute_known(self) -> bool:
        return self.compute_sms is not None or self.compute_fraction is not None

    def alive(self, points: int) -> np.ndarray:
        """Instances alive at each of ``points`` grid points."""
        if self.counts is None:
            return np.full(points, self.count, dtype=np.int64)
        return np.asarray(self.counts, dtype=np.int64)


@dataclass(frozen=True)
class FleetGpu:
    """A physical GPU that exists now (from a snapshot, Prometheus or the plan's fleet)."""

    node: str
    index: int
    model: str  # catalog key
    uuid: str = ""
    # Current MIG layout as (profile, start) pairs; None when MIG is off or unknown.
    layout: tuple[tuple[str, int], ...] | None = None
    sharing: str = ""  # as exported: exclusive, time_slicing, mps, mig, mig+mps, idle ("" unknown)


@dataclass(frozen=True, eq=False)
class SharedDevice:
    """A GPU or MIG instance where several instances ran at the same time (MPS or time-slicing).

    The planner may keep such a group together ("as it runs now": one slot holding the group's
    summed memory) or break it up into one slot per instance.
    """

    key: str  # "node-a gpu0" or "node-a gpu0 gi3 (3g.40gb)"
    model: str
    capacity_bytes: int  # memory of the device the clients share
    sms: int  # SMs of that device
    mps: bool  # True under MPS (limits apply); False for time-slicing
    workloads: tuple[str, ...]  # names of the workloads that ran there
    node: str = ""
    gpu_index: int | None = None
    gi: str = ""  # "" for a whole GPU
    counts: dict[str, np.ndarray] | None = None  # per workload, instances alive here per grid point
    concurrency: int = 0  # most instances alive here at once
    together_peak_bytes: int = 0  # most memory the instances held here at one time
    alive: np.ndarray | None = None  # grid points where anything ran here
    oom: bool = False  # an OOM kill was seen on this device
    profile: str | None = None  # MIG profile of the instance; None for a whole GPU


@dataclass(frozen=True)
class Grid:
    """Time points (Unix or scenario seconds) the observed counts are given at.

    Each point stands for the interval up to the next one (snapshots) or the bucket ending
    at it (Prometheus, ``step`` seconds long); counts there are the most instances alive.
    """

    times: tuple[float, ...]
    step: float | None = None  # bucket length for Prometheus; None for snapshot sample times
    clock: str = "unix"  # "unix" or "scenario" (simulated snapshots count from the scenario start)


@dataclass(frozen=True)
class Basis:
    """What the plan rests on, printed with it (docs/recommend.md "Basis")."""

    start: float | None = None  # first and last moment observed (grid clock)
    end: float | None = None
    clock: str = "unix"
    samples: int = 0  # memory samples read
    instances: int = 0  # workload instances seen (processes / series)
    nodes: int = 0
    min_window_seconds: float = 0.0  # shorter than this: the plan is a draft
    gaps: tuple[str, ...] = ()  # scrape or snapshot gaps, described
    learned_profiles: int = 0  # workloads whose size came from learned profiles

    @property
    def window_seconds(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return max(0.0, self.end - self.start)

    @property
    def draft(self) -> bool:
        """True for observed input shorter than the minimum window."""
        return self.start is not None and self.window_seconds < self.min_window_seconds


@dataclass(frozen=True)
class Demand:
    """Everything `recommend` plans for."""

    workloads: tuple[Workload, ...]
    gpus: tuple[FleetGpu, ...] = ()
    shared: tuple[SharedDevice, ...] = ()
    targets: tuple[str, ...] = ()  # model keys for workloads without gpu_model
    sources: tuple[str, ...] = ()  # human description of each input, for the report
    notes: tuple[str, ...] = ()  # things the inputs could not use, said once each
    grid: Grid | None = None  # None: every workload runs `count` instances all the time
    basis: Basis = field(default_factory=Basis)

    @property
    def points(self) -> int:
        return len(self.grid.times) if self.grid else 1


def merge(demands: list[Demand]) -> Demand:
    """One Demand from several inputs; workload names stay unique.

    Two observed inputs on different clocks cannot be lined up in time: the second one's
    workloads are then held at their peak concurrency over the first one's grid (as if both
    peaked together, the safe side), and a note says so.
    """
    grids = [d for d in demands if d.grid is not None]
    base = grids[0] if grids else None
    notes = [n for d in demands for n in d.notes]
    seen: set[str] = set()
    workloads = []
    for d in demands:
        for w in d.workloads:
            name, n = w.name, 2
            while name in seen:  # the same workload seen by two inputs: keep both, renamed
                name = f"{w.name}~{n}"
                n += 1
            seen.add(name)
            if d.grid is not None and d is not base:
                w = replace(w, counts=None)
            workloads.append(w if name == w.name else replace(w, name=name))
    if len(grids) > 1:
        notes.append("several observed inputs on their own clocks: each one's workloads are assumed "
                     "to peak at the same moment as the others'")
    # Devices of another clock keep their advice but are not offered to the planner as groups.
    shared = tuple(s if d is base or d.grid is None else replace(s, counts=None, alive=None)
                   for d in demands for s in d.shared)
    return Demand(
        workloads=tuple(workloads),
        gpus=tuple(g for d in demands for g in d.gpus),
        shared=shared,
        targets=tuple(dict.fromkeys(t for d in demands for t in d.targets)),
        sources=tuple(s for d in demands for s in d.sources),
        notes=tuple(dict.fromkeys(notes)),
        grid=base.grid if base else None,
        basis=base.basis if base else Basis(),
    )
