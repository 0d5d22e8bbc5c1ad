"""Exact MIG planner: fewest GPUs, then least stranded memory, then least compute shortfall.

Formulation (a pattern model, so its size depends on workload *classes* and profiles, never
on the number of workloads):

- a class is the set of workloads with the same smallest fitting memory and the same SM
  need (whole SMs); workloads in a class are interchangeable for every objective;
- ``y[L]`` = GPUs configured with pattern L (see patterns.py), ``x[c,p]`` = workloads of
  class c placed in instances of profile p (only where p's memory holds c's peak + margin);
- every workload gets one instance: sum_p x[c,p] = n_c;
- instances of p used <= instances of p configured: sum_c x[c,p] <= sum_L count(L,p) y[L].

Objectives, solved one after another with the earlier optima fixed (lexicographic, exact
because each objective is an integer):
1. GPUs: sum_L y[L];
2. stranded memory (MiB): memory of the GPUs in no instance plus memory of assigned
   instances above their workload's need. Free instances are *not* stranded: they are
   spare capacity a future workload can take;
3. compute shortfall (SMs): sum over workloads of max(0, SM need - SMs of its profile);
4. fewest distinct layouts (one mig-parted config per layout), then the smallest profile
   that fits each workload (Run:ai's rule, seed 003), as tie-breakers.

scipy.optimize.milp (HiGHS) solves each stage; mip_rel_gap=0 makes the result an optimum.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from exporter.recommend.demand import Workload
from exporter.recommend.patterns import ModelPatterns, Placement, layout_for_pattern

STAGE_TIME_LIMIT_SECONDS = 20.0
# The distinct-layouts tie-breaker is a convenience (fewer mig-parted configs), not part of
# the optimum: its search stops here and keeps the best grouping found.
TIDY_TIME_LIMIT_SECONDS = 0.05


@dataclass(frozen=True)
class PlannedGpu:
    layout: tuple[Placement, ...]  # valid for the model
    workloads: tuple[str | None, ...]  # per instance, None = free instance
    pattern: tuple[int, ...]


@dataclass(frozen=True)
class MigSolution:
    gpus: tuple[PlannedGpu, ...]
    stranded_mib: int
    shortfall_sms: int
    optimal: bool  # GPUs, stranded memory and shortfall proven optimal (no time limit hit)
    layouts_minimal: bool  # the number of distinct layouts is proven minimal too
    solve_seconds: float
    classes: int  # problem size, for the report
    patterns: int


def fits(mp: ModelPatterns, w: Workload) -> bool:
    """True when ``w`` fits the largest planning profile of the model."""
    return w.memory_need_mib <= mp.full_memory_mib


def _classes(mp: ModelPatterns, workloads: list[Workload]):
    classes: dict[tuple[int, int], list[Workload]] = defaultdict(list)
    for w in workloads:
        tier = min(p.memory_mib for p in mp.profiles if p.memory_mib >= w.memory_need_mib)
        classes[(tier, w.sms_on(mp.model))].append(w)
    return classes


def plan_mig(mp: ModelPatterns, workloads: list[Workload]) -> MigSolution:
    """Optimal GPUs, layouts and placement for ``workloads`` (each must fit a profile)."""
    from scipy.optimize import LinearConstraint

    started = time.perf_counter()
    if not workloads:
        return MigSolution((), 0, 0, True, True, 0.0, 0, len(mp.patterns))
    if any(not fits(mp, w) for w in workloads):
        raise ValueError("plan_mig: a workload fits no profile; route it to a dedicated GPU first")
    classes = _classes(mp, workloads)
    keys = list(classes)
    model = _Model(mp, keys, [len(classes[k]) for k in keys])

    objectives = model.objectives()
    # Stages 1 and 2 depend on memory only: solve them on classes merged by memory tier (a
    # handful), then hold their optima in the full model for the compute stage.
    tiers: dict[tuple[int, int], int] = defaultdict(int)
    for (tier, _), members in classes.items():
        tiers[(tier, 0)] += len(members)
    coarse = _Model(mp, list(tiers), list(tiers.values()))
    optimal = True
    values: list[int] = []
    constraints = [coarse.base]
    # Each optimum is held (+0.5: objectives are integers) in the stages after it.
    for c in coarse.objectives()[:2]:
        sol, ok = coarse.solve(c, constraints)
        optimal = optimal and ok
        values.append(int(round(float(c @ sol))))
        constraints = [*constraints, LinearConstraint(c.reshape(1, -1), -np.inf, values[-1] + 0.5)]
    constraints = [model.base, *(LinearConstraint(c.reshape(1, -1), -np.inf, v + 0.5)
                                 for c, v in zip(objectives[:2], values))]
    sol, ok = model.solve(objectives[2], constraints)
    optimal = optimal and ok
    values.append(int(round(float(objectives[2] @ sol))))
    constraints.append(LinearConstraint(objectives[2].reshape(1, -1), -np.inf, values[-1] + 0.5))
    # Stage 4 keeps the instance usage u (hence placements and shortfall) of stage 3 and only
    # regroups instances into as few distinct layouts as the fixed GPU count allows.
    budget = values[1] - float(objectives[1][model.U:model.X] @ sol[model.U:model.X])
    layouts, minimal = model.solve(
        objectives[3], [*constraints[:3], model.link(values[0], budget + 0.5)],
        hold_usage=sol, time_limit=TIDY_TIME_LIMIT_SECONDS, required=False)
    if layouts is None:  # nothing better found in time: keep stage 3's layouts
        layouts, minimal = sol, False
    sol = np.round(np.concatenate([layouts[:model.U], sol[model.U:]])).astype(int)
    if not model.placements_valid(sol):  # x was not a vertex (should not happen): with the
        # layouts and usage held, the placement alone is a transportation problem, integral at
        # its optimum, which reaches the same shortfall.
        fixed, ok = model.solve(objectives[2], [model.base], hold_usage=sol, hold_layouts=True, integral=True)
        sol = np.round(fixed).astype(int)

    planned = _materialize(mp, sol, model, keys, classes)
    need_mib = sum(w.memory_need_mib for w in workloads)
    return MigSolution(
        gpus=planned,
        stranded_mib=values[1] - need_mib,
        shortfall_sms=int(round(float(model.shortfall @ sol))),
        optimal=optimal,
        layouts_minimal=minimal,
        solve_seconds=time.perf_counter() - started,
        classes=len(keys),
        patterns=len(mp.patterns),
    )


class _Model:
    """Variables: y[L] GPUs per pattern, z[L] pattern used, u[p] instances of p used (all
    integer), x[c,p] placements (continuous: for integer u the placement constraints are a
    bipartite flow, whose vertices are integral)."""

    def __init__(self, mp: ModelPatterns, keys, sizes):
        from scipy.optimize import LinearConstraint
        from scipy.sparse import coo_matrix

        self.mp, self.keys, self.sizes = mp, keys, sizes
        profiles = mp.profiles
        P, R, C = len(mp.patterns), len(profiles), len(keys)
        self.pairs = [(ci, pi) for ci, (tier, _) in enumerate(keys)
                      for pi, p in enumerate(profiles) if p.memory_mib >= tier]
        K = len(self.pairs)
        self.Y, self.Z, self.U, self.X = 0, P, 2 * P, 2 * P + R
        self.n = 2 * P + R + K
        total = sum(sizes)
        rows, cols, vals = [], [], []

        def put(r, c, v):
            rows.append(r), cols.append(c), vals.append(v)

        for k, (ci, pi) in enumerate(self.pairs):
            put(ci, self.X + k, 1)  # class rows: each workload placed once
            put(C + pi, self.X + k, 1)  # profile rows: placements of p == u[p]
        for pi in range(R):
            put(C + pi, self.U + pi, -1)
            put(C + R + pi, self.U + pi, 1)  # capacity rows: u[p] <= configured p
            for li, pattern in enumerate(mp.patterns):
                if pattern[pi]:
                    put(C + R + pi, self.Y + li, -pattern[pi])
        a = coo_matrix((vals, (rows, cols)), shape=(C + 2 * R, self.n)).tocsr()
        lo = np.concatenate([sizes, np.zeros(R), np.full(R, -np.inf)])
        hi = np.concatenate([sizes, np.zeros(R), np.zeros(R)])
        self.base = LinearConstraint(a, lo, hi)
        self.upper = np.concatenate([
            np.full(P, total), np.ones(P), np.full(R, total),
            [sizes[ci] for ci, _ in self.pairs],
        ])
        self.integrality = np.concatenate([np.ones(2 * P + R), np.zeros(K)])
        self._objectives = None

    def objectives(self) -> list[np.ndarray]:
        if self._objectives is not None:
            return self._objectives
        mp, P, R = self.mp, len(self.mp.patterns), len(self.mp.profiles)
        gpus = np.zeros(self.n)
        gpus[self.Y:self.Y + P] = 1
        stranded = np.zeros(self.n)
        stranded[self.Y:self.Y + P] = [mp.uncovered_mib(li) for li in range(P)]
        stranded[self.U:self.U + R] = [p.memory_mib for p in mp.profiles]
        shortfall = np.zeros(self.n)
        for k, (ci, pi) in enumerate(self.pairs):
            shortfall[self.X + k] = max(0, self.keys[ci][1] - mp.profiles[pi].sm_count)
        # Shortfall first, then the rank of the profiles used (smallest that fits first); the
        # weight exceeds any sum of ranks, so the weighted sum is exactly lexicographic.
        ranked = shortfall * ((R - 1) * sum(self.sizes) + 1)
        ranked[self.U:self.U + R] = np.arange(R)
        layouts = np.zeros(self.n)
        layouts[self.Z:self.Z + P] = 1
        self.shortfall = shortfall
        self._objectives = [gpus, stranded, ranked, layouts]
        return self._objectives

    def link(self, gpus: int, uncovered_budget: float):
        """Rows y[L] <= M[L] * z[L]: z[L] is 1 when pattern L is used.

        M[L] is the most GPUs pattern L can take: the GPU count, and no more GPUs than the
        stranded-memory budget allows for a pattern that leaves memory uncovered (a tighter
        M makes the relaxation stronger and the search much shorter).
        """
        from scipy.optimize import LinearConstraint
        from scipy.sparse import diags, hstack, identity

        P = len(self.mp.patterns)
        bigm = np.array([
            min(gpus, int(uncovered_budget // u)) if (u := self.mp.uncovered_mib(li)) > 0 else gpus
            for li in range(P)
        ], dtype=float)
        a = hstack([identity(P), diags(-bigm), np.zeros((P, self.n - 2 * P))]).tocsr()
        return LinearConstraint(a, -np.inf, 0)

    def placements_valid(self, sol) -> bool:
        """True when the rounded x places every class exactly and uses exactly u."""
        a = self.base.A
        return bool(np.all(np.abs(a @ sol - np.clip(a @ sol, self.base.lb, self.base.ub)) < 1e-6))

    def solve(self, c, constraints, hold_usage=None, hold_layouts=False, integral=False,
              time_limit=STAGE_TIME_LIMIT_SECONDS, required=True):
        """Optimal vector for objective c; with ``hold_usage``, u (and with ``hold_layouts``
        y and z too) is held at hold_usage's values."""
        from scipy.optimize import Bounds, milp

        lower = np.zeros(self.n)
        upper = self.upper.copy()
        integrality = np.ones(self.n) if integral else self.integrality
        if hold_usage is not None:
            held = slice(0 if hold_layouts else self.U, self.X)
            lower[held] = upper[held] = np.round(hold_usage[held])
        result = milp(c, constraints=constraints, integrality=integrality,
                      bounds=Bounds(lower, upper),
                      options={"time_limit": time_limit, "mip_rel_gap": 0.0})
        if result.x is None:
            if not required:
                return None, False
            raise RuntimeError(f"MIG planner failed: {result.message}")
        return np.asarray(result.x), result.status == 0


