"""Foresight's faster paths give what the direct computations gave, exactly (issue 22's fifth pass):

- compact_envelope keeps a heap of merge costs (n log n); it must merge exactly what the
  direct search (every pair's cost before every merge, the earliest of equally cheap pairs)
  merged: the same timelines, so learned profiles and their forecasts do not move;
- demand_profile sweeps each curve once along the moments instead of curve_value() at each;
- recent_fall walks the run's values with comparisons instead of max() calls;
- trend() and is_steady() take the samples' bytes in C (sixth pass);
- is_steady compares only the highest and lowest recent values with the band;
- follows() finds what a timeline held by a run's age by bisection over running maxima.

Each is checked against the direct computation, written out here as it was."""

from __future__ import annotations

import math
import random
from bisect import bisect_left

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.foresight.basis import (
    STEADY_BAND,
    STEADY_SECONDS,
    TREND_MAX_SECONDS,
    TREND_MIN_AGE,
    TREND_MIN_GROWTH,
    TREND_MIN_SPAN,
    TREND_SKIP_LOAD,
    TREND_WINDOW,
    is_steady,
    recent_fall,
    trend,
)
from exporter.foresight.forecast import HORIZON_SECONDS, _held_by, curve_value, demand_profile
from exporter.foresight.profiles import (
    MAX_RUN_POINTS,
    MAX_TIMELINE_STEPS,
    RunRecorder,
    WorkloadProfile,
    _dedupe,
    compact_envelope,
)
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


def demand_at_each_moment(curves, other_bytes=0):
    """demand_profile by curve_value() at each moment."""
    moments = {0.0}
    for steps, end in curves:
        moments.update(t for t, _ in steps)
        if end is not None:
            moments.add(end)
    return [(tau, other_bytes + sum(curve_value(c, tau) for c in curves))
            for tau in sorted(moments) if 0.0 <= tau <= HORIZON_SECONDS]


@pytest.mark.parametrize("seed", range(4))
def test_demand_profile_sweep_equals_curve_value_at_each_moment(seed):
    """Random curves, with steps out of order, NaN starts and ends, ends at 0 and past the horizon."""
    rng = random.Random(seed)
    for case in range(2000):
        curves = []
        for _ in range(rng.randint(0, 6)):
            n = rng.randint(0, 8)
            starts = sorted(rng.choice([0.0, rng.uniform(-50, 3e4), float(rng.randint(0, 100))]) for _ in range(n))
            if case % 7 == 0 and n:
                rng.shuffle(starts)
            if case % 11 == 0 and n:
                starts[rng.randrange(n)] = math.nan
            end = rng.choice([None, rng.uniform(0, 3e4), 0.0, 1e5, math.nan if case % 13 == 0 else None])
            curves.append((tuple((s, rng.randrange(2**36)) for s in starts), end))
        other = rng.randrange(2**30)
        assert repr(demand_profile(curves, other)) == repr(demand_at_each_moment(curves, other))


def test_demand_profile_of_float_values_adds_as_sum_does():
    curves = [(((0.0, 1.5), (3.0, 2.0**60)), None), (((1.0, 0.1),), 5.0), (((0.5, 2**53 + 1),), None)]
    assert repr(demand_profile(curves, 1)) == repr(demand_at_each_moment(curves, 1))


def direct_recent_fall(points, age):
    recent = points[bisect_left(points, max(age - TREND_WINDOW, TREND_SKIP_LOAD), key=lambda p: p[0]):]
    if not recent:
        return None
    top, fall = 0, 0
    for _, value in recent:
        top = max(top, value)
        fall = max(fall, top - value)
    return min(v for _, v in recent), fall


@pytest.mark.parametrize("seed", range(3))
def test_recent_fall_as_before(seed):
    rng = random.Random(seed)
    for _ in range(500):
        points, t, used = [], 0.0, rng.randrange(2**34)
        for _ in range(rng.randint(0, 400)):
            t += rng.choice([1.0, 5.0, 0.5])
            used = max(0, used + rng.randint(-(2**27), 2**27 + 2**20))
            points.append((t, used))
        age = t + rng.random() * 5
        assert recent_fall(points, age) == direct_recent_fall(points, age)


