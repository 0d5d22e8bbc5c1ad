"""What `recommend` answers, as frozen data every output format renders."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.recommend.baselines import Baseline
from exporter.recommend.demand import Workload
from exporter.recommend.mps import MpsAdvice


@dataclass(frozen=True)
class InstancePlan:
    profile: str  # "3g.40gb"; "full" on a GPU with MIG off
    start: int  # first memory slice
    memory_slices: int
    compute_slices: int  # the "3" of 3g; 7 (or the model's count) for a whole GPU
    memory_bytes: int
    sms: int
    workload: str | None  # None: a free instance, spare capacity
    need_bytes: int | None = None  # the workload's peak + margin
    shortfall_sms: int = 0  # SMs the workload used beyond what this instance has


@dataclass(frozen=True)
class GpuPlan:
    model: str
    node: str  # existing node, or "new" for a GPU to add
    index: int | None  # existing GPU index; None for a GPU to add
    config: str  # mig-parted config name: "all-1g.20gb", "custom-...", "all-disabled"
    mig_enabled: bool
    instances: tuple[InstancePlan, ...]
    change: str  # keep | reconfigure | new | release
    stranded_bytes: int  # in no instance, or in an instance above its workload's need
    note: str = ""  # e.g. "dedicated: 1 of 2 GPUs for llama-70b (model parallel)"
    current: str = ""  # current layout, for reconfigure


@dataclass(frozen=True)
class ModelPlan:
    model: str
    workloads: tuple[str, ...]
    gpus_needed: int  # the optimum (MIG GPUs) plus dedicated GPUs
    dedicated_gpus: int
    available_gpus: int  # GPUs of this model in the fleet (0 for a plan without fleet)
    optimal: bool
    layouts_minimal: bool
    stranded_bytes: int
    shortfall_sms: int
    homogeneous: Baseline  # best single configuration, dedicated GPUs included
    homogeneous_tried: tuple[Baseline, ...]
    greedy: Baseline  # dedicated GPUs included
    mps: tuple[MpsAdvice, ...]  # the MPS alternative, one per GPU
    gpus: tuple[GpuPlan, ...]
    solve_seconds: float
    classes: int
    patterns: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Recommendation:
    plans: tuple[ModelPlan, ...]
    shared_now: tuple[MpsAdvice, ...]  # devices several workloads share today
    workloads: tuple[Workload, ...]
    sources: tuple[str, ...]
    notes: tuple[str, ...]

    def workload(self, name: str) -> Workload | None:
        return next((w for w in self.workloads if w.name == name), None)
