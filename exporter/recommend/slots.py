"""What one GPU of a model can offer the planner: slots (MIG profiles, or the whole GPU) and
the patterns of slots one GPU holds.

A *slot* holds one instance of a workload at a time (or one group of instances that share a
device as they run now, see planner.py). Slots are the model's MIG planning profiles
(patterns.py) plus ``full``: the GPU with MIG off, which holds anything up to the GPU's usable
memory, and, several together, a workload larger than one GPU. A *level* is a distinct slot
memory size; an instance of a workload fits every slot of its level and above.

Patterns: the undominated MIG patterns (but a lone 7g: MIG off holds the same workloads
without MIG's constraints), the ``full`` pattern (MIG off), and the current layout of every fleet GPU (so a GPU can
keep a layout that is not undominated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from exporter import catalog
from exporter.catalog import MIB, GpuModel
from exporter.recommend.patterns import layout_for_pattern, model_patterns, pattern_of

FULL = "full"


@dataclass(frozen=True)
class Slot:
    name: str  # MIG profile, or "full"
    memory_mib: int
    sms: int
    compute_slices: int
    memory_slices: int


@dataclass(frozen=True)
class ModelSlots:
    model: GpuModel
    slots: tuple[Slot, ...]  # MIG planning profiles (smallest first), then full
    patterns: tuple[tuple[int, ...], ...]  # slot counts per GPU, in ``slots`` order
    levels: tuple[int, ...]  # distinct slot memory sizes (MiB), ascending

    @property
    def full(self) -> int:
        """Index of the whole-GPU slot."""
        return len(self.slots) - 1

    def tier(self, need_mib: int) -> int:
        """Level index of the smallest slot that holds ``need_mib`` (the top level when none does)."""
        for k, level in enumerate(self.levels):
            if need_mib <= level:
                return k
        return len(self.levels) - 1

    def gpus_per_instance(self, need_bytes: int) -> int:
        """Whole GPUs one instance needs: 1, or more for a model larger than one GPU."""
        return max(1, math.ceil(need_bytes / self.model.memory_capacity_bytes))

    def uncovered_mib(self, pattern: tuple[int, ...]) -> int:
        """Memory of the GPU in no slot of the pattern."""
        capacity = self.model.memory_capacity_bytes // MIB
        return max(0, capacity - sum(n * s.memory_mib for n, s in zip(pattern, self.slots)))

    def layout(self, pattern: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
        """Concrete (profile, start) placements of a MIG pattern; () for the full pattern."""
        if pattern[self.full]:
            return ()
        mp = model_patterns(self.model.key)
        return layout_for_pattern(mp, pattern[:-1])

    def name(self, pattern: tuple[int, ...]) -> str:
        """mig-parted style config name of a pattern."""
        from exporter.recommend.patterns import config_name

        if pattern[self.full]:
            return "all-disabled"
        return config_name(model_patterns(self.model.key), pattern[:-1])

    def current_pattern(self, layout) -> tuple[int, ...] | None:
        """The pattern of a fleet GPU's current layout (None: MIG on with no instance, or unknown)."""
        if layout is None:
            return tuple(1 if i == self.full else 0 for i in range(len(self.slots)))
        if not layout or not self.model.mig_capable:
            return None
        plain = tuple((p.removesuffix("+me"), s) for p, s in layout)
        mp = model_patterns(self.model.key)
        counts = pattern_of(mp.profiles, plain)
        if sum(counts) != len(plain):
            return None  # a profile the planner does not know
        return (*counts, 0)


def model_slots(key: str) -> ModelSlots:
    """Slots of model ``key`` with the MIG sizes catalog.MODELS holds now (recommend --driver)."""
    return _model_slots(key, catalog.MODELS[key].driver_branch)


@lru_cache(maxsize=None)
def _model_slots(key: str, branch: int | None) -> ModelSlots:  # branch: part of the cache key
    model = catalog.MODELS[key]
    whole = Slot(FULL, model.memory_capacity_bytes // MIB, model.sm_count,
                 model.compute_slices or 1, model.memory_slices or 1)
    if not model.mig_capable:
        return ModelSlots(model, (whole,), ((1,),), (whole.memory_mib,))
    mp = model_patterns(key)
    slots = tuple(Slot(p.name, p.memory_mib, p.sm_count, p.slice_count, p.memory_slices) for p in mp.profiles)
    # A lone full-size instance (7g) is MIG off with MIG's constraints: new GPUs take MIG off
    # instead; a GPU configured so today may still keep it (current layouts are added by the
    # planner). Its memorySizeMB can exceed MIG off's total minus reserved (81152 vs 81079 MiB on
    # an H100 80GB on R580: 0.1 %), not enough to plan MIG for.
    whole_size = max(p.memory_slices for p in mp.profiles)
    patterns = tuple((*p, 0) for p in mp.patterns
                     if not (sum(p) == 1 and mp.profiles[p.index(1)].memory_slices == whole_size))
    patterns += ((*(0,) * len(slots), 1),)
    levels = tuple(sorted({s.memory_mib for s in (*slots, whole)}))
    return ModelSlots(model, (*slots, whole), patterns, levels)
