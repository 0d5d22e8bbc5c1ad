"""Pure forecasts: expected peaks, time-aware peak demand, stagger advice, exhaustion ETA.

Runs are placed on their profiles the way the foresight places them: their samples are fed
to a RunProgress (exporter.foresight.progress), which gives their position and slowdown.
"""

from __future__ import annotations

import pytest

from exporter.foresight.forecast import (
    ProcessState,
    expected_peak,
    exhaustion_eta,
    follows,
    forecast_device,
    process_curve,
)
from exporter.foresight.profiles import WorkloadProfile
from exporter.foresight.progress import RunProgress, device_slowdown, is_clock
from foresight_scenarios import GiB

CAPACITY = 79 * GiB
# The Wan ti2v-5B profile as learned from a solo run: 22 GiB after 20 s, 33 GiB for the last 30 s.
WAN = WorkloadProfile(
    key="wan", peak_bytes=33 * GiB, peak_offset_seconds=480.0, duration_seconds=510.0, runs=1, samples=100,
    timeline=((0.0, 0), (20.0, 22 * GiB), (480.0, 33 * GiB)), updated_at=0.0,
)


def wan_memory(age: float) -> int:
    """What the learned run did: nothing until 20 s, 22 GiB, 33 GiB from 480 s."""
    return 0 if age < 20 else 22 * GiB if age < 480 else 33 * GiB


def placed(pid: int, profile: WorkloadProfile, memory, age: float, slower: float = 1.0,
           interval: float = 5.0, device: float = 1.0) -> ProcessState:
    """A run of ``profile`` at ``age``, ``slower`` times slower than learned, polled every ``interval``,
    on a device whose slowdown reads ``device``."""
    progress = RunProgress(profile)
    t, peak = 0.0, 0
    while t <= age:
        used = memory(t / slower)
        peak = max(peak, used)
        progress.feed(t, used, peak, 1.0, interval)
        t += interval
    speed = progress.slowdown(age, device)
    return ProcessState(pid, memory(age / slower), age, profile, progress.position(age, speed), speed, "learned")


def wan(pid: int, age: float, slower: float = 1.0, device: float = 1.0) -> ProcessState:
    return placed(pid, WAN, wan_memory, age, slower, device=device)


def test_expected_peak_is_learned_peak_but_at_least_current_use():
    """The learned peak when above current use; current use when above it or unlearned."""
    assert expected_peak(wan(1, 100)) == 33 * GiB
    assert expected_peak(ProcessState(1, 40 * GiB, 100.0)) == 40 * GiB


def test_three_jobs_started_together_overflow_minutes_ahead():
    """Started together: 3 x 33 GiB = 99 GiB at age 480, while each still holds 22 GiB."""
    forecast = forecast_device([wan(1, 60), wan(2, 60), wan(3, 60)], CAPACITY)
    assert forecast.peak_demand_bytes == 99 * GiB
    assert forecast.headroom_bytes == CAPACITY - 99 * GiB < 0
    assert forecast.contention_in_seconds == pytest.approx(480 - 60, abs=5.0)  # known to a 5 s poll
    assert forecast.at_contention_bytes == {1: 33 * GiB, 2: 33 * GiB, 3: 33 * GiB}


def test_jobs_staggered_by_a_minute_do_not_overflow():
    """60 s apart, at most one job is at its 30 s peak: 33 + 22 + 22 = 77 GiB."""
    forecast = forecast_device([wan(1, 180), wan(2, 120), wan(3, 60)], CAPACITY)
    assert forecast.peak_demand_bytes == 77 * GiB
    assert forecast.headroom_bytes > 0
    assert forecast.contention_in_seconds is None and forecast.stagger_seconds is None


def test_simple_sum_cannot_tell_staggered_from_together():
    """The plain sum of expected peaks is 99 GiB in both cases; only the time-aware demand differs."""
    staggered = forecast_device([wan(1, 180), wan(2, 120), wan(3, 60)], CAPACITY)
    assert staggered.peak_sum_bytes == 99 * GiB


def test_stagger_advice_is_the_peak_length():
    """Peaks of 30 s need starts at least 30 s apart (77 GiB then fits), not less."""
    forecast = forecast_device([wan(1, 60), wan(2, 60), wan(3, 60)], CAPACITY)
    assert forecast.stagger_seconds == 30.0


