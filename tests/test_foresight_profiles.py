"""Learning profiles from runs: peak, peak time, duration, envelope compaction, truncated runs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.foresight.profiles import (
    timeline_level,
    RECENT_RUNS,
    MAX_TIMELINE_STEPS,
    RunRecorder,
    WorkloadProfile,
    compact_envelope,
    learn_run,
    learn_running,
)
from foresight_scenarios import GiB, WAN_DURATION, WAN_PEAK_LENGTH, wan_memory


def watched_run(step: float = 5.0, memory=wan_memory, duration: float = WAN_DURATION, start: float = 1000.0):
    """A recorder fed one sample every ``step`` seconds over a whole run."""
    run = RunRecorder("wan", start, seen_from_start=True)
    age = 0.0
    while age < duration:
        run.add(start + age, memory(age))
        age += step
    return run


def step_value(timeline, age):
    """Value of a step timeline at an age."""
    value = 0
    for start, v in timeline:
        if start <= age:
            value = v
    return value


def test_finished_run_gives_peak_peak_time_and_duration():
    """A Wan run teaches 33 GiB, peaking 30 s before its end, lasting about 510 s."""
    run = watched_run()
    profile = learn_run(None, run, now=2000.0, truncated=False, poll_interval=5.0)
    assert profile.peak_bytes == 33 * GiB
    assert profile.runs == 1
    # The peak starts between the last 22 GiB sample and the first 33 GiB one (5 s apart).
    assert abs(profile.peak_offset_seconds - (WAN_DURATION - WAN_PEAK_LENGTH)) <= 2.5
    assert abs(profile.duration_seconds - WAN_DURATION) <= 2.5
    assert 0.9 < profile.peak_at_fraction < 1.0
    assert abs(profile.peak_width_seconds() - WAN_PEAK_LENGTH) <= 5.0


def test_timeline_never_understates_a_sample():
    """Every observed sample is at or below the learned envelope at its age."""
    run = watched_run(step=1.0)
    profile = learn_run(None, run, now=2000.0, truncated=False)
    assert len(profile.timeline) <= MAX_TIMELINE_STEPS
    for age in range(0, int(WAN_DURATION)):
        assert step_value(profile.timeline, age) >= wan_memory(age)


@given(st.lists(st.tuples(st.floats(0, 1e5), st.integers(0, 2**40)), min_size=1, max_size=200),
       st.integers(2, 40))
def test_compaction_bounds_steps_and_only_raises(points, max_steps):
    """Compaction keeps at most max_steps steps and never goes below the input at any age."""
    compacted = compact_envelope(points, max_steps)
    assert len(compacted) <= max_steps
    for age, _ in points:
        exact = max(v for a, v in points if a == age)
        assert step_value(compacted, age) >= exact


def test_flat_stretches_merge_before_a_short_spike_widens():
    """With one spare step, the flat 22 GiB stretch merges and the 30 s spike keeps its edges."""
    points = [(0.0, 0), (20.0, 22 * GiB), (100.0, 22 * GiB + 1), (200.0, 22 * GiB), (480.0, 33 * GiB)]
    compacted = compact_envelope(points, 3)
    assert compacted[-1] == (480.0, 33 * GiB)


def test_a_run_that_missed_the_spike_keeps_the_peak_and_its_timing():
    """Issue 15: a newest run that missed the short spike between polls does not replace the profile."""
    big = learn_run(None, watched_run(), 2000.0, False)
    missed = learn_run(big, watched_run(memory=lambda a: min(wan_memory(a), 22 * GiB)), 3000.0, False)
    assert missed.peak_bytes == 33 * GiB and missed.runs == 2
    assert missed.timeline == big.timeline and missed.peak_offset_seconds == big.peak_offset_seconds


def test_learned_peak_is_the_highest_of_the_recent_runs():
    """The peak follows the last RECENT_RUNS complete runs: a high one stays until it leaves the window."""
    profile = learn_run(None, watched_run(), 2000.0, False)
    smaller = lambda a: wan_memory(a) // 3 * 2  # noqa: E731 - a smaller input: 22 GiB peak
    for i in range(RECENT_RUNS - 1):
        profile = learn_run(profile, watched_run(memory=smaller), 3000.0 + i, False)
        assert profile.peak_bytes == 33 * GiB
    profile = learn_run(profile, watched_run(memory=smaller), 4000.0, False)
    assert profile.peak_bytes == 22 * GiB and len(profile.recent_peaks) == RECENT_RUNS
    again = learn_run(profile, watched_run(), 5000.0, False)
    assert again.peak_bytes == 33 * GiB and again.runs == RECENT_RUNS + 2


def test_profiles_learn_when_each_run_reaches_its_peak():
    """recent_peak_ages: the age at which each complete run first came within PEAK_BAND of the
    learned peak, for the confidence's timing spread; a run that missed the peak adds none, and
    only the last RECENT_RUNS are kept."""
    profile = learn_run(None, watched_run(), 2000.0, False)
    assert profile.recent_peak_ages == (WAN_DURATION - WAN_PEAK_LENGTH,)
    late = learn_run(profile, watched_run(memory=lambda a: wan_memory(max(0.0, a - 20.0)), duration=WAN_DURATION + 20.0), 3000.0, False)
    assert late.recent_peak_ages == (WAN_DURATION - WAN_PEAK_LENGTH, WAN_DURATION - WAN_PEAK_LENGTH + 20.0)
    missed = learn_run(late, watched_run(memory=lambda a: min(wan_memory(a), 22 * GiB)), 4000.0, False)
    assert missed.recent_peak_ages == late.recent_peak_ages and missed.runs == 3
    for i in range(RECENT_RUNS):
        missed = learn_run(missed, watched_run(), 5000.0 + i, False)
    assert missed.recent_peak_ages == (WAN_DURATION - WAN_PEAK_LENGTH,) * RECENT_RUNS


def test_truncated_run_only_raises_the_peak():
    """A run cut short (OOM-killed) keeps the earlier timeline and duration."""
    base = learn_run(None, watched_run(), 2000.0, False)
    cut = watched_run(memory=lambda a: 40 * GiB if a > 100 else 10 * GiB, duration=150.0)
    after = learn_run(base, cut, 3000.0, truncated=True)
    assert after.peak_bytes == 40 * GiB
    assert after.timeline == base.timeline and after.duration_seconds == base.duration_seconds
    assert after.runs == base.runs


def test_run_seen_only_from_its_middle_is_not_a_complete_run():
    """Without its start, a run yields a provisional profile that forecasts do not use."""
    run = RunRecorder("wan", 1000.0, seen_from_start=False)
    run.add(1200.0, 22 * GiB)
    profile = learn_run(None, run, 1300.0, truncated=False)
    assert profile.runs == 0 and not profile.usable and profile.duration_seconds is None


def test_running_process_raises_the_peak_of_a_known_workload():
    """A live run above the learned peak moves the peak up before it ends."""
    base = learn_run(None, watched_run(), 2000.0, False)
    live = RunRecorder("wan", 5000.0, True)
    live.add(5010.0, 35 * GiB)
    assert learn_running(base, live, 5010.0).peak_bytes == 35 * GiB
    live_small = RunRecorder("wan", 5000.0, True)
    live_small.add(5010.0, 1 * GiB)
    assert learn_running(base, live_small, 5010.0) is base


def test_scaled_timeline_reaches_the_learned_peak():
    """When the peak was raised after the timeline was recorded, forecasts use the higher peak."""
    profile = WorkloadProfile("k", 40 * GiB, 480.0, 510.0, 1, 10, ((0.0, 20 * GiB), (480.0, 33 * GiB)), 0.0)
    assert max(v for _, v in profile.scaled_timeline()) == 40 * GiB


def test_long_runs_keep_bounded_samples():
    """Hours of 1 s polling do not grow a recorder without bound."""
    run = watched_run(step=1.0, duration=6 * 3600.0, memory=lambda a: int(a) * 1000)
    assert len(run.points) <= 512
    assert run.peak_bytes == (6 * 3600 - 1) * 1000


def test_timeline_level_reads_the_step_in_force():
    """At a step's start the new level counts, just before it (a run waiting at a rise) the old one does."""
    steps = ((0.0, 1 * GiB), (20.0, 22 * GiB), (480.0, 33 * GiB))
    assert timeline_level(steps, 100.0) == 22 * GiB
    assert timeline_level(steps, 480.0) == 33 * GiB
    assert timeline_level(steps, 480.0, before=True) == 22 * GiB
    assert timeline_level(steps, -5.0) == 1 * GiB and timeline_level((), 10.0) == 0
