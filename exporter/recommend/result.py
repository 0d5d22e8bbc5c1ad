"""What `recommend` answers, as frozen data every output format renders."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.recommend.baselines import Baseline
from exporter.recommend.demand import Basis, Workload
from exporter.recommend.mps import MpsAdvice


@dataclass(frozen=True)
class InstancePlan:
    profile: str  # "3g.40gb"; "full" on a GPU with MIG off
    start: int  # first memory slice
    memory_slices: int
    compute_slices: int  # the "3" of 3g; all of them for a whole GPU
    memory_bytes: int
    sms: int
    workload: str | None  # what holds it at the peak moment; None: free then (spare, or used at other times)
    need_bytes: int | None = None  # that workload's peak + margin
    shortfall_sms: int = 0  # SMs the workload used beyond what this instance has
    members: tuple[str, ...] = ()  # a group kept together as it runs now: its workloads


@dataclass(frozen=True)
class GpuPlan:
    model: str
    node: str  # existing node, or "new" for a GPU to add
    index: int | None  # existing GPU index; for a new GPU its number among the new ones
    config: str  # mig-parted config name: "all-1g.20gb", "custom-...", "all-disabled"
    mig_enabled: bool
    instances: tuple[InstancePlan, ...]
    change: str  # keep | reconfigure | new | release
    stranded_bytes: int  # in no instance, or in an instance above its occupant's need at the peak
    note: str = ""
    current: str = ""  # what the GPU is now ("MIG 3g.40gb + 2x1g.10gb", "MIG off, MPS"); "" for new


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload in one model's plan: how many at once, how big, where at the peak moment."""

    name: str
    count: int  # most instances alive at once
    need_bytes: int
    gpus_per_instance: int
    slots: str  # "3 x 1g.20gb" at the peak moment, or "" when none alive then


@dataclass(frozen=True)
class ModelPlan:
    model: str
    workloads: tuple[WorkloadPlan, ...]
    at_once: int  # most instances alive at one time (the plan holds them all then)
    gpus_needed: int
    gpus_mig_off: int  # of which with MIG off (whole GPUs)
    available_gpus: int  # GPUs of this model in the fleet (0 for a plan without fleet)
    kept: int
    reconfigured: int
    released: int
    added: int
    groups_kept: tuple[str, ...]  # shared devices kept together as they run now
    optimal: bool
    layouts_minimal: bool
    stranded_bytes: int
    shortfall_sms: int
    homogeneous: Baseline
    homogeneous_tried: tuple[Baseline, ...]
    greedy: Baseline
    mps: tuple[MpsAdvice, ...]  # the MPS alternative, one per GPU, dedicated GPUs included
    gpus: tuple[GpuPlan, ...]
    solve_seconds: float
    time_rows: int
    patterns: int
    peak_moment: float | None  # grid time of the peak moment (None for a plan)
    reasons: tuple[str, ...]
    gpus_per_node: int = 8  # the fleet's largest node of this model, or an 8-GPU node assumed


@dataclass(frozen=True)
class Recommendation:
    plans: tuple[ModelPlan, ...]
    shared_now: tuple[MpsAdvice, ...]  # devices several instances share at once today
    workloads: tuple[Workload, ...]
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    basis: Basis
    stamp: str  # "2025-01-31 12:00 UTC (window end)" or "undated plan"
    version: str
    margin_text: str  # how margins were applied, said once
    # devices shared now: (key, "mps" | "time-slicing", most instances there at once)
    sharing: tuple[tuple[str, str, int], ...] = ()

    def workload(self, name: str) -> Workload | None:
        return next((w for w in self.workloads if w.name == name), None)

    @property
    def draft(self) -> bool:
        return self.basis.draft