@pytest.mark.parametrize("seed", range(3))
def test_held_by_equals_the_step_by_step_search(seed):
    """Timelines in order, out of order, with NaN starts, scaled up to a higher peak; ages
    before, between, on and after the steps, infinite and NaN."""
    rng = random.Random(seed)
    for case in range(3000):
        n = rng.randint(0, 10)
        starts = sorted(rng.choice([0.0, rng.uniform(0, 1000), float(rng.randint(0, 50))]) for _ in range(n))
        if case % 5 == 0 and n:
            rng.shuffle(starts)
        if case % 9 == 0 and n:
            starts[rng.randrange(n)] = math.nan
        timeline = tuple((s, rng.randrange(1, 2**36)) for s in starts)
        peak = max([v for _, v in timeline], default=0) * rng.choice([1, 1, 2])
        profile = WorkloadProfile("job", peak, 0.0, 100.0, 1, 1, timeline, 0.0)
        for _ in range(5):
            reached = rng.choice([rng.uniform(-10, 1100), 0.0, float(rng.randint(0, 50)), math.nan, math.inf])
            expected = max((v for start, v in profile.scaled_timeline() if start <= reached), default=0)
            assert _held_by(profile, reached) == expected


def direct_is_steady(points, used):
    if not points or used <= 0:
        return False
    start = bisect_left(points, points[-1][0] - STEADY_SECONDS, key=lambda p: p[0])
    if start == 0 or len(points) - start < 3:
        return False
    band = STEADY_BAND * used
    return all(abs(v - used) <= band for _, v in points[start:])


@pytest.mark.parametrize("seed", range(3))
def test_is_steady_as_before(seed):
    """Runs holding level within the band, just on its edges, just outside, and moving."""
    rng = random.Random(seed)
    steady = 0
    for _ in range(3000):
        level = rng.randrange(1, 2**36)
        band = int(STEADY_BAND * level)
        points, t = [], 0.0
        for _ in range(rng.randint(0, 80)):
            t += rng.choice([1.0, 5.0, 0.5])
            points.append((t, level + rng.choice([0, band, -band, band + 1, -band - 1, rng.randint(-band, band)])))
        used = rng.choice([level, points[-1][1] if points else level, 0])
        assert is_steady(points, used) == direct_is_steady(points, used)
        steady += direct_is_steady(points, used)
    assert steady > 0


def test_the_scaled_profile_follows_every_change_to_the_workloads_profiles():
    """RunPlanner._scaled reuses its answer while none of the workload's profiles changed; a
    profile learned, replaced or dropped (index()/forget(), as the Foresight calls them) is seen
    at once, and the answer is the one scaled_profile() gives for the profiles there are then."""
    from exporter.foresight.basis import scaled_profile
    from exporter.foresight.runs import RunPlanner

    def learned(key, peak, updated_at, device=80 * GiB):
        return WorkloadProfile(key, peak, 10.0, 100.0, 1, 10, ((0.0, peak),), updated_at, device_bytes=device)

    profiles = {"job@80GiB": learned("job@80GiB", 70 * GiB, 1.0)}
    planner = RunPlanner(profiles)
    here, capacity = "job@40GiB", 40 * GiB
    first = planner._scaled(here, capacity)
    assert first == scaled_profile([profiles["job@80GiB"]], capacity) and first.peak_bytes == 35 * GiB
    assert planner._scaled(here, capacity) is first  # nothing changed: the same answer
    profiles["job@80GiB"] = learned("job@80GiB", 60 * GiB, 2.0)
    planner.index("job@80GiB")
    assert planner._scaled(here, capacity).peak_bytes == 30 * GiB
    profiles["job@20GiB"] = learned("job@20GiB", 19 * GiB, 3.0, device=20 * GiB)
    planner.index("job@20GiB")
    assert planner._scaled(here, capacity) == scaled_profile(
        [profiles["job@80GiB"], profiles["job@20GiB"]], capacity)
    del profiles["job@80GiB"], profiles["job@20GiB"]
    planner.forget("job@80GiB")
    planner.forget("job@20GiB")
    assert planner._scaled(here, capacity) is None
    assert planner._scaled(here, 20 * GiB) is None