def test_no_stagger_helps_a_job_larger_than_the_device():
    """When one run alone exceeds the device, no spacing fits and no advice is given."""
    huge = WorkloadProfile("huge", 90 * GiB, 100.0, 200.0, 1, 10, ((0.0, 90 * GiB),), 0.0)
    forecast = forecast_device([ProcessState(1, 10 * GiB, 5, huge), ProcessState(2, 10 * GiB, 5, huge)], CAPACITY)
    assert forecast.contention_in_seconds == 0.0
    assert forecast.stagger_seconds is None


def test_processes_without_profile_count_with_current_use():
    """Unknown processes and unattributed memory hold what they hold now."""
    forecast = forecast_device([ProcessState(1, 10 * GiB, 100)], CAPACITY, other_bytes=2 * GiB)
    assert forecast.peak_demand_bytes == 12 * GiB
    assert forecast.headroom_bytes == CAPACITY - 12 * GiB


def test_provisional_profile_is_not_used():
    """A profile with no finished run does not drive the forecast."""
    provisional = WorkloadProfile("p", 70 * GiB, 10.0, None, 0, 3, ((0.0, 70 * GiB),), 0.0)
    forecast = forecast_device([ProcessState(1, 5 * GiB, 1, provisional)], CAPACITY)
    assert forecast.peak_demand_bytes == 5 * GiB


def test_finished_part_of_a_run_does_not_count_again():
    """A job in its peak window contributes nothing after its expected end."""
    steps, end = process_curve(wan(1, 500))
    assert end == pytest.approx(10.0, abs=3.0)  # its peak was seen within one 5 s poll
    assert steps == ((0.0, 33 * GiB),)


def test_run_past_its_end_is_expected_to_last_as_long_again_as_it_is_late():
    """Late by 90 s: expected to end within 90 s more, not hold its memory for ever."""
    run = ProcessState(1, 33 * GiB, 600.0, WAN, position=510.0)
    steps, end = process_curve(run, grace=15.0)
    assert steps == ((0.0, 33 * GiB),) and end == pytest.approx(90.0)
    steps, end = process_curve(ProcessState(1, 33 * GiB, 515.0, WAN, position=510.0), grace=15.0)
    assert end == pytest.approx(10.0)  # within one poll of its end: about to exit


def test_spike_in_progress_ends_when_its_profile_says():
    """Issue 15: 20 GiB, 45 GiB for 120 s from 300 s, then 20 GiB to 900 s; copies at 0 and 250 s.

    The true maximum is 65 of 79 GiB. The copy inside its spike is not held at 45 GiB for
    its whole remaining life: no contention is predicted.
    """
    def memory(age):
        return 1 * GiB if age < 30 else 45 * GiB if 300 <= age < 420 else 20 * GiB
    profile = WorkloadProfile("spiky", 45 * GiB, 300.0, 900.0, 1, 180,
                              ((0.0, 1 * GiB), (30.0, 20 * GiB), (300.0, 45 * GiB), (420.0, 20 * GiB)), 0.0)
    first, second = placed(1, profile, memory, 350.0), placed(2, profile, memory, 100.0)
    forecast = forecast_device([first, second], CAPACITY)
    assert forecast.contention_in_seconds is None
    assert forecast.peak_demand_bytes == 65 * GiB


def test_late_ramp_stays_on_its_profile():
    """Issue 15's render: ramp to 30 GiB at 500-530 s; three copies 5 % slower collide at the end.

    A copy that passes the learned ramp start without having risen is late, not off its profile:
    the collision stays predicted up to the OOM.
    """
    def memory(age):
        if age < 30:
            return int(1 * GiB + 9 * GiB * age / 30)
        if age < 500:
            return 10 * GiB
        return int(10 * GiB + 20 * GiB * min(1.0, (age - 500) / 30))
    timeline = ((0.0, 1 * GiB), (15.0, 5 * GiB), (30.0, 10 * GiB)) + tuple(
        (500.0 + 3 * i, int(10 * GiB + 2 * GiB * i)) for i in range(1, 11))
    profile = WorkloadProfile("render", 30 * GiB, 530.0, 560.0, 1, 112, timeline, 0.0)
    for age in (60.0, 300.0, 510.0, 540.0):
        jobs = [placed(i, profile, memory, age, slower=1.05) for i in (1, 2, 3)]
        forecast = forecast_device(jobs, CAPACITY, grace=5.0, slowdown=device_slowdown([j.slowdown for j in jobs]))
        assert forecast.headroom_bytes < 0, age


