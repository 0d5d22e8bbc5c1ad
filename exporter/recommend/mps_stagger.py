"""The stagger search of the MPS advice: the smallest start offsets that keep clients' summed
memory under a capacity at every instant, on a grid exact for piecewise-linear timelines."""

from __future__ import annotations

import math

import numpy as np

from exporter.recommend.demand import Timeline

GRID_POINTS = 2000  # time resolution of the stagger search over the whole horizon
NICE_STEPS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


def grid_step(horizon_seconds: float) -> float:
    """A round time step giving at most GRID_POINTS points over the horizon (seconds)."""
    for step in NICE_STEPS:
        if horizon_seconds / step <= GRID_POINTS:
            return float(step)
    return math.ceil(horizon_seconds / GRID_POINTS)


def discretize(timeline: Timeline, step: float) -> np.ndarray:
    """Per time bucket [k*step, (k+1)*step), the maximum of the piecewise-linear timeline.

    Exact for piecewise-linear data (the maximum on an interval is at an end or a
    breakpoint), so a stagger that passes on the grid also holds between grid points. The
    workload ends at its last point: the bucket starting there is not included.
    """
    end = timeline[-1][0]
    n = max(1, math.ceil(end / step - 1e-9))
    out = np.zeros(n)
    if len(timeline) == 1:
        out[:] = timeline[0][1]
        return out
    for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
        if t1 <= t0:  # a step: both values belong to the bucket holding t0
            k = min(int(t0 // step), n - 1)
            out[k] = max(out[k], v0, v1)
            continue
        first, last = int(t0 // step), min(math.ceil(t1 / step - 1e-9) - 1, n - 1)
        ks = np.arange(first, last + 1)
        a = np.maximum(ks * step, t0)
        b = np.minimum((ks + 1) * step, t1)
        va = v0 + (v1 - v0) * (a - t0) / (t1 - t0)
        vb = v0 + (v1 - v0) * (b - t0) / (t1 - t0)
        out[first:last + 1] = np.maximum(out[first:last + 1], np.maximum(va, vb))
    return out


def find_stagger(timelines: list[Timeline], capacity: int, max_offset: float | None = None
                 ) -> tuple[tuple[float, ...], float] | None:
    """Smallest start offsets (seconds, input order) keeping summed memory <= capacity.

    Two searches, each over three orders (as given, largest peak first, longest first):
    a uniform stagger (client i of the order starts at i x d, the smallest d on the grid
    that fits: what the seed talk did by hand) and an earliest fit (each client in turn at
    the earliest grid time where it fits beside those already placed). The result whose
    last start is earliest wins. Returns (offsets, step), or None when nothing fits within
    ``max_offset``.
    """
    horizon = sum(t[-1][0] for t in timelines)
    step = grid_step(max(horizon, 1e-9))
    shapes = [discretize(t, step) for t in timelines]
    if any(s.max() > capacity for s in shapes):
        return None
    n = len(shapes)
    orders = {tuple(range(n)),
              tuple(sorted(range(n), key=lambda i: -shapes[i].max())),
              tuple(sorted(range(n), key=lambda i: -len(shapes[i])))}
    best = None
    for order in sorted(orders):
        for search in (_uniform, _earliest_fit):
            offsets = search(shapes, order, capacity, step, max_offset)
            if offsets is not None and (best is None or (max(offsets), sum(offsets)) < (max(best), sum(best))):
                best = offsets
    return (tuple(best), step) if best is not None else None


def _uniform(shapes, order, capacity, step, max_offset):
    n = len(shapes)
    horizon = sum(len(s) for s in shapes)
    longest = max(len(s) for s in shapes)  # at this spacing nothing overlaps any more
    limit = longest if max_offset is None or n < 2 else min(longest, int(max_offset / step / (n - 1) + 1e-9))
    for d in range(limit + 1):
        total = np.zeros(horizon + longest * n)
        for position, i in enumerate(order):
            k = position * d
            total[k:k + len(shapes[i])] += shapes[i]
        if total.max() <= capacity:
            offsets = [0.0] * n
            for position, i in enumerate(order):
                offsets[i] = position * d * step
            return offsets
    return None


def _earliest_fit(shapes, order, capacity, step, max_offset):
    total = np.zeros(sum(len(s) for s in shapes) + 1)
    offsets = [0.0] * len(shapes)
    limit = None if max_offset is None else int(max_offset / step + 1e-9)
    for i in order:
        shape = shapes[i]
        windows = np.lib.stride_tricks.sliding_window_view(total, len(shape))
        ok = np.flatnonzero((windows + shape).max(axis=1) <= capacity)
        if not len(ok) or (limit is not None and ok[0] > limit):
            return None
        k = int(ok[0])
        total[k:k + len(shape)] += shape
        offsets[i] = k * step
    return offsets


def _curve(timelines, offsets, step, points: int = 200):
    """Summed memory with offsets applied, down-sampled to at most ``points`` (t, bytes)."""
    offsets = offsets or [0.0] * len(timelines)
    shapes = [discretize(t, step) for t in timelines]
    length = max(int(round(o / step)) + len(s) for o, s in zip(offsets, shapes))
    total = np.zeros(length)
    for o, s in zip(offsets, shapes):
        k = int(round(o / step))
        total[k:k + len(s)] += s
    stride = max(1, math.ceil(length / points))
    sampled = [(float(i * step), int(total[i:i + stride].max())) for i in range(0, length, stride)]
    return tuple(sampled), int(total.max())