def direct_trend(points, age):
    """basis.trend() as it was, the samples' bytes taken one by one."""
    if age < TREND_MIN_AGE:
        return 0.0, 0.0
    recent = points[bisect_left(points, max(age - TREND_WINDOW, TREND_SKIP_LOAD), key=lambda p: p[0]):]
    if len(recent) < 6 or recent[-1][0] - recent[0][0] < TREND_MIN_SPAN:
        return 0.0, 0.0
    first, span = recent[0][0], recent[-1][0] - recent[0][0]
    cuts = [0] + [bisect_left(recent, first + span * k / 3, key=lambda p: p[0]) for k in (1, 2)] + [len(recent)]
    if any(a >= b for a, b in zip(cuts, cuts[1:])):
        return 0.0, 0.0
    floors = [min(v for _, v in recent[a:b]) for a, b in zip(cuts, cuts[1:])]
    if not floors[0] < floors[1] < floors[2] or floors[2] - floors[0] < TREND_MIN_GROWTH:
        return 0.0, 0.0
    return (floors[2] - floors[0]) / (span * 2 / 3), min(age / 4, TREND_MAX_SECONDS)


@pytest.mark.parametrize("seed", range(3))
def test_trend_as_before(seed):
    """Leaks, ramps, spiky servers and flat runs, of every length up to a compacted run's."""
    rng = random.Random(seed)
    found = 0
    for _ in range(500):
        points, t, used = [], 0.0, rng.randrange(2**34)
        growth = rng.choice([0, 2**20, 2**22, -(2**20)])
        for _ in range(rng.randint(0, MAX_RUN_POINTS)):
            t += rng.choice([1.0, 5.0, 0.5])
            used = max(0, used + growth + rng.choice([0, rng.randint(-(2**26), 2**26)]))
            points.append((t, used))
        age = t + rng.random() * 5
        assert trend(points, age) == direct_trend(points, age)
        found += direct_trend(points, age) != (0.0, 0.0)
    assert found > 0


def test_recent_fall_of_a_run_that_only_grows_or_holds():
    """No fall at all: 0, as the walk gave (the running highest equals each new value)."""
    points = [(TREND_SKIP_LOAD + i, 1000 + (i // 3) * 7) for i in range(50)]
    assert recent_fall(points, points[-1][0]) == direct_recent_fall(points, points[-1][0]) == (1000, 0)


def test_positional_maker_builds_what_init_builds():
    """ProcessRow and ProcessState filled by their __dict__: equal, same fields in the same order,
    still frozen, hashable alike; a wrong number of values goes to __init__ and fails as it does."""
    import dataclasses

    from exporter.foresight.forecast import ProcessState
    from exporter.foresight.result import ProcessRow, positional_maker

    profile = WorkloadProfile("job", 5 * GiB, 10.0, 100.0, 1, 1, ((0.0, GiB), (10.0, 5 * GiB)), 0.0)
    cases = [
        (ProcessRow, (0, "GPU-x", None, 123, "python", "mps", "wl", 5, None, "", "", "", None, "current")),
        (ProcessRow, (3, "GPU-y", 2, 7, "vllm", "mig", "w~ab", None, 9, "ns", "pod", "c", 1, "learned")),
        (ProcessState, (1, 2 * GiB, 30.5, None, 0.0, 1.0, "trend", 0, 1e6, 7.5, False, 1.0, 3, 0)),
        (ProcessState, (1, 2 * GiB, 30.5, profile, 12.0, 1.25, "learned", GiB, 0.0, 0.0, True, 1.0, 0, 4 * GiB)),
    ]
    for cls, values in cases:
        fast, slow = positional_maker(cls)(*values), cls(*values)
        assert type(fast) is cls and fast == slow and repr(fast) == repr(slow) and hash(fast) == hash(slow)
        assert list(vars(fast).items()) == list(vars(slow).items())
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.pid = 0
        with pytest.raises(TypeError):
            positional_maker(cls)(*values, "one too many")

    @dataclasses.dataclass(frozen=True)
    class Checked:
        x: int

        def __post_init__(self):
            raise ValueError("checked")

    assert positional_maker(Checked) is Checked  # its __init__ does more: kept
