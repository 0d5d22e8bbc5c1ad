"""The stages of planner.py's integer program: constraints shared by every stage, one objective
per stage with the earlier optima held, the compute assignment at the peak moment and the
fewest-layouts tie-break. See planner.py for the model.
"""

from __future__ import annotations

import numpy as np

from exporter.errors import UserError

LAYOUT_NODE_LIMIT = 2000
SAFETY_TIME_LIMIT_SECONDS = 600.0  # a guard against a pathological input, never reached in practice


def supply(pb, sol) -> np.ndarray:
    u = np.round(sol[pb.U:pb.U + pb.Q])
    return np.array([u[pb.level_of_slot >= k].sum() for k in range(pb.K)])


def initial_rows(pb) -> set[tuple[int, int]]:
    rows = {(k, int(np.argmax(pb.A[k]))) for k in range(pb.K)}
    if pb.D:
        together = pb.demand(np.ones(pb.D))
        rows |= {(k, int(np.argmax(together[k]))) for k in range(pb.K)}
    return rows


def _base(pb, rows):
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


def _bounds(pb):
    top = float(pb.A.max() + pb.D + 1) if pb.A.size else 1.0
    upper = np.concatenate([np.full(pb.P, top), np.array(pb.current, dtype=float),
                            np.full(pb.Q, top * 8), np.ones(pb.D)])
    return np.zeros(pb.n), upper


def _objectives(pb) -> list[np.ndarray]:
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


def solve(pb, rows):
    """Stages 1-5 on the time ``rows``; (solution over the base variables, optimal, minimal, peak)."""
    base = _base(pb, rows)
    lower, upper = _bounds(pb)
    integrality = np.ones(pb.n)
    constraints = [base]
    sol, optimal = None, True
    for c in _objectives(pb):
        res = _milp(c, constraints, lower, upper, integrality)
        if res.x is None:
            # Whole GPUs hold any workload, so this is a planner bug or a solver limit, not the
            # input's fault; still one line on the command line, never a traceback.
            raise UserError(f"recommend: the planner found no layout ({res.message}); "
                            "this is a bug, please report it with the input")
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


def _peak_index(pb, g) -> int:
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


def _alive_at(pb, g, t: int) -> list[tuple]:
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


def _compute_stage(pb, constraints, lower, upper, g, peak, previous):
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


def _layout_stage(pb, constraints, lower, upper, sol):
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