def test_a_late_run_measures_the_slowdown():
    """A job 1.5x slower than learned reaches its peak at 720 s: its slowdown reads 1.5."""
    late = wan(1, 730.0, slower=1.5)
    assert late.slowdown == pytest.approx(1.5, abs=0.02)
    waiting = wan(2, 700.0, slower=1.5)  # not peaked yet at 700 (learned 480): at least 700/480
    assert waiting.slowdown == pytest.approx(700 / 480)


def test_slowed_staggered_jobs_keep_their_spacing():
    """All 1.5x slower and 60 s apart: the late peaks still do not coincide."""
    first = wan(1, 725.0, 1.5)  # reached its peak: measures the device's slowdown for the others
    jobs = [first, wan(2, 665.0, 1.5, device=first.slowdown), wan(3, 605.0, 1.5, device=first.slowdown)]
    forecast = forecast_device(jobs, CAPACITY, grace=5.0)
    assert forecast.peak_demand_bytes == 77 * GiB


def test_slowed_jobs_started_together_still_collide():
    """All late together: every peak is imminent, so the overflow is predicted now."""
    jobs = [wan(i, 700.0, 1.5) for i in (1, 2, 3)]
    forecast = forecast_device(jobs, CAPACITY)
    assert forecast.peak_demand_bytes == 99 * GiB and forecast.contention_in_seconds == 0.0


def test_a_spike_missed_between_polls_is_not_expected_for_ever():
    """A run that crossed its 2 s spike unseen is past it once it is well past its time."""
    profile = WorkloadProfile("blip", 40 * GiB, 300.0, 600.0, 1, 100,
                              ((0.0, 10 * GiB), (300.0, 40 * GiB), (302.0, 10 * GiB)), 0.0)
    run = placed(1, profile, lambda a: 10 * GiB, 500.0, interval=15.0)
    steps, _ = process_curve(run)
    assert max(v for _, v in steps) == 10 * GiB


def test_servers_and_early_peaks_are_no_clock():
    """A server that allocates everything in its first seconds says nothing about speed."""
    server = WorkloadProfile("srv", 20 * GiB, 5.0, 3600.0, 1, 10, ((0.0, 1 * GiB), (5.0, 20 * GiB)), 0.0)
    assert not is_clock(server) and is_clock(WAN)
    run = placed(1, server, lambda a: 20 * GiB, 300.0)
    assert run.slowdown == 1.0 and run.position == 300.0


@pytest.mark.parametrize(
    "run_max,age,matches",
    [
        (22 * GiB, 200.0, True),  # loaded like the learned run
        (8 * GiB, 200.0, False),  # same command, a third of the size: another kind of run
        (45 * GiB, 200.0, False),  # far bigger than its learned peak
        (2 * GiB, 2.0, True),  # still loading: nothing contradicts it yet
        (22 * GiB, 700.0, True),  # late, not peaked
        (33 * GiB, 490.0, True),  # in its peak like the learned run
    ],
)
def test_profile_is_used_only_for_runs_that_follow_it(run_max, age, matches):
    """A run must stay within 30 % of its profile, allowing it to be late."""
    assert follows(WAN, run_max, age) is matches


def test_declared_size_is_held_for_the_run_and_a_trend_is_extrapolated():
    """Declared: at least the declared bytes from now on. Trend: growth over a bounded stretch."""
    steps, end = process_curve(ProcessState(1, 5 * GiB, 30.0, basis="declared", floor_bytes=30 * GiB))
    assert steps == ((0.0, 30 * GiB),) and end is None
    steps, end = process_curve(ProcessState(1, 10 * GiB, 400.0, basis="trend", trend_bytes_per_second=GiB / 100,
                                            trend_seconds=100.0))
    assert steps[0] == (0.0, 10 * GiB) and steps[-1] == (100.0, 11 * GiB) and end is None


