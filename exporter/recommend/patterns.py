"""Layout patterns: the distinct multisets of MIG profiles one GPU of a model can hold.

The planner only needs *how many* instances of each profile a GPU holds, not where they
sit, so valid layouts (from exporter.catalog, which owns the placement rules) collapse into
patterns, and a pattern that another pattern contains is dropped: a GPU may leave an
instance unused, so the larger pattern is never worse. The H100 has 78 maximal layouts but
only a few dozen undominated patterns, whatever the number of workloads.

Media-extension profiles (``+me``) are left out: they differ from their plain twin only in
media engines, which no demand input measures.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from exporter import catalog
from exporter.catalog import GpuModel, MigProfile

Placement = tuple[str, int]


@dataclass(frozen=True)
class ModelPatterns:
    model: GpuModel
    profiles: tuple[MigProfile, ...]  # planning profiles, by (memory, compute slices)
    patterns: tuple[tuple[int, ...], ...]  # instance count per profile, same order
    layouts: tuple[tuple[Placement, ...], ...]  # one concrete valid layout per pattern
    full_memory_mib: int  # memory of the largest profile: what a fully covered GPU offers

    def uncovered_mib(self, pattern_index: int) -> int:
        """MiB a GPU with this pattern leaves in no instance (stranded by the layout itself)."""
        pattern = self.patterns[pattern_index]
        return self.full_memory_mib - sum(n * p.memory_mib for n, p in zip(pattern, self.profiles))

    def index_of(self, name: str) -> int:
        return next(i for i, p in enumerate(self.profiles) if p.name == name)


def planning_profiles(model: GpuModel) -> tuple[MigProfile, ...]:
    """Profiles the planner may use on ``model``, smallest first (memory, then slices)."""
    return tuple(
        sorted(
            (p for p in model.mig_profiles if not p.media_extensions),
            key=lambda p: (p.memory_mib, p.slice_count, p.name),
        )
    )


def pattern_of(profiles: tuple[MigProfile, ...], layout) -> tuple[int, ...]:
    """Instance counts per planning profile of a concrete layout."""
    counts = Counter(name for name, _ in layout)
    return tuple(counts.get(p.name, 0) for p in profiles)


def model_patterns(key: str) -> ModelPatterns:
    """Undominated patterns of the MIG-capable model ``key`` (cached: enumeration costs ~50 ms),
    with the MIG sizes catalog.MODELS holds now (recommend --driver)."""
    return _model_patterns(key, catalog.MODELS[key].driver_branch)


@lru_cache(maxsize=None)
def _model_patterns(key: str, branch: int | None) -> ModelPatterns:  # branch: part of the cache key
    model = catalog.MODELS[key]
    profiles = planning_profiles(model)
    plain = dataclasses.replace(model, mig_profiles=profiles)
    layouts = catalog.enumerate_layouts(plain, maximal_only=True)
    first_layout: dict[tuple[int, ...], tuple[Placement, ...]] = {}
    for layout in layouts:
        first_layout.setdefault(pattern_of(profiles, layout), layout)
    patterns = list(first_layout)
    kept = [
        p for p in patterns
        if not any(q != p and all(a >= b for a, b in zip(q, p)) for q in patterns)
    ]
    # Order: most instances first, so ties in the solver land on dense layouts.
    kept.sort(key=lambda p: (-sum(p), p))
    return ModelPatterns(
        model=model,
        profiles=profiles,
        patterns=tuple(kept),
        layouts=tuple(first_layout[p] for p in kept),
        full_memory_mib=max(p.memory_mib for p in profiles),
    )


def layout_for_pattern(mp: ModelPatterns, pattern: tuple[int, ...]) -> tuple[Placement, ...]:
    """A concrete valid layout with exactly these counts (any pattern, dominated or not)."""
    for i, p in enumerate(mp.patterns):
        if p == pattern:
            return mp.layouts[i]
    # A sub-pattern: drop surplus instances from a containing layout.
    for i, p in enumerate(mp.patterns):
        if all(a >= b for a, b in zip(p, pattern)):
            left = dict(zip((x.name for x in mp.profiles), pattern))
            kept = []
            for name, start in mp.layouts[i]:
                if left.get(name, 0) > 0:
                    kept.append((name, start))
                    left[name] -= 1
            return tuple(kept)
    raise ValueError(f"no valid {mp.model.key} layout holds {pattern}")


def config_name(mp: ModelPatterns, pattern: tuple[int, ...]) -> str:
    """mig-parted style name: all-<profile> for one profile, else <n>x<profile>-... ."""
    used = [(n, p.name) for n, p in zip(pattern, mp.profiles) if n]
    if len(used) == 1 and used[0][0] == _alone_capacity(mp.model.key, used[0][1]):
        return f"all-{used[0][1]}"
    return "custom-" + "-".join(f"{n}x{name}" for n, name in sorted(used, key=lambda u: u[1]))


@lru_cache(maxsize=None)
def _alone_capacity(key: str, profile: str) -> int:
    """How many ``profile`` instances fit on an empty GPU of model ``key``."""
    return catalog.remaining_capacity(catalog.MODELS[key], [], profile)
