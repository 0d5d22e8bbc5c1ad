"""The exhaustion ETA's window (exporter.foresight.exhaustion): the sums it keeps poll by poll
give the same ETA as a fit made from scratch on what the window holds, through evictions,
unread polls, gaps that empty it and times of any binary precision; and the same ETA, to
the float rounding of the two-pass fit the foresight used before, as that fit."""

from __future__ import annotations

import random

import pytest

from exporter.foresight import Foresight
from exporter.foresight.exhaustion import TrendWindow
from exporter.foresight.forecast import exhaustion_eta
from foresight_scenarios import GiB, Job, mps_gpu_snapshot

CAPACITY = 79 * GiB


def float_fit_eta(window, capacity, min_points=5, min_span=30.0, min_growth=64 * 2**20):
    """The ETA by the float two-pass least-squares fit over the whole window (the former code)."""
    if capacity is None or len(window) < min_points:
        return None
    times = [t for t, _ in window]
    span = max(times) - min(times)
    if span < min_span:
        return None
    n = len(window)
    mean_t = sum(times) / n
    mean_u = sum(u for _, u in window) / n
    sxx = sum((t - mean_t) ** 2 for t in times)
    sxy = sum((t - mean_t) * (u - mean_u) for t, u in window)
    slope = sxy / sxx
    if slope * span < min_growth:
        return None
    return max(0.0, (capacity - window[-1][1]) / slope)


GROWTHS = (0, 2**20, 2**22, 3 * 2**22 + 1, -(2**21))  # bytes per poll: flat, slow to fast leaks, shrinking


def polls(seed: int, count: int):
    """(now, used or None) of a domain polled ``count`` times: a leak, noise, unread polls,
    uneven intervals, long gaps, and clocks of Unix-time size with fractions of any length."""
    rng = random.Random(seed)
    t = rng.choice([1.7e9, 1.7e9 + rng.random(), 1000.0, 0.1])
    used = rng.randrange(80 * GiB)
    growth = GROWTHS[seed % len(GROWTHS)]
    for _ in range(count):
        t += rng.choice([1.0, 1.0, 0.37, 5.0, 1 / 3, 15.0, 400.0 if rng.random() < 0.02 else 1.0])
        used = max(0, used + growth + rng.randint(-(2**21), 2**21))
        yield t, (None if rng.random() < 0.05 else used)


@pytest.mark.parametrize("seed", range(12))
def test_kept_sums_equal_a_fit_from_scratch(seed):
    """Poll by poll, the window's ETA equals exhaustion_eta() of the samples it holds, bit for
    bit, and the float fit's to its rounding; the window holds exactly the last 300 s."""
    window, seen, compared = TrendWindow(300.0), [], 0
    for now, used in polls(seed, 700):
        window.add(now, used)
        if used is not None:
            seen.append((now, used))
        expected = [(t, u) for t, u in seen if now - t <= 300.0]
        assert list(zip(window.times, window.used)) == expected
        for capacity in (CAPACITY, 2 * GiB, None):
            eta = window.eta(capacity)
            assert eta == exhaustion_eta(expected, capacity) == TrendWindow(samples=expected).eta(capacity)
            floats = float_fit_eta(expected, capacity)
            assert (eta is None) == (floats is None)
            if eta is not None:
                assert eta == pytest.approx(floats, rel=1e-12, abs=1e-9)
                compared += 1
    assert compared > 0 or GROWTHS[seed % len(GROWTHS)] <= 2**20  # flat or shrinking: no ETA to compare


def test_a_gap_longer_than_the_window_empties_it_and_it_starts_again():
    """A reset: after a gap of more than the window, only the new samples count."""
    window = TrendWindow(300.0)
    for i in range(100):
        window.add(1.7e9 + i, 40 * GiB - i * 2**22)  # shrinking: no ETA
    assert window.eta(CAPACITY) is None
    window.add(1.7e9 + 1000.0, None)  # an unread poll long after: everything leaves
    assert len(window.times) == 0 and window.eta(CAPACITY) is None
    fresh = [(1.7e9 + 1000.5 + 10 * i, 40 * GiB + i * GiB) for i in range(8)]
    for t, u in fresh:
        window.add(t, u)
    assert window.eta(CAPACITY) == exhaustion_eta(fresh, CAPACITY)
    assert window.eta(CAPACITY) == pytest.approx((CAPACITY - 47 * GiB) / (GiB / 10.0))


def test_a_finer_time_after_coarse_ones_rescales_the_sums():
    """Whole seconds, then a time with a 2**-30 fraction, then whole seconds again after it leaves."""
    window, seen = TrendWindow(60.0), []
    times = [1000.0 + i for i in range(40)] + [1040 + 2**-30] + [1041.0 + i for i in range(100)]
    for i, t in enumerate(times):
        window.add(t, 10 * GiB + i * 2**23)
        seen.append((t, 10 * GiB + i * 2**23))
        held = [(a, u) for a, u in seen if t - a <= 60.0]
        assert window.eta(CAPACITY) == exhaustion_eta(held, CAPACITY)


def test_integer_times_and_integral_float_bytes_are_held_exactly():
    ints = [(60 * i, 40 * GiB + i * GiB) for i in range(6)]
    floats = [(60 * i, float(40 * GiB + i * GiB)) for i in range(6)]
    assert exhaustion_eta(ints, CAPACITY) == exhaustion_eta(floats, CAPACITY) == (CAPACITY - 45 * GiB) / (GiB / 60)


def test_samples_the_sums_cannot_hold_fall_back_to_the_float_fit():
    """A fractional byte count (no backend reports one) is fitted as before, in floats."""
    window = [(10.0 * i, 40 * GiB + i * GiB + 0.5) for i in range(10)]
    assert exhaustion_eta(window, CAPACITY) == float_fit_eta(window, CAPACITY)
    kept = TrendWindow(50.0)
    for t, u in window:
        kept.add(t, u)
    assert kept.eta(CAPACITY) == float_fit_eta(window[-6:], CAPACITY)


def test_foresight_exports_the_eta_of_its_window():
    """Through the foresight: a leaking job on an MPS GPU polled every second for ten minutes;
    each poll's exported ETA is exhaustion_eta() of the use polled in the last 300 s."""
    foresight, history = Foresight(), []
    leak = lambda age: 2 * GiB + int(age) * 2**24  # noqa: E731 - 16 MiB a second
    jobs = [Job(pid=300, start=995.0, memory=leak, duration=10_000, cmdline="python leak.py")]
    etas = 0
    for i in range(600):
        now = 1000.0 + i
        snapshot = mps_gpu_snapshot(now, jobs)
        foresight.observe(snapshot, now=now)
        (gpu,) = snapshot.gpus
        history.append((now, gpu.memory_used_bytes))
        (device,) = foresight.result().devices
        window = [(t, u) for t, u in history if now - t <= foresight.trend_window]
        capacity = device.forecast.capacity_bytes
        assert device.exhaustion_eta_seconds == exhaustion_eta(window, capacity)
        etas += device.exhaustion_eta_seconds is not None
    assert etas > 500
