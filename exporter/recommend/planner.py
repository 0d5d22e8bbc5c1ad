"""Exact, deterministic planner: fewest GPUs for what is alive together, then fewest GPUs whose
layout changes, then least stranded memory, then least compute shortfall.

Formulation (per GPU model; sizes depend on slots, patterns and shared groups, never on the
number of instances or time points):

- ``y[L]`` GPUs configured with pattern L (slots.py: MIG patterns, ``full`` = MIG off, and the
  fleet's current layouts); ``u[q]`` slots of kind q in use (``u[q] <= sum_L count(L,q) y[L]``);
- demand is time-resolved: at every time point t, the instances alive whose need is at
  least level k must not outnumber the used slots of level >= k (Hall's condition for nested
  sizes, so a matching of instances to slots exists at every instant). Jobs that never ran
  at the same time share a slot;
- ``keep[L] <= min(y[L], fleet GPUs whose layout is L now)``: GPUs that keep their layout;
- ``g[d]`` (0/1) for each device several instances shared at once (MPS, time-slicing): 1
  keeps the group together in one slot of the group's summed need, 0 gives every instance its
  own slot. The level rows are linear in ``g`` (the group replaces its members' counts).

Objectives, lexicographic, each optimum held in the next stage (all integer, exact):
1. GPUs; 2. GPUs that keep their layout, then groups kept together (maximised);
3. stranded memory: memory in no slot plus memory of the slots in use;
4. with the groups fixed, compute shortfall of an assignment of the instances alive at the
   peak moment (SMs needed beyond the slot's), then the smallest slot that fits;
5. fewest distinct layouts (one mig-parted config each), within a fixed node budget.

No stage depends on a clock: every stage runs HiGHS to proven optimality; stage 5 stops
after ``LAYOUT_NODE_LIMIT`` branch-and-bound nodes (the same on every machine) and
``layouts_minimal`` says whether it proved its optimum (planner_milp.py holds the stages). The time rows are generated: the
plan is solved on the time points that bind, checked against all, and re-solved with the
violated ones added until none is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from exporter.recommend import planner_milp
from exporter.recommend.slots import ModelSlots


@dataclass(frozen=True, eq=False)
class Item:
    """A workload's instances as the planner sees them."""

    name: str
    need_mib: int
    sms: int  # SMs per instance (0 unknown)
    weight: int  # GPUs per instance (>1: larger than one GPU, MIG off, model parallel)
    tier: int  # level index of its smallest slot
    counts: np.ndarray  # instances alive per time point
    homes: frozenset = frozenset()  # slot kinds it runs in now (preferred, all else equal)


@dataclass(frozen=True, eq=False)
class Group:
    """Instances that shared one device at once and may stay together."""

    key: str
    need_mib: int
    tier: int
    alive: np.ndarray  # time points where any member ran
    members: dict[str, np.ndarray]  # item name -> its instances on this device per time point
    home: str = ""  # slot kind of the device it shares now ("full" for a whole GPU)


@dataclass(frozen=True)
class PlannedGpu:
    pattern: tuple[int, ...]
    layout: tuple[tuple[str, int], ...]  # () for MIG off
    occupants: tuple[str | None, ...]  # per slot (layout order; one for MIG off), at the peak moment
    keep: bool  # planned on a GPU that has this layout now


@dataclass(frozen=True)
class Plan:
    gpus: tuple[PlannedGpu, ...]
    kept_groups: tuple[str, ...]
    stranded_mib: int
    shortfall_sms: int
    peak_index: int  # time point of the peak moment
    optimal: bool
    layouts_minimal: bool
    solve_seconds: float
    rows: int  # time points whose rows the solution was proven on (every other one holds too)
    patterns: int
    at_once: int = 0  # most instances alive at one time


class _Problem:
    def __init__(self, ms: ModelSlots, items: list[Item], groups: list[Group], current: dict):
        self.ms, self.items, self.groups = ms, items, groups
        pats = list(ms.patterns)
        for p in current:
            if p not in pats:
                pats.append(p)
        self.pats = pats
        self.current = [current.get(p, 0) for p in pats]
        K, Q, P, D = len(ms.levels), len(ms.slots), len(pats), len(groups)
        self.K, self.Q, self.P, self.D = K, Q, P, D
        T = len(items[0].counts) if items else 1
        # A[k, t]: instances (GPU-weighted) of level >= k alive at t, every group broken up.
        self.A = np.zeros((K, T))
        for it in items:
            self.A[: it.tier + 1] += it.weight * it.counts
        # Delta[d, k, t]: change of A when group d stays together.
        by_name = {it.name: it for it in items}
        self.delta = np.zeros((D, K, T))
        for d, g in enumerate(groups):
            self.delta[d, : g.tier + 1] += g.alive
            for name, counts in g.members.items():
                it = by_name[name]
                self.delta[d, : it.tier + 1] -= it.weight * counts
        # Variable blocks.
        self.Y, self.KEEP, self.U, self.G = 0, P, 2 * P, 2 * P + Q
        self.n = 2 * P + Q + D
        self.slot_mem = np.array([s.memory_mib for s in ms.slots], dtype=float)
        self.level_of_slot = np.array([ms.levels.index(s.memory_mib) for s in ms.slots])

    def demand(self, g: np.ndarray) -> np.ndarray:
        """Level demand at every time point with groups ``g`` kept."""
        return self.A + np.tensordot(g, self.delta, axes=1) if self.D else self.A


