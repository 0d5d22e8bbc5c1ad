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
``layouts_minimal`` says whether it proved its optimum. The time rows are generated: the
plan is solved on the time points that bind, checked against all, and re-solved with the
violated ones added until none is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from exporter.recommend.slots import ModelSlots

LAYOUT_NODE_LIMIT = 2000
SAFETY_TIME_LIMIT_SECONDS = 600.0  # a guard against a pathological input, never reached in practice


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
    rows = _initial_rows(pb)
    while True:
        sol, optimal, minimal, peak = _solve(pb, rows)
        g = np.round(sol[pb.G:pb.G + pb.D])
        need = pb.demand(g)
        supply = _supply(pb, sol)
        violated = {(k, int(np.argmax(need[k]))) for k in range(pb.K) if need[k].max() > supply[k] + 1e-6}
        if not violated - rows:
            break
        rows |= violated
    return _materialize(pb, sol, peak, optimal, minimal, time.perf_counter() - started, len({t for _, t in rows}))


def _supply(pb: _Problem, sol) -> np.ndarray:
    u = np.round(sol[pb.U:pb.U + pb.Q])
    return np.array([u[pb.level_of_slot >= k].sum() for k in range(pb.K)])


def _initial_rows(pb: _Problem) -> set[tuple[int, int]]:
    rows = {(k, int(np.argmax(pb.A[k]))) for k in range(pb.K)}
    if pb.D:
        together = pb.demand(np.ones(pb.D))
        rows |= {(k, int(np.argmax(together[k]))) for k in range(pb.K)}
    return rows


def _base(pb: _Problem, rows):
    """Constraints every stage shares: slot capacity, level rows, keeps within layouts."""
    from scipy.optimize import LinearConstraint
    from scipy.sparse import lil_matrix

    rows = sorted(rows)
    nrows = pb.Q + len(rows) + pb.P
    a = lil_matrix((nrows, pb.n))
    lo, hi = np.full(nrows, -np.inf), np.zeros(nrows)
    for q in range(pb.Q):  # u[q] - sum_L count(L,q) y[L] <= 0
        a[q, pb.U + q] = 1
        for li, pat in enumerate(pb.pats):
            if pat[q]:
                a[q, pb.Y + li] = -pat[q]
    for r, (k, t) in enumerate(rows):  # sum_{q >= k} u[q] - sum_d delta[d,k,t] g[d] >= A[k,t]
        i = pb.Q + r
        for q in np.flatnonzero(pb.level_of_slot >= k):
            a[i, pb.U + q] = 1
        for d in range(pb.D):
            if pb.delta[d, k, t]:
                a[i, pb.G + d] = -pb.delta[d, k, t]
        lo[i], hi[i] = pb.A[k, t], np.inf
    for li in range(pb.P):  # keep[L] - y[L] <= 0
        i = pb.Q + len(rows) + li
        a[i, pb.KEEP + li], a[i, pb.Y + li] = 1, -1
    return LinearConstraint(a.tocsr(), lo, hi)


def _bounds(pb: _Problem):
    top = float(pb.A.max() + pb.D + 1) if pb.A.size else 1.0
    upper = np.concatenate([np.full(pb.P, top), np.array(pb.current, dtype=float),
                            np.full(pb.Q, top * 8), np.ones(pb.D)])
    return np.zeros(pb.n), upper


def _objectives(pb: _Problem) -> list[np.ndarray]:
    gpus = np.zeros(pb.n)
    gpus[pb.Y:pb.Y + pb.P] = 1
    keep = np.zeros(pb.n)
    keep[pb.KEEP:pb.KEEP + pb.P] = -(pb.D + 1)  # a kept layout outweighs every group kept together
    keep[pb.G:pb.G + pb.D] = -1
    stranded = np.zeros(pb.n)
    stranded[pb.Y:pb.Y + pb.P] = [pb.ms.uncovered_mib(p) for p in pb.pats]
    stranded[pb.U:pb.U + pb.Q] = pb.slot_mem
    return [gpus, keep, stranded]


