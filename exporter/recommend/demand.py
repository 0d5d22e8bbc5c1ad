"""Demand model: what each workload needs, whatever the source (observed usage or a plan).

Memory is the hard constraint (a MIG instance or an MPS client that runs out is killed), so
each workload carries its peak and a margin; compute is soft (too few SMs is slower, not
fatal) and is kept in *SM-equivalents* so that needs observed on one profile compare with
the SM counts of another: a process busy 50% of the time on a 16-SM 1g instance needs 8.

Margins (documented in docs/recommend.md):
- observed peaks get ``DEFAULT_OBSERVED_MARGIN`` (10%): a window's maximum is a lower bound
  of the true peak, and the next batch may be a little bigger;
- planned sizes get no margin by default: the sizing rule (params x bytes x 1.2) already
  holds 20% for activations and KV cache, and an explicit ``memory:`` is the engineer's own
  number. A plan file may set ``margin:``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from exporter.catalog import MIB, GpuModel

DEFAULT_OBSERVED_MARGIN = 0.10

# Bytes per parameter by precision (seed 004: "determine the precision of the model").
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0, "float32": 4.0, "tf32": 4.0,
    "fp16": 2.0, "float16": 2.0, "half": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "int8": 1.0, "e4m3": 1.0, "e5m2": 1.0,
    "int4": 0.5, "fp4": 0.5, "nf4": 0.5, "mxfp4": 0.5,
}

# Seed 004's rule for LLM serving: parameters x bytes per parameter x 1.2.
SIZING_OVERHEAD = 1.2

Timeline = tuple[tuple[float, int], ...]  # (seconds since the workload started, bytes)


def rule_sized_bytes(params: float, precision: str) -> int:
    """Memory (bytes) the seed-004 rule gives a model: params x bytes/param x 1.2."""
    return math.ceil(params * PRECISION_BYTES[precision] * SIZING_OVERHEAD)


@dataclass(frozen=True)
class Workload:
    """One thing that needs a GPU slice: a process seen running, or one replica of a plan."""

    name: str  # unique in a Demand, e.g. "llama-8b#2" or "node-a:python3[4242]"
    peak_memory_bytes: int  # observed maximum or planned peak, before the margin
    margin_ratio: float = 0.0
    compute_sms: float | None = None  # SM-equivalents (busy fraction x SMs it ran on); None unknown
    compute_fraction: float | None = None  # plan only: share of a whole GPU of the target model
    tensor_ratio: float | None = None  # tensor-pipe activity 0..1 where it ran; None unknown
    timeline: Timeline | None = None  # memory over the workload's life, before the margin
    gpu_model: str | None = None  # catalog key it must run on (observed: where it ran); None any
    node: str | None = None  # node it runs on now (observed only)
    location: str = ""  # where it runs now, e.g. "node-a gpu0 gi7 (3g.40gb)"; "" for plans
    sized_by: str = "explicit"  # "observed peak", "explicit", "params x bytes x 1.2"
    mps_group: str | None = None  # key of the device it shares with other clients now

    @cached_property  # frozen dataclasses keep a __dict__, so caching works; planning asks often
    def memory_need_bytes(self) -> int:
        """Peak plus margin, bytes: what a slice or an MPS limit must hold."""
        return math.ceil(self.peak_memory_bytes * (1.0 + self.margin_ratio))

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


@dataclass(frozen=True)
class FleetGpu:
    """A physical GPU that exists now (from a snapshot, Prometheus or the plan's fleet)."""

    node: str
    index: int
    model: str  # catalog key
    uuid: str = ""
    # Current MIG layout as (profile, start) pairs; None when MIG is off or unknown.
    layout: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True)
class SharedDevice:
    """A GPU or MIG instance that several workloads share now (MPS or time-slicing)."""

    key: str  # e.g. "node-a gpu0" or "node-a gpu0 gi3 (3g.40gb)"
    model: str
    capacity_bytes: int  # memory of the device the clients share
    sms: int  # SMs of that device
    mps: bool  # True under MPS (limits apply); False for time-slicing
    workloads: tuple[str, ...]


@dataclass(frozen=True)
class Demand:
    """Everything `recommend` plans for."""

    workloads: tuple[Workload, ...]
    gpus: tuple[FleetGpu, ...] = ()
    shared: tuple[SharedDevice, ...] = ()
    targets: tuple[str, ...] = ()  # model keys for workloads without gpu_model
    sources: tuple[str, ...] = ()  # human description of each input, for the report
    notes: tuple[str, ...] = ()  # things the inputs could not use, said once each


def merge(demands: list[Demand]) -> Demand:
    """One Demand from several inputs; workload names must stay unique."""
    seen: set[str] = set()
    workloads = []
    for d in demands:
        for w in d.workloads:
            name = w.name
            n = 2
            while name in seen:  # the same pod seen by two inputs: keep both, renamed
                name = f"{w.name}~{n}"
                n += 1
            seen.add(name)
            workloads.append(w if name == w.name else _renamed(w, name))
    return Demand(
        workloads=tuple(workloads),
        gpus=tuple(g for d in demands for g in d.gpus),
        shared=tuple(s for d in demands for s in d.shared),
        targets=tuple(dict.fromkeys(t for d in demands for t in d.targets)),
        sources=tuple(s for d in demands for s in d.sources),
        notes=tuple(n for d in demands for n in d.notes),
    )


def _renamed(w: Workload, name: str) -> Workload:
    from dataclasses import replace

    return replace(w, name=name)
