"""Baselines reported beside the optimum: one configuration for every GPU, and greedy first-fit.

- Homogeneous: the configurations OCI ships for H100 (seed 004): ``all-<profile>`` for each
  profile, packed as densely as the placement rules allow, plus ``all-balanced`` (two of the
  smallest 1g, one 2g, one 3g). Every MIG GPU of the model gets the same one, as a node pool
  does; workloads larger than its biggest instance get whole GPUs with MIG off (a second
  pool), counted in. Time-resolved like the optimum: at every time point the instances alive
  must fit (Hall's condition on the nested memory levels). The best is the one needing the
  fewest GPUs in all.
- Greedy first-fit: every workload's peak concurrency in the order given, each instance into
  the smallest profile that fits it (seed 003's rule), on the first GPU with a free start for
  it, else on a new GPU: what a static allocation without planning does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from exporter import catalog
from exporter.recommend.patterns import ModelPatterns, _alone_capacity


@dataclass(frozen=True)
class Baseline:
    name: str  # "all-1g.20gb", "all-balanced", "greedy first-fit"
    gpus: int | None  # None when some workload fits none of its instances
    reason: str = ""  # why infeasible, or what it leaves unused


@dataclass(frozen=True, eq=False)
class Need:
    """A workload as the baselines see it: per-instance MiB, GPUs per instance, alive counts."""

    name: str
    mib: int
    weight: int
    counts: np.ndarray


def homogeneous_configs(mp: ModelPatterns) -> list[tuple[str, dict[str, int]]]:
    """(name, {profile: count}) for every OCI-style single configuration of the model."""
    configs = [(f"all-{p.name}", {p.name: _alone_capacity(mp.model.key, p.name)})
               for p in mp.profiles]
    by_slices: dict[int, str] = {}
    for p in mp.profiles:  # smallest-memory profile of each compute size
        by_slices.setdefault(p.slice_count, p.name)
    if all(k in by_slices for k in (1, 2, 3)):
        balanced = {by_slices[1]: 2, by_slices[2]: 1, by_slices[3]: 1}
        placed = []
        for name, count in balanced.items():
            for _ in range(count):
                start = catalog.first_free_start(mp.model, placed, name)
                if start is None:
                    break
                placed.append((name, start))
        if len(placed) == 4:
            configs.append(("all-balanced", balanced))
    return configs


def gpus_for_config(mp: ModelPatterns, config: dict[str, int], needs: list[Need]) -> int | None:
    """Fewest GPUs, all configured as ``config``, that hold what is alive at every time point.

    A workload fits every instance with at least its memory, so the sets are nested and Hall's
    condition reduces to one check per memory level and time point: the instances that need at
    least that level must not outnumber the instances that offer it.
    """
    if not needs:
        return 0
    sizes = {p.name: p.memory_mib for p in mp.profiles}
    levels = sorted({sizes[name] for name in config})
    if max(n.mib for n in needs) > levels[-1]:
        return None
    level_of = np.searchsorted(levels, [n.mib for n in needs])
    gpus = 0
    for k, level in enumerate(levels):
        alive = sum((n.counts for n, lv in zip(needs, level_of) if lv >= k), np.zeros(1))
        supply = sum(count for name, count in config.items() if sizes[name] >= level)
        if np.max(alive) > 0:
            gpus = max(gpus, math.ceil(float(np.max(alive)) / supply))
    return gpus


def best_homogeneous(mp: ModelPatterns, needs: list[Need], whole: np.ndarray | None = None
                     ) -> tuple[Baseline, list[Baseline]]:
    """The single configuration needing the fewest GPUs, and every one tried.

    ``whole``: GPUs in use per time point by workloads that need MIG off whatever the config.
    """
    tried = []
    sizes = {p.name: p.memory_mib for p in mp.profiles}
    base = 0 if whole is None or not whole.size else int(whole.max())
    for name, config in homogeneous_configs(mp):
        largest = max(sizes[p] for p in config)
        inside = [n for n in needs if n.mib <= largest and n.weight == 1]
        ids = {id(n) for n in inside}
        outside = sum((n.counts * n.weight for n in needs if id(n) not in ids), np.zeros(1))
        extra = int(np.max(outside + (whole if whole is not None and whole.size else 0)))
        gpus = gpus_for_config(mp, config, inside) + extra
        reason = f"+{extra} whole GPUs (MIG off) for workloads larger than its instances" if extra > base else ""
        tried.append(Baseline(name, gpus, reason))
    if not tried:
        return Baseline("homogeneous", None, "no MIG configuration"), tried
    return min(tried, key=lambda b: b.gpus), tried


def greedy_first_fit(mp: ModelPatterns, needs: list[Need]) -> tuple[Baseline, list[list]]:
    """First-fit of every instance at peak concurrency, in input order; the baseline and its layouts."""
    gpus: list[list[tuple[str, int]]] = []
    whole = 0
    # A GPU that cannot take a profile now never can (layouts only grow), so each profile
    # keeps the index of the first GPU that still might: first-fit in linear time.
    first_open: dict[str, int] = {}
    for n in needs:
        count = int(n.counts.max(initial=0))
        profile = next((p for p in mp.profiles if p.memory_mib >= n.mib), None)
        if profile is None or n.weight > 1:
            whole += n.weight * count  # MIG off: whole GPUs
            continue
        for _ in range(count):
            i = first_open.get(profile.name, 0)
            while i < len(gpus):
                start = _first_free_start(mp.model.key, tuple(sorted(gpus[i])), profile.name)
                if start is not None:
                    gpus[i].append((profile.name, start))
                    break
                i += 1
            else:
                gpus.append([(profile.name, catalog.first_free_start(mp.model, [], profile.name))])
            first_open[profile.name] = i
    return Baseline("greedy first-fit", len(gpus) + whole), gpus


@lru_cache(maxsize=65536)
def _first_free_start(key: str, taken: tuple, profile: str) -> int | None:
    """catalog.first_free_start, memoised: a fleet repeats the same partial layouts."""
    return catalog.first_free_start(catalog.MODELS[key], taken, profile)