def _milp(c, constraints, lower, upper, integrality, node_limit=None):
    from scipy.optimize import Bounds, milp

    options = {"time_limit": SAFETY_TIME_LIMIT_SECONDS, "mip_rel_gap": 0.0}
    if node_limit is not None:
        options["node_limit"] = node_limit
    return milp(c, constraints=constraints, integrality=integrality, bounds=Bounds(lower, upper), options=options)


def _hold(c, value):
    from scipy.optimize import LinearConstraint

    return LinearConstraint(c.reshape(1, -1), -np.inf, value + 0.5)


def _solve(pb: _Problem, rows):
    """Stages 1-5 on the time ``rows``; (solution over the base variables, optimal, minimal, peak)."""
    base = _base(pb, rows)
    lower, upper = _bounds(pb)
    integrality = np.ones(pb.n)
    constraints = [base]
    sol, optimal = None, True
    for c in _objectives(pb):
        res = _milp(c, constraints, lower, upper, integrality)
        if res.x is None:
            raise RuntimeError(f"recommend planner failed: {res.message}")
        optimal = optimal and res.status == 0
        sol = np.round(res.x)
        constraints.append(_hold(c, float(c @ sol)))
    # Groups are fixed from here: the instances alive at the peak moment are then known.
    g = sol[pb.G:pb.G + pb.D]
    lower, upper = lower.copy(), upper.copy()
    lower[pb.G:pb.G + pb.D] = upper[pb.G:pb.G + pb.D] = g
    peak = _peak_index(pb, g)
    sol, ok = _compute_stage(pb, constraints, lower, upper, g, peak, sol)
    optimal = optimal and ok
    sol, minimal = _layout_stage(pb, constraints, lower, upper, sol)
    return sol, optimal, minimal, peak


def _peak_index(pb: _Problem, g) -> int:
    """The peak moment: most planned memory alive at once (the earliest such point)."""
    need = np.zeros(pb.A.shape[1])
    kept = {grp.key for grp, v in zip(pb.groups, g) if v > 0.5}
    inside = {}
    for grp in pb.groups:
        if grp.key in kept:
            need += grp.need_mib * grp.alive
            for name, counts in grp.members.items():
                inside[name] = inside.get(name, 0) + counts
    for it in pb.items:
        need += it.need_mib * it.weight * np.maximum(0, it.counts - inside.get(it.name, 0))
    return int(np.argmax(need))


def _alive_at(pb: _Problem, g, t: int) -> list[tuple]:
    """(name, count, need level, SMs, weight, homes) of what is alive at ``t`` with groups ``g`` kept."""
    inside: dict[str, int] = {}
    out = []
    for grp, v in zip(pb.groups, g):
        if v > 0.5 and grp.alive[t]:
            out.append((f"group:{grp.key}", 1, grp.tier, 0, 1, frozenset({grp.home})))
            for name, counts in grp.members.items():
                inside[name] = inside.get(name, 0) + int(counts[t])
    for it in pb.items:
        n = int(it.counts[t]) - inside.get(it.name, 0)
        if n > 0:
            out.append((it.name, n, it.tier, it.sms, it.weight, it.homes))
    return out


