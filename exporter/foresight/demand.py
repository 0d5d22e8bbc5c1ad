"""Demand over future time: the sum of several processes' expected memory curves at every
moment one of them changes (exporter.foresight.forecast reads peak demand and contention from it).

A curve is ``(steps, end)``: steps ``((tau, bytes), ...)`` from tau 0, ``end`` the tau it drops
to 0, or None. Split from exporter.foresight.forecast (issue 22, sixth pass) with the way of
adding curves up by their changes, which keeps the module sizes in bounds.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from operator import itemgetter
from typing import Sequence

HORIZON_SECONDS = 6 * 3600.0  # ignore anything predicted further ahead

# A curve is (steps, end): steps ((tau, bytes), ...) from tau 0, end = tau it drops to 0 or None.
Curve = tuple[tuple[tuple[float, int], ...], float | None]


def curve_value(curve: Curve, tau: float) -> int:
    """Value of a curve at tau seconds from now (bytes)."""
    steps, end = curve
    if end is not None and tau >= end:
        return 0
    value = 0
    for start, v in steps:
        if start > tau:
            break
        value = v
    return value


def demand_profile(curves: Sequence[Curve], other_bytes: int = 0) -> list[tuple[float, int]]:
    """(tau, total expected bytes) at every moment any curve changes, within the horizon."""
    moments = {0.0}
    for steps, end in curves:
        moments.update(map(_start, steps))
        if end is not None:
            moments.add(end)
    taus = [tau for tau in sorted(moments) if 0.0 <= tau <= HORIZON_SECONDS]
    if taus != sorted(taus):  # a NaN among the moments upsets sorted() (taus hold no NaN: in C)
        return _demand_at(curves, other_bytes, taus)
    # Each curve adds, at the first moment each of its steps counts from, the change it makes
    # to the curve's value, and takes its value away where it ends; the totals are the running
    # sums of those changes (in C). Each curve costs its steps, not the moments (a node's
    # memory domain: ~20 curves, ~70 moments). The sweep below counts a step from the first
    # moment that is not before its start, once the steps before it count: here the larger of
    # bisect_left(taus, start) and where the step before counted from (a NaN start counts at
    # once). Exact for int bytes; anything else goes the sweep's way.
    count = len(taus)
    changes = [0] * (count + 1)
    index = dict(zip(taus, range(count)))  # a start that is a moment within the horizon: its place
    for steps, end in curves:
        stop = count if end is None or end != end else bisect_left(taus, end)  # 0 from here on
        at, value = 0, 0
        for start, new in steps:
            place = index.get(start)
            if place is None:  # before 0, past the horizon, or NaN (counts at once)
                place = bisect_left(taus, start) if start == start else at
            if place > at:
                at = place
            if at >= stop:
                break
            if type(new) is not int:
                return _sweep(curves, other_bytes, taus)
            changes[at] += new - value
            value = new
        changes[stop] -= value
    return [(tau, other_bytes + total) for tau, total in zip(taus, accumulate(changes))]


_start = itemgetter(0)  # a step's start (tau)


def _sweep(curves: Sequence[Curve], other_bytes: int, taus: list[float]) -> list[tuple[float, int]]:
    """demand_profile() by sweeping each curve along the ascending moments (float bytes)."""
    # Each curve is swept once along the ascending taus (curve_value at each, without scanning
    # its steps from the start every time); totals add the curves in order, as sum() did.
    totals = [0] * len(taus)
    for steps, end in curves:
        count, k, value = len(steps), 0, 0
        for i, tau in enumerate(taus):
            if end is not None and tau >= end:
                break  # 0 from here on: taus ascend
            while k < count and not steps[k][0] > tau:  # curve_value: the last step before one that starts later
                value = steps[k][1]
                k += 1
            if type(value) is not int:  # a float sum depends on its order: add as sum() does
                return _demand_at(curves, other_bytes, taus)
            totals[i] += value
    return [(tau, other_bytes + total) for tau, total in zip(taus, totals)]


def _demand_at(curves: Sequence[Curve], other_bytes: int, taus: list[float]) -> list[tuple[float, int]]:
    """demand_profile() by curve_value() at each tau (for curves the sweep cannot take)."""
    return [(tau, other_bytes + sum(curve_value(c, tau) for c in curves)) for tau in taus]
