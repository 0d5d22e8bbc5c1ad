"""Pure forecasts: expected peaks, time-aware peak demand, stagger advice, exhaustion ETA."""

from __future__ import annotations

import pytest

from exporter.foresight.forecast import (
    ProcessState,
    device_slowdown,
    expected_peak,
    exhaustion_eta,
    forecast_device,
    process_curve,
    profile_matches,
)
from exporter.foresight.profiles import WorkloadProfile
from foresight_scenarios import GiB

CAPACITY = 79 * GiB
# The Wan ti2v-5B profile as learned from a solo run: 22 GiB after 20 s, 33 GiB for the last 30 s.
WAN = WorkloadProfile(
    key="wan", peak_bytes=33 * GiB, peak_offset_seconds=480.0, duration_seconds=510.0, runs=1, samples=100,
    timeline=((0.0, 0), (20.0, 22 * GiB), (480.0, 33 * GiB)), updated_at=0.0,
)


def wan(pid: int, age: float, profile=WAN) -> ProcessState:
    """A Wan job at a given age, using what the job uses at that age."""
    used = 22 * GiB if age < 480 else 33 * GiB
    reached = 480.0 if age >= 480 else None
    return ProcessState(pid, used, age, profile, reached)


def test_expected_peak_is_learned_peak_but_at_least_current_use():
    """The learned peak when above current use; current use when above it or unlearned."""
    assert expected_peak(22 * GiB, WAN) == 33 * GiB
    assert expected_peak(40 * GiB, WAN) == 40 * GiB
    assert expected_peak(22 * GiB, None) == 22 * GiB


def test_three_jobs_started_together_overflow_minutes_ahead():
    """Started together: 3 x 33 GiB = 99 GiB at age 480, while each still holds 22 GiB."""
    forecast = forecast_device([wan(1, 60), wan(2, 60), wan(3, 60)], CAPACITY)
    assert forecast.peak_demand_bytes == 99 * GiB
    assert forecast.headroom_bytes == CAPACITY - 99 * GiB < 0
    assert forecast.contention_in_seconds == pytest.approx(480 - 60)
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
    forecast = forecast_device([ProcessState(1, 10 * GiB, 100, None)], CAPACITY, other_bytes=2 * GiB)
    assert forecast.peak_demand_bytes == 12 * GiB
    assert forecast.headroom_bytes == CAPACITY - 12 * GiB


def test_provisional_profile_is_not_used():
    """A profile with no finished run does not drive the forecast."""
    provisional = WorkloadProfile("p", 70 * GiB, 10.0, None, 0, 3, ((0.0, 70 * GiB),), 0.0)
    forecast = forecast_device([ProcessState(1, 5 * GiB, 1, provisional)], CAPACITY)
    assert forecast.peak_demand_bytes == 5 * GiB


def test_finished_part_of_a_run_does_not_count_again():
    """A job past its peak window contributes nothing after its expected end."""
    steps, end = process_curve(wan(1, 500))
    assert end == pytest.approx(10.0)
    assert steps == ((0.0, 33 * GiB),)


def test_run_overdue_for_its_end_holds_its_memory():
    """A run later than one grace period past its learned end keeps its memory with no end."""
    steps, end = process_curve(wan(1, 600), grace=15.0)
    assert end is None and steps == ((0.0, 33 * GiB),)
    steps, end = process_curve(wan(1, 515), grace=15.0)
    assert end == pytest.approx(10.0)


def test_current_use_above_the_timeline_is_a_floor():
    """A run above its learned curve is not expected to drop back until it ends."""
    steps, _ = process_curve(ProcessState(1, 30 * GiB, 100, WAN))
    assert all(v >= 30 * GiB for _, v in steps)


def test_late_run_stretches_the_device_clock():
    """A job at age 720 that has not peaked (learned: 480) means the device runs 1.5x slower."""
    late = ProcessState(1, 22 * GiB, 720.0, WAN)
    assert device_slowdown([late]) == pytest.approx(1.5)
    measured = ProcessState(2, 33 * GiB, 730.0, WAN, peak_reached_age=720.0)
    assert device_slowdown([measured]) == pytest.approx(1.5)


def test_slowed_staggered_jobs_keep_their_spacing():
    """All 1.5x slower and 60 s apart: the late peaks still do not coincide."""
    # Slowed peaks last 45 s at ages 720..765; job 1 just reached its peak, jobs 2 and 3 are 60/120 s behind.
    jobs = [ProcessState(1, 33 * GiB, 725.0, WAN, 720.0), ProcessState(2, 22 * GiB, 665.0, WAN),
            ProcessState(3, 22 * GiB, 605.0, WAN)]
    forecast = forecast_device(jobs, CAPACITY, grace=5.0)
    assert forecast.peak_demand_bytes == 77 * GiB


def test_slowed_jobs_started_together_still_collide():
    """All late together: every peak is imminent, so the overflow is predicted now."""
    jobs = [ProcessState(i, 22 * GiB, 700.0, WAN) for i in (1, 2, 3)]
    forecast = forecast_device(jobs, CAPACITY)
    assert forecast.peak_demand_bytes == 99 * GiB and forecast.contention_in_seconds == 0.0


def test_early_peaking_profiles_do_not_claim_a_slowdown():
    """A server that allocates everything in its first seconds says nothing about speed."""
    server = WorkloadProfile("srv", 20 * GiB, 5.0, 3600.0, 1, 10, ((0.0, 1 * GiB), (5.0, 20 * GiB)), 0.0)
    assert device_slowdown([ProcessState(1, 1 * GiB, 30.0, server)]) == 1.0


@pytest.mark.parametrize(
    "run_max,age,peaked,matches",
    [
        (22 * GiB, 200.0, False, True),  # loaded like the learned run
        (8 * GiB, 200.0, False, False),  # same command, a third of the size: another kind of run
        (40 * GiB, 200.0, False, False),  # far bigger than anything learned at this age
        (2 * GiB, 2.0, False, False),  # still loading: nothing to compare yet
        (22 * GiB, 700.0, False, True),  # late, not peaked: compared with what precedes the peak
        (33 * GiB, 490.0, True, True),  # in its peak like the learned run
    ],
)
def test_profile_is_used_only_for_runs_that_follow_it(run_max, age, peaked, matches):
    """The most a run used so far must be within 30 % of what its profile held at those ages."""
    assert profile_matches(WAN, run_max, age, peaked) is matches


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