def test_exhaustion_eta_from_a_steady_leak():
    """1 GiB/min from 40 GiB of 79 GiB: 39 minutes to go at the fitted slope."""
    window = [(60.0 * i, 40 * GiB + i * GiB) for i in range(6)]
    eta = exhaustion_eta(window, CAPACITY)
    assert eta == pytest.approx((CAPACITY - 45 * GiB) / (GiB / 60.0))


@pytest.mark.parametrize(
    "window",
    [
        [(10.0 * i, 40 * GiB) for i in range(10)],  # flat
        [(10.0 * i, 40 * GiB - i * GiB) for i in range(10)],  # shrinking
        [(10.0 * i, 40 * GiB + (i % 2) * 2**20) for i in range(10)],  # noise of 1 MiB
        [(1.0 * i, 40 * GiB + i * GiB) for i in range(10)],  # only 9 s of data
        [(60.0 * i, 40 * GiB + i * GiB) for i in range(3)],  # too few points
    ],
)
def test_exhaustion_eta_absent_without_a_real_trend(window):
    """Flat, shrinking, noisy, too short or too sparse windows give no ETA."""
    assert exhaustion_eta(window, CAPACITY) is None


def test_exhaustion_eta_zero_when_already_full_and_growing():
    """Past capacity and still growing: the ETA is 0, not negative."""
    window = [(60.0 * i, CAPACITY + i * GiB) for i in range(6)]
    assert exhaustion_eta(window, CAPACITY) == 0.0


def _triton_memory(seed: int, size: int = 12 * GiB):
    """One run of corpus 3's Triton server (bench/foresight_families3.py: 2-4 models loaded at
    staggered times, each load +-10 % from run to run) as bytes over its age, and its duration."""
    import random
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        from foresight_families3 import make_workload, points
    finally:
        sys.path.pop(0)
    workload = make_workload(random.Random(0), "triton")  # loads at 217, 249, 382 s of 2334 s
    pts, duration = points(workload, random.Random(seed))

    def memory(age: float) -> int:
        for (a0, v0), (a1, v1) in zip(pts, pts[1:]):
            if a0 <= age < a1:
                return int(size * (v0 + (v1 - v0) * (age - a0) / (a1 - a0)))
        return int(size * pts[-1][1])
    return memory, duration, workload


def test_a_server_late_for_its_next_model_load_is_late_not_smaller():
    """Corpus 3 (seed 3, episode 30): Triton replicas whose model loads come +-10 % from run to
    run. A replica that is past the learned time of its last load and still holds what it held
    before it is waiting for that load: its curve keeps the learned peak. It used to be read as
    a run 30 % smaller for good, and the collision the replicas were heading to (paged 5 minutes
    ahead) was dropped 2 minutes before it came."""
    from exporter.foresight.basis import is_steady
    from exporter.foresight.profiles import RunRecorder, learn_run
    profile = None
    for seed in (1, 2):  # two learning runs, learned the way the foresight learns them
        memory, duration, _ = _triton_memory(seed)
        run, age = RunRecorder("triton", 1000.0 * seed, seen_from_start=True), 0.0
        while age < duration:
            run.add(1000.0 * seed + age, memory(age))
            age += 5.0
        profile = learn_run(profile, run, 1000.0 * seed + duration, False, 5.0)
    memory, _, workload = _triton_memory(5)  # its last load comes at 420 s, the learned one at 402 s
    late = lambda a: memory(a / 1.1)  # noqa: E731 - and co-tenants slow it by 10 %
    age = 430.0  # past the learned load, before its own (462 s)
    state = placed(1, profile, late, age)
    points = [(t, late(t)) for t in range(0, int(age) + 1, 5)]
    state = ProcessState(state.pid, state.used_bytes, age, profile, state.position, state.slowdown, "learned",
                         steady=is_steady(points, state.used_bytes))
    assert not is_clock(profile)  # peaks in its first fifth: read at its age, no landmark holds it back
    assert state.steady and state.used_bytes < profile.peak_bytes / 1.3  # waiting below its last load
    assert expected_peak(state) >= 0.97 * profile.peak_bytes