def _materialize(mp, sol, model: _Model, keys, classes) -> tuple[PlannedGpu, ...]:
    """GPUs with concrete layouts and one workload name per assigned instance."""
    n_pat, pairs = len(mp.patterns), model.pairs
    layouts: list[tuple[tuple[int, ...], tuple[Placement, ...]]] = []
    for li in sorted(range(n_pat), key=lambda i: -sol[i]):  # most used layout first
        for _ in range(sol[li]):
            layouts.append((mp.patterns[li], layout_for_pattern(mp, mp.patterns[li])))
    slots: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for gi, (_, layout) in enumerate(layouts):
        for ii, (name, _) in enumerate(layout):
            slots[name].append((gi, ii))
    names: list[list[str | None]] = [[None] * len(layout) for _, layout in layouts]
    queues = {key: iter(members) for key, members in classes.items()}
    taken = defaultdict(int)
    for k, (ci, pi) in enumerate(pairs):
        count = sol[model.X + k]
        profile = mp.profiles[pi].name
        for _ in range(count):
            gi, ii = slots[profile][taken[profile]]
            taken[profile] += 1
            names[gi][ii] = next(queues[keys[ci]]).name
    return tuple(
        PlannedGpu(layout=layout, workloads=tuple(n), pattern=pattern)
        for (pattern, layout), n in zip(layouts, names)
    )