def _compute_stage(pb: _Problem, constraints, lower, upper, g, peak, previous):
    """Assign what is alive at the peak moment to used slots: least shortfall, then smallest slots."""
    from scipy.optimize import LinearConstraint
    from scipy.sparse import lil_matrix

    alive = _alive_at(pb, g, peak)
    pairs = [(ci, q) for ci, item in enumerate(alive) for q in range(pb.Q) if pb.level_of_slot[q] >= item[2]]
    if not pairs:
        pb.assignment = ([], [], np.zeros(0))
        return previous, True
    n = pb.n + len(pairs)
    a = lil_matrix((len(alive) + pb.Q, n))
    lo = np.concatenate([[item[1] for item in alive], np.full(pb.Q, -np.inf)])
    hi = np.concatenate([[item[1] for item in alive], np.zeros(pb.Q)])
    for j, (ci, q) in enumerate(pairs):
        a[ci, pb.n + j] = 1
        a[len(alive) + q, pb.n + j] = alive[ci][4]  # weight: GPUs per instance
    for q in range(pb.Q):
        a[len(alive) + q, pb.U + q] = -1
    widened = [LinearConstraint(_pad(c.A, n), c.lb, c.ub) for c in constraints]
    widened.append(LinearConstraint(a.tocsr(), lo, hi))
    total = sum(item[1] for item in alive)
    objective = np.zeros(n)
    rank_top = pb.Q * total + 1  # exceeds any sum of slot ranks
    away_top = rank_top * (total + 1)  # exceeds any sum of (away from home, rank) costs
    for j, (ci, q) in enumerate(pairs):
        short = max(0, alive[ci][3] - pb.ms.slots[q].sms)
        homes = alive[ci][5]
        away = 1 if homes and pb.ms.slots[q].name not in homes else 0
        # lexicographic: compute shortfall, then a slot kind it does not run in now, then slot rank
        objective[pb.n + j] = short * away_top + away * rank_top + q
    res = _milp(objective, widened, np.concatenate([lower, np.zeros(len(pairs))]),
                np.concatenate([upper, [alive[ci][1] for ci, _ in pairs]]), np.ones(n))
    if res.x is None:
        pb.assignment = ([], [], np.zeros(0))
        return previous, False
    x = np.round(res.x)
    pb.assignment = (alive, pairs, x[pb.n:])
    pb.hold = widened + [_hold(objective, float(objective @ x))]
    pb.hold_bounds = (np.concatenate([lower, np.zeros(len(pairs))]),
                      np.concatenate([upper, [alive[ci][1] for ci, _ in pairs]]))
    return x[:pb.n], res.status == 0


def _pad(a, n):
    from scipy.sparse import csr_matrix, hstack

    a = csr_matrix(a)
    return hstack([a, csr_matrix((a.shape[0], n - a.shape[1]))]).tocsr() if a.shape[1] < n else a


def _layout_stage(pb: _Problem, constraints, lower, upper, sol):
    """Fewest distinct patterns with everything before held; the previous solution if unproven."""
    from scipy.optimize import LinearConstraint
    from scipy.sparse import hstack, identity, csr_matrix

    used = int(np.count_nonzero(sol[pb.Y:pb.Y + pb.P]))
    if used <= 1:
        return sol, True
    hold = getattr(pb, "hold", constraints)
    lo_b, hi_b = getattr(pb, "hold_bounds", (lower, upper))
    width = len(lo_b)
    n = width + pb.P
    gpus = int(sol[pb.Y:pb.Y + pb.P].sum())
    link = hstack([identity(pb.P), csr_matrix((pb.P, width - pb.P)), -gpus * identity(pb.P)]).tocsr()
    cons = [LinearConstraint(_pad(c.A, n), c.lb, c.ub) for c in hold] + [LinearConstraint(link, -np.inf, 0)]
    objective = np.zeros(n)
    objective[width:] = 1
    res = _milp(objective, cons, np.concatenate([lo_b, np.zeros(pb.P)]), np.concatenate([hi_b, np.ones(pb.P)]),
                np.ones(n), node_limit=LAYOUT_NODE_LIMIT)
    if res.x is None or float(objective @ np.round(res.x)) >= used:
        return sol, res.x is not None and res.status == 0
    x = np.round(res.x)
    if width > pb.n:
        pb.assignment = (pb.assignment[0], pb.assignment[1], x[pb.n:width])
    return x[:pb.n], res.status == 0


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
    for (ci, q), count in zip(pairs, x.astype(int)):
        name, _, _, sms, weight, _ = alive[ci]
        slot = ms.slots[q]
        need = _need_of(pb, name)
        several = alive[ci][1] > 1
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
