"""Piecewise-linear timelines (Timeline, the model's type for values over time) and exact arithmetic on them.

The engine needs more than ``timeline_value``: the value approached from the left (to see a
step up), the slope just after an instant (to know who is growing), and exact integrals of
clipped linear pieces (energy). Timelines are right-continuous: at a step the new value holds.
"""

from __future__ import annotations

__all__ = ["Timeline", "timeline_value", "left_value", "slope_after", "value_slope", "integrate_clipped",
           "breakpoints", "integral"]


# A piecewise-linear function of virtual time: ((t0, v0), (t1, v1), ...), t strictly
# increasing... except that two points may share a time to express a step. Before t0 the
# value is v0, after the last point the last value holds. A scalar becomes ((0.0, v),).
Timeline = tuple[tuple[float, float], ...]


def timeline_value(timeline: Timeline, t: float) -> float:
    """Value of a piecewise-linear timeline at virtual time t (seconds)."""
    # The simulation asks this hundreds of thousands of times per scenario: walk the points by
    # index instead of zipping slices (the same pieces, the same arithmetic).
    t0, v0 = timeline[0]
    if t <= t0:
        return v0
    for i in range(1, len(timeline)):
        t1, v1 = timeline[i]
        if t < t1:
            if t1 == t0:
                return v1
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        t0, v0 = t1, v1
    return v0


def left_value(timeline: Timeline, t: float) -> float:
    """Value approached from the left at t (differs from timeline_value only at a step)."""
    for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
        if t0 < t <= t1:  # implies t1 > t0: steps (t0 == t1) are skipped
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return timeline[0][1] if t <= timeline[0][0] else timeline[-1][1]


def slope_after(timeline: Timeline, t: float) -> float:
    """Slope (units per second) on the open interval just after t; 0 outside the points."""
    t0, v0 = timeline[0]
    for i in range(1, len(timeline)):
        t1, v1 = timeline[i]
        if t0 <= t < t1:
            return (v1 - v0) / (t1 - t0)
        t0, v0 = t1, v1
    return 0.0


def value_slope(timeline: Timeline, t: float) -> tuple[float, float]:
    """``(timeline_value(timeline, t), slope_after(timeline, t))`` in one walk (the engine asks both
    for every process at every step): the same piece, the same arithmetic, the same floats."""
    first_t, first_v = timeline[0]
    if t < first_t:
        return first_v, 0.0
    t0, v0 = first_t, first_v
    for i in range(1, len(timeline)):
        t1, v1 = timeline[i]
        if t < t1:  # t0 <= t < t1: the piece both functions use (t1 > t0: not a step)
            value = first_v if t == first_t else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
            return value, (v1 - v0) / (t1 - t0)
        t0, v0 = t1, v1
    return (first_v if t == first_t else v0), 0.0


def breakpoints(timeline: Timeline) -> list[float]:
    """Instants where the value or the slope may change."""
    return [t for t, _ in timeline]


def integrate_clipped(v0: float, slope: float, duration: float, cap: float = 1.0) -> float:
    """Exact integral over [0, duration] of min(cap, v0 + slope*x).

    Used for activity sums clipped at 1 and power clipped at its limit: both are linear
    between breakpoints, so the integral has a closed form with at most one kink.
    """
    if duration <= 0:
        return 0.0
    v1 = v0 + slope * duration
    if v0 <= cap and v1 <= cap:
        return (v0 + v1) / 2 * duration
    if v0 >= cap and v1 >= cap:
        return cap * duration
    x = (cap - v0) / slope  # crossing point inside (0, duration)
    if v0 < cap:  # rising through the cap
        return (v0 + cap) / 2 * x + cap * (duration - x)
    return cap * x + (cap + v1) / 2 * (duration - x)


def integral(timeline: Timeline, t: float) -> float:
    """Exact integral of the timeline over [0, t] (flat before its first point and after its
    last): a rate timeline's cumulative count, e.g. PCIe bytes from bytes per second."""
    cuts = sorted({0.0, *(x for x, _ in timeline if 0.0 < x < t)})
    total = 0.0
    for a, b in zip(cuts, [*cuts[1:], t]):
        if b > a:  # linear on (a, b): the trapezoid is exact; steps sit on the cuts
            total += (timeline_value(timeline, a) + left_value(timeline, b)) / 2 * (b - a)
    return total
