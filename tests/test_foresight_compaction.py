"""compact_envelope keeps a heap of merge costs (n log n); it must merge exactly what the
direct search (every pair's cost before every merge, the earliest of equally cheap pairs)
merged: the same timelines, so learned profiles and their forecasts do not move."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.foresight.profiles import MAX_RUN_POINTS, MAX_TIMELINE_STEPS, RunRecorder, _dedupe, compact_envelope
from foresight_scenarios import GiB, wan_memory


def direct_search(points, max_steps):
    """Compaction by the direct search over all pairs for each merge."""
    steps = _dedupe(points)
    if len(steps) <= max_steps:
        return tuple(steps)
    ages = [a for a, _ in steps]
    values = [v for _, v in steps]
    gaps = sorted(b - a for a, b in zip(ages, ages[1:]))
    tail = gaps[len(gaps) // 2] if gaps else 1.0
    ends = ages[1:] + [ages[-1] + tail]
    while len(ages) > max_steps:
        best, best_cost = 0, None
        for i in range(len(ages) - 1):
            top = max(values[i], values[i + 1])
            cost = (top - values[i]) * (ends[i] - ages[i]) + (top - values[i + 1]) * (ends[i + 1] - ages[i + 1])
            if best_cost is None or cost < best_cost:
                best, best_cost = i, cost
        values[best] = max(values[best], values[best + 1])
        ends[best] = ends[best + 1]
        del ages[best + 1], values[best + 1], ends[best + 1]
    return tuple(zip(ages, values))


@given(st.lists(st.tuples(st.floats(0, 1e5), st.integers(0, 2**40)), min_size=1, max_size=150),
       st.integers(1, 40))
def test_the_same_merges_as_the_direct_search(points, max_steps):
    assert compact_envelope(points, max_steps) == direct_search(points, max_steps)


@pytest.mark.parametrize("seed", range(6))
def test_ties_merge_the_earliest_pair_first(seed):
    """A regular grid of few levels: many pairs cost the same; the earliest goes first in both."""
    rng = random.Random(seed)
    points = [(float(i), rng.choice((1, 2, 3)) * GiB) for i in range(200)]
    for max_steps in (1, 2, 7, 32, 100):
        assert compact_envelope(points, max_steps) == direct_search(points, max_steps)


def test_a_long_run_compacts_as_before():
    """A recorder past MAX_RUN_POINTS (compacted to half while it runs) and its 32-step timeline."""
    run, points = RunRecorder("job", 0.0, True), []
    for age in range(3 * MAX_RUN_POINTS):
        used = wan_memory(age % 600) + (age * 7919 % 101) * 2**20
        run.add(float(age), used)
        points.append((float(age), used))
        if len(points) > MAX_RUN_POINTS:
            points = list(direct_search(points, MAX_RUN_POINTS // 2))
    assert run.points == points
    reference = direct_search(points, MAX_TIMELINE_STEPS)
    assert compact_envelope(run.points, MAX_TIMELINE_STEPS) == reference
    assert len(reference) == MAX_TIMELINE_STEPS
