"""Confidence of a predicted contention: what the forecast rests on decides the alert tier."""

from __future__ import annotations

from dataclasses import replace

from exporter.foresight import Foresight
from exporter.foresight.confidence import CRITICAL_CONFIDENCE, contention_confidence, grounding, peak_spread
from exporter.foresight.forecast import ProcessState, forecast_device
from exporter.foresight.profiles import WorkloadProfile
from foresight_scenarios import WAN_DURATION, Job, learn_solo_run, replay

GiB = 2**30


def together_confidences(solo_runs: int, server: bool = False) -> list[float]:
    """Learn the Wan job from ``solo_runs`` runs alone, then start three together (99 GiB at their
    final peak in a 79 GiB H100), or two beside a steady 16 GiB server (82 GiB: a narrow
    overflow): the device's confidence at every poll where contention is predicted."""
    foresight = Foresight()
    t = 1_000_000.0
    for i in range(solo_runs):
        t = learn_solo_run(foresight, t, pid=101 + i)
    jobs = [Job(pid=300 + i, start=t + 10.0) for i in range(2 if server else 3)]
    if server:
        jobs.append(Job(pid=399, start=t, duration=2 * WAN_DURATION, memory=lambda age: 16 * GiB,
                        cmdline="python3 embed_server.py"))
    return [result.devices[0].confidence for _, result in replay(foresight, jobs, t, t + WAN_DURATION - 60.0)
            if result.devices and result.devices[0].confidence is not None]


def test_a_clear_overflow_on_learned_runs_pages():
    for runs in (1, 2):
        confidences = together_confidences(runs)
        assert confidences, "the three jobs together must be predicted to overflow"
        assert max(confidences) >= CRITICAL_CONFIDENCE
        assert all(0.0 <= c <= 1.0 for c in confidences)


def test_a_narrow_overflow_pages_on_agreeing_runs_but_only_warns_on_one():
    one, two = together_confidences(1, server=True), together_confidences(2, server=True)
    assert one and two, "both predict the overflow (the warning tier)"
    assert max(one) < CRITICAL_CONFIDENCE <= max(two)


def test_a_short_overflow_far_ahead_pages_only_as_it_nears():
    """The three Wan jobs overflow only during their last 30 s: read 7 minutes ahead on learned
    ages that may drift by a tenth of that, the collision is not yet likely; once it is within
    300 s (30 s of drift), it is. What the critical tier costs in lead on spiky collisions."""
    confidences = together_confidences(2)
    assert confidences[0] < CRITICAL_CONFIDENCE <= confidences[-1]


def profile(peaks: tuple[int, ...]) -> WorkloadProfile:
    top = max(peaks)
    return WorkloadProfile("job", top, 50.0, 100.0, len(peaks), 20, ((0.0, top // 2), (50.0, top)), 1.0,
                           recent_peaks=peaks)


def test_spread_of_learned_peaks_weakens_grounding():
    tight = ProcessState(1, GiB, 10.0, profile((20 * GiB, 20 * GiB)), basis="learned")
    wide = replace(tight, profile=profile((16 * GiB, 20 * GiB)))
    missed = replace(tight, profile=profile((20 * GiB, 12 * GiB, 20 * GiB)))  # one run's spike fell between polls
    assert peak_spread(tight) == 0.0 and grounding(tight) == 1.0
    assert abs(peak_spread(wide) - 0.1) < 1e-9 and abs(grounding(wide) - 0.7) < 1e-9
    assert peak_spread(missed) == 0.0 and grounding(missed) == 1.0


def two_growing(basis: str, capacity: int) -> tuple[list[ProcessState], object]:
    grounded = ProcessState(1, 10 * GiB, 10.0, profile((20 * GiB, 20 * GiB)), position=10.0, basis="learned")
    other = ProcessState(2, 10 * GiB, 10.0, basis=basis, floor_bytes=20 * GiB if basis == "declared" else 0)
    states = [grounded, other]
    return states, forecast_device(states, capacity)


def test_growth_resting_on_a_declared_size_is_not_critical():
    states, forecast = two_growing("declared", 36 * GiB)
    confidence = contention_confidence(states, forecast)
    assert confidence is not None and confidence < CRITICAL_CONFIDENCE


def test_overflow_by_what_is_held_now_is_certain_and_none_without_contention():
    states = [ProcessState(1, 30 * GiB, 10.0), ProcessState(2, 30 * GiB, 10.0)]
    assert contention_confidence(states, forecast_device(states, 50 * GiB)) == 1.0
    assert contention_confidence(states, forecast_device(states, 80 * GiB)) is None


def test_an_overflow_within_the_peaks_spread_is_not_likely():
    """Learned peaks 20 and 19 GiB (5 % apart): an overflow of 0.5 GiB is inside that spread."""
    p = profile((19 * GiB, 20 * GiB))
    states = [ProcessState(i, 10 * GiB, 10.0, p, position=10.0, basis="learned") for i in (1, 2)]
    near = contention_confidence(states, forecast_device(states, int(39.5 * GiB)))
    far = contention_confidence(states, forecast_device(states, 30 * GiB))
    assert near is not None and far is not None
    assert near < CRITICAL_CONFIDENCE <= far