def plan(ms: ModelSlots, items: list[Item], groups: list[Group] = (), current: dict | None = None) -> Plan:
    """Optimal plan for ``items`` (and shared ``groups``) on GPUs of ``ms.model``.

    ``current`` maps a pattern to the number of fleet GPUs with that layout now.
    """
    started = time.perf_counter()
    groups = [g for g in groups if g.members]
    if not items:
        return Plan((), (), 0, 0, 0, True, True, 0.0, 0, len(ms.patterns), 0)
    pb = _Problem(ms, items, list(groups), dict(current or {}))
    rows = planner_milp.initial_rows(pb)
    while True:
        sol, optimal, minimal, peak = planner_milp.solve(pb, rows)
        g = np.round(sol[pb.G:pb.G + pb.D])
        need = pb.demand(g)
        supply = planner_milp.supply(pb, sol)
        violated = {(k, int(np.argmax(need[k]))) for k in range(pb.K) if need[k].max() > supply[k] + 1e-6}
        if not violated - rows:
            break
        rows |= violated
    return _materialize(pb, sol, peak, optimal, minimal, time.perf_counter() - started, len({t for _, t in rows}))


def _materialize(pb: _Problem, sol, peak, optimal, minimal, seconds, nrows) -> Plan:
    ms = pb.ms
    y = sol[pb.Y:pb.Y + pb.P].astype(int)
    keep = sol[pb.KEEP:pb.KEEP + pb.P].astype(int)
    gpus: list[list] = []
    for li in sorted(range(pb.P), key=lambda i: (-y[i], i)):  # most used layout first
        for j in range(y[li]):
            pattern = pb.pats[li]
            layout = ms.layout(pattern)
            names = [name for name, _ in layout] if layout else [ms.slots[ms.full].name]
            gpus.append([pattern, layout, [None] * len(names), j < keep[li], names])
    alive, pairs, x = getattr(pb, "assignment", ([], [], np.zeros(0)))
    number: dict[str, int] = {}  # instances of a workload are numbered across the slots they take
    free: dict[str, list[tuple[int, int]]] = {}
    for gi, (_, _, _, _, names) in enumerate(gpus):
        for si, name in enumerate(names):
            free.setdefault(name, []).append((gi, si))
    stranded = sum(ms.uncovered_mib(g[0]) for g in gpus)
    shortfall = 0
    # "name #k" whenever the workload ever has several instances at once, as the MPS advice numbers them
    most = {it.name: int(np.max(it.counts)) for it in pb.items}
    for (ci, q), count in zip(pairs, x.astype(int)):
        name, _, _, sms, weight, _ = alive[ci]
        slot = ms.slots[q]
        need = _need_of(pb, name)
        several = max(alive[ci][1], most.get(name, 0)) > 1
        for _ in range(count):
            number[name] = number.get(name, 0) + 1
            for part in range(weight):
                gi, si = free[slot.name].pop(0)
                label = f"{name} #{number[name]}" if several else name
                gpus[gi][2][si] = label if weight == 1 else f"{label} ({part + 1} of {weight} GPUs)"
            stranded += max(0, slot.memory_mib * weight - need)
            shortfall += max(0, sms - slot.sms)
    kept = tuple(grp.key for grp, v in zip(pb.groups, sol[pb.G:pb.G + pb.D]) if v > 0.5)
    return Plan(
        gpus=tuple(PlannedGpu(p, lay, tuple(occ), bool(k)) for p, lay, occ, k, _ in gpus),
        kept_groups=kept, stranded_mib=int(stranded), shortfall_sms=int(shortfall), peak_index=peak,
        optimal=optimal, layouts_minimal=minimal, solve_seconds=seconds, rows=nrows, patterns=pb.P,
        at_once=int(np.sum([it.counts for it in pb.items], axis=0).max()))


def _need_of(pb: _Problem, name: str) -> int:
    if name.startswith("group:"):
        return next(g.need_mib for g in pb.groups if f"group:{g.key}" == name)
    return next(it.need_mib for it in pb.items if it.name == name)
