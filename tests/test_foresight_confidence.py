"""Confidence of a predicted contention: what the forecast rests on decides the alert tier."""

from __future__ import annotations

from dataclasses import replace

from exporter.foresight import Foresight
from exporter.foresight.confidence import (
    CRITICAL_CONFIDENCE,
    HOLD_DOWN_SECONDS,
    PAGE_KEPT_SECONDS,
    SINGLE_RUN,
    UNKNOWN_SPREAD,
    YOUNGEST_SECONDS,
    after_kill,
    contention_confidence,
    grounding,
    hold_confidence,
    late_growth,
    margin_growth,
    mark_due,
    may_have_ended,
    peak_spread,
    trusted_spread,
    ungrounded_share,
)
from exporter.foresight.forecast import ProcessState, forecast_device
from exporter.foresight.profiles import RunRecorder, WorkloadProfile, learn_run, learn_running
from tests.conftest import bench_module
from foresight_scenarios import WAN_DURATION, Job, learn_solo_run, mps_gpu_snapshot, replay

GiB = 2**30


def together_confidences(solo_runs: int, server: bool = False, server_gib: int = 15) -> list[float]:
    """Learn the Wan job from ``solo_runs`` runs alone, then start three together (99 GiB at their
    final peak in a 79 GiB H100), or two beside a steady 15 GiB server (81 GiB: a narrow
    overflow): the device's confidence at every poll where contention is predicted."""
    foresight = Foresight()
    t = 1_000_000.0
    for i in range(solo_runs):
        t = learn_solo_run(foresight, t, pid=101 + i)
    jobs = [Job(pid=300 + i, start=t + 10.0) for i in range(2 if server else 3)]
    if server:
        jobs.append(Job(pid=399, start=t, duration=2 * WAN_DURATION, memory=lambda age: server_gib * GiB,
                        cmdline="python3 embed_server.py"))
    return [result.devices[0].confidence for _, result in replay(foresight, jobs, t, t + WAN_DURATION - 60.0)
            if result.devices and result.devices[0].confidence is not None]


def test_a_clear_overflow_on_learned_runs_pages():
    for runs in (1, 2):
        confidences = together_confidences(runs)
        assert confidences, "the three jobs together must be predicted to overflow"
        assert max(confidences) >= CRITICAL_CONFIDENCE
        assert all(0.0 <= c <= 1.0 for c in confidences)


def imminent_threshold() -> float:
    """The confidence the shipped imminent critical rule asks for (alerts/gpushare-memory.yml)."""
    import re
    from pathlib import Path

    import yaml

    rules = yaml.safe_load((Path(__file__).resolve().parent.parent / "alerts" / "gpushare-memory.yml").read_text())
    expr = next(r["expr"] for r in rules["groups"][0]["rules"]
                if r.get("alert") == "GpuMemoryContentionPredicted" and r["labels"].get("horizon") == "imminent")
    return float(re.search(r"confidence_ratio\s*>=\s*([0-9.]+)", expr).group(1))


def test_a_clear_overflow_on_a_job_learned_once_reaches_the_imminent_rule():
    """Three jobs learned from one run each, started together, 20 GiB over: a collision under 30 s away
    (the imminent rule's case) is most often a job that just started beside others learned once. One run
    grounds SINGLE_RUN, as much as the imminent rule asks; at 0.85 (the fifth round) no collision of jobs
    learned once could page in the last 30 s before it."""
    assert SINGLE_RUN >= imminent_threshold()
    assert max(together_confidences(1)) >= imminent_threshold()


def test_one_run_grounds_less_than_agreeing_runs_and_more_than_spread_ones():
    """One run is assumed to spread as 9 in 10 profiles of several runs do (UNKNOWN_SPREAD): below two runs
    that agree, above three whose typical peak is 5 % below the top."""
    once = ProcessState(1, GiB, 10.0, profile((20 * GiB,)), basis="learned")
    agree = replace(once, profile=profile((20 * GiB, 20 * GiB)))
    apart = replace(once, profile=profile((19 * GiB, 19 * GiB, 20 * GiB)))  # median 5 % below the peak
    assert grounding(apart) < grounding(once) == SINGLE_RUN < grounding(agree)
    assert abs(grounding(replace(once, basis="scaled")) - 0.6 * SINGLE_RUN) < 1e-9


def test_a_narrow_overflow_pages_on_agreeing_runs_but_only_warns_on_one():
    """1.8 GiB over (2.3 % of the H100): two runs that agree need only the 2 % margin; one run is assumed
    to spread UNKNOWN_SPREAD, and 1/30 of the jobs' growth (0.7 GiB in their last minutes) leaves too
    little. A GiB more overflow (16 GiB server) is past one run's spread too: it pages."""
    one, two = together_confidences(1, server=True), together_confidences(2, server=True)
    assert one and two, "both predict the overflow (the warning tier)"
    assert max(one) < CRITICAL_CONFIDENCE <= max(two)
    assert max(together_confidences(1, server=True, server_gib=16)) >= CRITICAL_CONFIDENCE


def test_an_overflow_past_the_peaks_spread_pages_though_three_spreads_would_not_clear():
    """Two replicas learned from three runs whose typical (median) peak is 5 % below the top: each grows
    10 -> 20 GiB, 2.5 GiB over a 37.5 GiB device. Were each replica to peak where its typical run did,
    1 GiB (5 % of the growth) less, the overflow would still exceed the 2 % margin: likely, and grounded
    0.85, a page. Taking SPREAD_WEIGHT spreads of the growth away (3 GiB, the sixth round) left nothing;
    ungrounded_share takes the spread once. Past 2.5 GiB of spread it is not likely (peaks 16/16/20)."""
    typical = profile((19 * GiB, 19 * GiB, 20 * GiB))
    states = [ProcessState(i, 10 * GiB, 10.0, typical, position=10.0, basis="learned") for i in (1, 2)]
    forecast = forecast_device(states, int(37.5 * GiB))
    assert forecast.headroom_bytes == -int(2.5 * GiB)
    assert abs(ungrounded_share(states[0]) - 0.05) < 1e-9 and abs(grounding(states[0]) - 0.85) < 1e-9
    assert contention_confidence(states, forecast) >= CRITICAL_CONFIDENCE
    wide = [replace(s, profile=profile((16 * GiB, 16 * GiB, 20 * GiB))) for s in states]
    assert contention_confidence(wide, forecast_device(wide, int(37.5 * GiB))) < CRITICAL_CONFIDENCE
    once = replace(states[0], profile=profile((20 * GiB,)))
    assert abs(ungrounded_share(once) - UNKNOWN_SPREAD) < 1e-9
    assert abs(ungrounded_share(replace(once, basis="scaled")) - (1 - 0.6 * (1 - UNKNOWN_SPREAD))) < 1e-9
    assert ungrounded_share(replace(once, basis="declared", profile=None)) == 1.0


def spiky(position: float) -> list[ProcessState]:
    """Two replicas of a twice-learned job (10 GiB for 1000 s, 20 GiB from 900 to 930 s) at
    ``position`` seconds: on a 36 GiB device their spikes overflow it for 30 s only."""
    top = 20 * GiB
    job = WorkloadProfile("spiky", top, 900.0, 1000.0, 2, 40, ((0.0, 10 * GiB), (900.0, top), (930.0, 10 * GiB)),
                          1.0, recent_peaks=(top, top))
    return [ProcessState(i, 10 * GiB, position, job, position=position, basis="learned") for i in (1, 2)]


def test_a_short_overflow_far_ahead_pages_only_as_it_nears():
    """Learned ages drift by about TIMING_SHARE of how far ahead they are read: a 30 s overlap
    800 s ahead needs them to meet within less than that and is a warning; 500 s ahead (25 s of
    drift) it pages. What the critical tier costs in lead on spiky collisions."""
    far, near = spiky(900.0 - 800.0), spiky(900.0 - 500.0)
    far_forecast, near_forecast = forecast_device(far, 36 * GiB), forecast_device(near, 36 * GiB)
    assert far_forecast.contention_in_seconds == 800.0 and near_forecast.contention_in_seconds == 500.0
    assert contention_confidence(far, far_forecast) < CRITICAL_CONFIDENCE  # 30 s / (0.05 x 800 s) = 0.75
    assert contention_confidence(near, near_forecast) >= CRITICAL_CONFIDENCE  # 30 s / 25 s


def profile(peaks: tuple[int, ...]) -> WorkloadProfile:
    top = max(peaks)
    return WorkloadProfile("job", top, 50.0, 100.0, len(peaks), 20, ((0.0, top // 2), (50.0, top)), 1.0,
                           recent_peaks=peaks)


def test_spread_of_learned_peaks_weakens_grounding():
    tight = ProcessState(1, GiB, 10.0, profile((20 * GiB, 20 * GiB)), basis="learned")
    wide = replace(tight, profile=profile((16 * GiB, 16 * GiB, 20 * GiB)))
    missed = replace(tight, profile=profile((20 * GiB, 12 * GiB, 20 * GiB)))  # one run's spike fell between polls
    assert peak_spread(tight) == 0.0 and grounding(tight) == 1.0
    assert abs(peak_spread(wide) - 0.2) < 1e-9 and abs(grounding(wide) - 0.4) < 1e-9
    assert peak_spread(missed) == 0.0 and grounding(missed) == 1.0


def test_two_runs_that_disagree_ground_as_one_run_on_the_higher_peak():
    """Two complete runs peaking 16 and 20 GiB: their mean is 10 % below the top (peak_spread, what
    the margin check takes away), but a sampled peak is a lower bound, so the higher run is taken as
    typical (trusted_spread) and the pair grounds as one run does (0.9), not 1 - 3 x 10 % (0.7). Four
    runs take the upper of their two middle peaks; odd counts their median, as before."""
    two = ProcessState(1, GiB, 10.0, profile((16 * GiB, 20 * GiB)), basis="learned")
    assert abs(peak_spread(two) - 0.1) < 1e-9
    assert abs(trusted_spread(two) - UNKNOWN_SPREAD) < 1e-9 and abs(grounding(two) - SINGLE_RUN) < 1e-9
    close = replace(two, profile=profile((19.8 * GiB, 20 * GiB)))  # 0.5 % apart: less than one run's spread
    assert abs(trusted_spread(close) - 0.005) < 1e-9 and grounding(close) > SINGLE_RUN
    four = replace(two, profile=profile((12 * GiB, 16 * GiB, 18 * GiB, 20 * GiB)))
    assert abs(trusted_spread(four) - 0.1) < 1e-9 and abs(peak_spread(four) - 0.15) < 1e-9
    three = replace(two, profile=profile((16 * GiB, 16 * GiB, 20 * GiB)))
    assert trusted_spread(three) == peak_spread(three)
    # a peak only a running or killed run reached is not a complete run's: still spread, not trusted
    raised = replace(two, profile=replace(profile((10 * GiB, 10 * GiB)), peak_bytes=20 * GiB))
    assert abs(trusted_spread(raised) - 0.5) < 1e-9 and grounding(raised) == 0.0


def test_replicas_of_two_disagreeing_runs_page_when_the_overflow_survives_their_mean():
    """Two replicas of a job whose two learned runs peaked 36 and 69 GiB (a spike one run's polls
    missed), both on their first step, on an 80 GiB device: 58 GiB over at the higher peak, 25 GiB at the mean.
    Grounded as one run on the higher peak and clear of the margin at the mean: a page. At the mean
    spread (0.24) its grounding was 0.28."""
    job = profile((36 * GiB, 69 * GiB))
    # each at its first step's level (not below it: a run late for its step is ungrounded, late_growth)
    states = [ProcessState(i, job.timeline[0][1], 10.0, job, position=10.0, basis="learned") for i in (1, 2)]
    forecast = forecast_device(states, 80 * GiB)
    assert forecast.headroom_bytes == -58 * GiB
    assert contention_confidence(states, forecast) >= CRITICAL_CONFIDENCE


def two_growing(basis: str, capacity: int) -> tuple[list[ProcessState], object]:
    grounded = ProcessState(1, 10 * GiB, 10.0, profile((20 * GiB, 20 * GiB)), position=10.0, basis="learned")
    other = ProcessState(2, 10 * GiB, 10.0, basis=basis, floor_bytes=20 * GiB if basis == "declared" else 0)
    states = [grounded, other]
    return states, forecast_device(states, capacity)


def test_growth_resting_on_a_declared_size_is_not_critical():
    states, forecast = two_growing("declared", 36 * GiB)
    confidence = contention_confidence(states, forecast)
    assert confidence is not None and confidence < CRITICAL_CONFIDENCE


def test_a_collision_that_needs_a_declared_or_trend_growth_does_not_page_however_small_it_is():
    """A learned job growing 10 -> 20 GiB in 40 s beside one declared at 11 GiB (holding 10), or
    growing 1 GiB in those 40 s on its trend: 31 GiB on a 30 GiB device. The declared GiB is a tenth of the growth, so the growth-weighted grounding
    is 0.96, but a declared size (like a trend) says how much, not when: without it there is no
    overflow, so no page. A learned overflow that does not need it still pages."""
    grounded = ProcessState(1, 10 * GiB, 10.0, profile((20 * GiB, 20 * GiB)), position=10.0, basis="learned")
    for basis in ("declared", "trend"):
        other = ProcessState(2, 10 * GiB, 10.0, basis=basis, floor_bytes=11 * GiB if basis == "declared" else 0,
                             trend_bytes_per_second=GiB / 40 if basis == "trend" else 0.0,
                             trend_seconds=40.0 if basis == "trend" else 0.0)
        states = [grounded, other]
        needs = contention_confidence(states, forecast_device(states, 30 * GiB))
        assert needs is not None and needs < CRITICAL_CONFIDENCE, basis
        clear = contention_confidence(states, forecast_device(states, 26 * GiB))
        assert clear is not None and clear >= CRITICAL_CONFIDENCE, basis


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



def test_a_peak_raised_by_a_running_run_but_never_seen_in_a_complete_one_does_not_page():
    """A job polled alone holds 8 GiB; its 3 s spikes to 16 GiB fall between polls, so its
    complete run learns a flat 8 GiB. A replica running beside others is polled at other moments
    and sees one: the running run raises the learned peak to 16 GiB (profiles.learn_running), and
    the flat timeline is scaled up to it. Five replicas at their 8 GiB plateau are then expected
    at 16 GiB each, 80 GiB on a 64 GiB device: the warning may say so, but nothing says when in a
    run that peak comes, so it must not page."""
    solo = RunRecorder("evalloop", 0.0, True, 64 * GiB)
    for age in range(0, 400, 5):
        solo.add(float(age), min(8 * GiB, 8 * GiB * age // 10))
    flat = learn_run(None, solo, 400.0, truncated=False, poll_interval=5.0)
    running = RunRecorder("evalloop", 500.0, True, 64 * GiB)
    for age in range(2, 200, 5):
        running.add(500.0 + age, 16 * GiB if age % 50 == 2 and age > 30 else min(8 * GiB, 8 * GiB * age // 10))
    raised = learn_running(flat, running, 700.0)
    assert flat.peak_bytes == 8 * GiB and raised.peak_bytes == 16 * GiB and raised.recent_peaks == (8 * GiB,)
    states = [ProcessState(i, 8 * GiB, 100.0, raised, position=100.0, basis="learned") for i in range(5)]
    forecast = forecast_device(states, 64 * GiB)
    assert forecast.headroom_bytes < 0, "the raised peak is a predicted overflow (the warning tier)"
    assert peak_spread(states[0]) == 0.5
    assert contention_confidence(states, forecast) < CRITICAL_CONFIDENCE
    # the same replicas on a profile whose complete run saw its 16 GiB spike (at 150 s of its age) page. (Not
    # the raised flat 16 GiB timeline with a complete run at 16 GiB: a run at 8 GiB 90 s into a 16 GiB step is
    # late for it, and when it rises is not in its profile: confidence.late_growth.)
    spike = tuple(step for step in flat.timeline if step[0] < 150.0) + ((150.0, 16 * GiB), (153.0, 8 * GiB))
    seen = replace(flat, peak_bytes=16 * GiB, timeline=spike, recent_peaks=(16 * GiB,))
    states = [replace(s, profile=seen) for s in states]
    assert contention_confidence(states, forecast_device(states, 64 * GiB)) >= CRITICAL_CONFIDENCE


def test_a_cleared_page_is_not_repeated_for_the_same_overflow_within_the_hold_down():
    """Hysteresis: a contention paged (0.9), cleared for longer than the grace, then predicted
    again 5 minutes later (its page, kept PAGE_KEPT_SECONDS, has ended) with the same overflow stays
    a warning; one whose overflow grew by more than MIN_MARGIN_SHARE of the device pages again, and
    HOLD_DOWN_SECONDS after the page's end anything may."""
    capacity, grace = 40 * GiB, 60.0
    confidence, hold = hold_confidence(0.9, None, 0.0, 2 * GiB, capacity, grace)
    assert confidence == 0.9
    confidence, hold = hold_confidence(0.3, hold, 5.0, 2 * GiB, capacity, grace)
    assert confidence == 0.9, "held while the contention stays predicted"
    assert hold_confidence(None, hold, 10.0, 0, capacity, grace)[0] is None
    again, _ = hold_confidence(0.9, hold, 300.0, 2 * GiB, capacity, grace)
    assert again < CRITICAL_CONFIDENCE
    grown, _ = hold_confidence(0.9, hold, 300.0, 3 * GiB, capacity, grace)  # 1 GiB more: 2.5 % of 40 GiB
    assert grown >= CRITICAL_CONFIDENCE
    ended = 5.0 + PAGE_KEPT_SECONDS  # the kept page resolves: the hold-down counts from there
    held, _ = hold_confidence(0.9, hold, ended + HOLD_DOWN_SECONDS - 1.0, 2 * GiB, capacity, grace)
    assert held < CRITICAL_CONFIDENCE
    later, _ = hold_confidence(0.9, hold, ended + HOLD_DOWN_SECONDS + 1.0, 2 * GiB, capacity, grace)
    assert later >= CRITICAL_CONFIDENCE
    never_paged, hold = hold_confidence(0.5, None, 0.0, 2 * GiB, capacity, grace)
    assert hold_confidence(0.9, hold, 300.0, 2 * GiB, capacity, grace)[0] == 0.9, "only a page is held down"


def test_a_contention_back_while_its_page_is_still_kept_is_that_page_not_a_repeat():
    """A page (0.9) whose contention clears stays up PAGE_KEPT_SECONDS (the critical rules'
    keep_firing_for). The same overflow predicted again 2 minutes later, a peak late because its
    co-tenants run slower than when it was learned, keeps that page going (no new page is sent);
    held down only once the page has ended."""
    capacity, grace = 40 * GiB, 60.0
    _, hold = hold_confidence(0.9, None, 0.0, 2 * GiB, capacity, grace)
    _, hold = hold_confidence(0.9, hold, 5.0, 2 * GiB, capacity, grace)  # last poll predicting it: cleared after
    back, _ = hold_confidence(0.9, hold, 5.0 + 120.0, 2 * GiB, capacity, grace)
    assert back >= CRITICAL_CONFIDENCE
    after, _ = hold_confidence(0.9, hold, 5.0 + PAGE_KEPT_SECONDS + 5.0, 2 * GiB, capacity, grace)
    assert after < CRITICAL_CONFIDENCE


def critical_keep_firing_seconds() -> set[float]:
    """The keep_firing_for of every critical contention rule in alerts/gpushare-memory.yml (seconds)."""
    import re
    from pathlib import Path

    import yaml

    rules = yaml.safe_load((Path(__file__).resolve().parent.parent / "alerts" / "gpushare-memory.yml").read_text())
    units = {"s": 1, "m": 60, "h": 3600}
    return {sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)([smh])", r["keep_firing_for"]))
            for g in rules["groups"] for r in g["rules"]
            if r.get("alert", "").endswith("MemoryContentionPredicted") and r["labels"]["severity"] == "critical"}


def test_the_kept_page_window_is_the_critical_rules_keep_firing_for():
    assert critical_keep_firing_seconds() == {PAGE_KEPT_SECONDS}


def periodic(stagger: float, eval_at: tuple[float, ...] = (300.0, 600.0, 900.0)) -> WorkloadProfile:
    """A trainer learned twice: 10 GiB, with a 40 s evaluation spike to 20 GiB at each of eval_at."""
    steps = [(0.0, 10 * GiB)]
    for at in eval_at:
        steps += [(at, 20 * GiB), (at + 40.0, 10 * GiB)]
    return WorkloadProfile("trainer", 20 * GiB, eval_at[0], 1200.0, 2, 400, tuple(steps), 1.0,
                           recent_peaks=(20 * GiB, 20 * GiB))


def test_staggered_periodic_spikes_are_a_collision_only_if_the_stagger_survives_the_slowdown():
    """Two replicas of a trainer whose evaluations (not a clock: progress.is_clock) are read at
    age over one slowdown. Started 600 s apart, the first's third evaluation and the second's
    first are predicted to meet for 40 s, 100 s from now, on a 36 GiB device; but a slowdown off
    by SLOWDOWN_SHARE moves them 60 s apart: a warning. Started together, their first spikes meet
    whatever the slowdown: a page."""
    job = periodic(0.0)
    staggered = [ProcessState(1, 10 * GiB, 800.0, job, position=800.0, basis="learned"),
                 ProcessState(2, 10 * GiB, 200.0, job, position=200.0, basis="learned")]
    together = [ProcessState(i, 10 * GiB, 200.0, job, position=200.0, basis="learned") for i in (1, 2)]
    for states, pages in ((staggered, False), (together, True)):
        forecast = forecast_device(states, 36 * GiB)
        assert forecast.contention_in_seconds == 100.0
        confidence = contention_confidence(states, forecast)
        assert (confidence >= CRITICAL_CONFIDENCE) is pages, (confidence, pages)


def test_memory_held_past_a_runs_learned_end_does_not_ground_a_page():
    """A run already past its learned end is held as long again as it is late: a guess. A learned
    co-tenant's spike 100 s from now overflows the device only if that run is still there, so it is
    a warning, not a page; the same spike beside a run within its learned life pages."""
    spike = WorkloadProfile("render", 26 * GiB, 220.0, 400.0, 2, 80,
                            ((0.0, 13 * GiB), (215.0, 26 * GiB), (260.0, 13 * GiB)), 1.0,
                            recent_peaks=(26 * GiB, 26 * GiB), recent_peak_ages=(215.0, 218.0))
    trainer = WorkloadProfile("trainer", 19 * GiB, 100.0, 900.0, 2, 200, ((0.0, 19 * GiB),), 1.0,
                              recent_peaks=(19 * GiB, 19 * GiB), recent_peak_ages=(100.0, 100.0))
    render = ProcessState(1, 13 * GiB, 115.0, spike, position=115.0, basis="learned")
    for age, pages in ((1050.0, False), (500.0, True)):
        other = ProcessState(2, 19 * GiB, age, trainer, position=age, basis="learned")
        forecast = forecast_device([render, other], 40 * GiB, grace=5.0)
        assert forecast.contention_in_seconds == 100.0
        assert (contention_confidence([render, other], forecast, 5.0) >= CRITICAL_CONFIDENCE) is pages, age


def confidences_beside(server_memory) -> list[float]:
    """One Wan job (learned once alone: 22 GiB, 33 GiB in its last 30 s) started beside a server
    never seen before, started with it: the device's confidence at every poll where contention is
    predicted (33 GiB + the server's 50 GiB overflow the 78.6 GiB H100)."""
    foresight = Foresight()
    t = learn_solo_run(foresight)
    jobs = [Job(pid=301, start=t + 10.0),
            Job(pid=399, start=t, duration=4000.0, memory=server_memory, cmdline="tritonserver --model-repository=/m")]
    return [result.devices[0].confidence for _, result in replay(foresight, jobs, t, t + WAN_DURATION - 60.0)
            if result.devices and result.devices[0].confidence is not None]


def load_waves(age: float) -> int:
    """A server's memory: 45 GiB once loaded, then its KV cache in load waves of 100 s, 35 and 50 GiB."""
    if age < 150.0:
        return 45 * GiB
    return 35 * GiB if int((age - 150.0) // 100) % 2 == 0 else 50 * GiB


def test_a_server_that_gave_memory_back_is_not_counted_on_to_hold_its_high():
    """A server whose cache holds 50 GiB steadily makes the Wan job's learned end a page. One whose
    cache comes and goes in load waves (it fell from 45 to 35 GiB before its first 50 GiB wave) is
    at a high of its own whenever the overflow is predicted: nothing says it still holds that when
    the job peaks, so a warning."""
    steady = confidences_beside(lambda age: 50 * GiB)
    waves = confidences_beside(load_waves)
    assert steady and waves, "both predict the overflow (the warning tier)"
    assert max(steady) >= CRITICAL_CONFIDENCE > max(waves)


def test_a_kill_ends_the_held_confidence_of_a_contention_no_longer_predicted():
    """The collision a contention was held for happened: at the poll that notices the kill, a contention
    no longer predicted drops what it held, so one predicted again within the bridged gap starts from its
    own confidence; one still predicted at that poll keeps its page (docs/foresight.md, seventh round)."""
    capacity, grace = 40 * GiB, 60.0
    _, hold = hold_confidence(0.97, None, 0.0, 2 * GiB, capacity, grace)
    _, gone = hold_confidence(None, hold, 5.0, 0, capacity, grace)  # the kill's poll: no contention now
    bridged, _ = hold_confidence(0.1, gone, 45.0, 1 * GiB, capacity, grace)
    assert bridged == 0.97, "without a kill a gap under the grace is bridged"
    after, _ = hold_confidence(0.1, after_kill(gone, 5.0), 45.0, 1 * GiB, capacity, grace)
    assert after == 0.1
    again, _ = hold_confidence(0.9, after_kill(gone, 5.0), 45.0, 2 * GiB, capacity, grace)
    assert again == 0.9, "nor is a contention after a kill held down as a repeat"
    _, still = hold_confidence(0.5, hold, 5.0, 2 * GiB, capacity, grace)  # predicted at the kill's poll
    assert after_kill(still, 5.0) == still
    assert after_kill(None, 5.0) is None


def test_after_an_oom_kill_a_new_contention_is_not_paged_on_the_held_confidence():
    """Three Wan jobs learned once collide at their final spike (well grounded, held at 0.9); one is
    killed and the survivors fit. 10 s later a job that only declares its size (growth that says how much,
    never when: confidence 0) makes the device overflow again: its forecast is exported at its own 0, not
    at the 0.9 held for the collision that already happened, which would page."""
    foresight = Foresight()
    t = learn_solo_run(foresight, 1_000_000.0)
    jobs = [Job(pid=300 + i, start=t + 10.0) for i in range(3)]
    kill_at = t + 10.0 + WAN_DURATION - 28.0  # 2 s into the 33 GiB spike
    paged = [r.devices[0].confidence for _, r in replay(foresight, jobs, t, kill_at - 5.0)
             if r.devices and r.devices[0].confidence is not None]
    assert paged and paged[-1] >= CRITICAL_CONFIDENCE
    survivors = jobs[:2]
    foresight.observe(mps_gpu_snapshot(kill_at + 3.0, survivors, oom_kills=1), now=kill_at + 3.0)
    assert foresight.result().devices[0].confidence is None  # the survivors fit: no contention

    declared = Job(pid=400, start=kill_at + 8.0, duration=600.0, memory=lambda age: 5 * GiB,
                   cmdline="python3 serve.py --model big")
    environ = {"GPUSHARE_EXPECTED_PEAK": "40GiB"}

    def with_declaration(now, alive):
        snapshot = mps_gpu_snapshot(now, alive, oom_kills=1)
        (gpu,) = snapshot.gpus
        procs = tuple(replace(p, environ=environ) if p.pid == 400 else p for p in gpu.processes)
        return replace(snapshot, gpus=(replace(gpu, processes=procs),))

    foresight.observe(with_declaration(kill_at + 13.0, survivors + [declared]), now=kill_at + 13.0)
    (row,) = foresight.result().devices
    assert row.forecast.headroom_bytes < 0 and row.confidence == 0.0


def notebook_beside_server(position: float, holds: int) -> tuple[list[ProcessState], object]:
    """A notebook learned twice (4 GiB, then a 20 GiB model from 600 s of its age to its end at 1000 s) at
    ``position`` holding ``holds``, beside a server that holds its learned 20 GiB, on a 36 GiB device: the
    forecast holds the notebook at its step, so the pair is 4 GiB over as soon as it is on it."""
    model = 20 * GiB
    notebook = WorkloadProfile("nb", model, 600.0, 1000.0, 2, 40, ((0.0, 4 * GiB), (600.0, model)), 1.0,
                               recent_peaks=(model, model))
    server = WorkloadProfile("srv", model, 0.0, 5000.0, 2, 40, ((0.0, model),), 1.0, recent_peaks=(model, model))
    states = [ProcessState(1, holds, position, notebook, position=position, basis="learned"),
              ProcessState(2, model, 100.0, server, position=100.0, basis="learned", steady=True)]
    return states, forecast_device(states, 36 * GiB, grace=5.0)


def test_growth_a_learned_run_is_late_for_is_not_grounded():
    """A run 100 s into the step its profile rises to, still at the level before it (a notebook that has not
    loaded its next model, a phase that comes when it comes): the forecast holds it at the step from now on,
    but how late it will be is not in its profile, so the collision that needs the rise does not page. On
    time as polls can tell (its step began within the last poll), or on its step within MATCH_TOLERANCE, it
    does (docs/foresight.md, seventh round)."""
    late, late_forecast = notebook_beside_server(700.0, 4 * GiB)
    assert late_forecast.contention_in_seconds == 0.0 and late_forecast.headroom_bytes == -4 * GiB
    assert late_growth(late[0], 5.0) == 16 * GiB and late_growth(late[1], 5.0) == 0
    assert contention_confidence(late, late_forecast, 5.0) < CRITICAL_CONFIDENCE
    on_time, on_time_forecast = notebook_beside_server(602.0, 4 * GiB)
    assert late_growth(on_time[0], 5.0) == 0
    assert contention_confidence(on_time, on_time_forecast, 5.0) >= CRITICAL_CONFIDENCE
    near, near_forecast = notebook_beside_server(700.0, 17 * GiB)  # 20 / 17 < MATCH_TOLERANCE
    assert late_growth(near[0], 5.0) == 0
    assert contention_confidence(near, near_forecast, 5.0) >= CRITICAL_CONFIDENCE
    ahead, ahead_forecast = notebook_beside_server(500.0, 4 * GiB)  # the rise 100 s ahead: when is learned
    assert ahead_forecast.contention_in_seconds == 100.0 and late_growth(ahead[0], 5.0) == 0
    assert contention_confidence(ahead, ahead_forecast, 5.0) >= CRITICAL_CONFIDENCE


def test_a_cleared_page_is_not_repeated_for_the_same_runs_after_the_hold_down():
    """Past HOLD_DOWN_SECONDS a repeat of a cleared page's overflow stays a warning as long as the device runs
    only the processes of that page (the same runs it was wrong about); a new process on the device, or an
    overflow grown by more than MIN_MARGIN_SHARE of the device, pages (docs/foresight.md, seventh round)."""
    capacity, grace, runs = 40 * GiB, 60.0, frozenset({11, 12})
    _, hold = hold_confidence(0.9, None, 0.0, 2 * GiB, capacity, grace, runs)
    later = HOLD_DOWN_SECONDS + 300.0
    same, _ = hold_confidence(0.9, hold, later, 2 * GiB, capacity, grace, runs)
    assert same < CRITICAL_CONFIDENCE
    fewer, _ = hold_confidence(0.9, hold, later, 2 * GiB, capacity, grace, frozenset({11}))
    assert fewer < CRITICAL_CONFIDENCE
    joined, _ = hold_confidence(0.9, hold, later, 2 * GiB, capacity, grace, runs | {13})
    assert joined == 0.9
    grown, _ = hold_confidence(0.9, hold, later, 3 * GiB, capacity, grace, runs)  # 2.5 % of 40 GiB more
    assert grown == 0.9
    unknown, _ = hold_confidence(0.9, hold, later, 2 * GiB, capacity, grace)
    assert unknown == 0.9, "without the processes named, only the time-bound hold-down applies"


def replicas_at_their_level(level_from: int, capacity: int, adjust: float) -> tuple[list[ProcessState], object]:
    """Three replicas of a twice-learned job that holds ``level_from`` until 50 s and 12 GiB from then (its runs
    agree), 10 s into their runs, on a device of ``capacity``, their workload's forecast raised by ``adjust``
    (the outcome margin after unwarned kills, exporter.foresight.calibration)."""
    top = 12 * GiB
    job = WorkloadProfile("vllm", top, 50.0, 1000.0, 2, 40, ((0.0, level_from), (50.0, top)), 1.0,
                          recent_peaks=(top, top))
    states = [ProcessState(i, level_from, 10.0, job, position=10.0, basis="learned", adjust=adjust) for i in (1, 2, 3)]
    return states, forecast_device(states, capacity, grace=5.0)


def test_growth_only_the_outcome_margin_adds_does_not_page():
    """Three replicas at their learned 12 GiB on a 37 GiB device fit (36 GiB). After an unwarned kill their
    workload is forecast 5 % higher: 37.8 GiB, "collision now". No run of it ever went that high; the margin
    makes the warning careful, it does not make an OOM likely (corpus 3 seed 7007 ep 7: survivors paged for
    38 minutes after a kill; docs/foresight.md, eighth round). A collision that clears without the margin
    (replicas rising 6 -> 12 GiB on a 33 GiB device: 3 GiB over unadjusted) still pages."""
    flat, flat_forecast = replicas_at_their_level(12 * GiB, 37 * GiB, 1.05)
    assert flat_forecast.contention_in_seconds == 0.0 and flat_forecast.headroom_bytes < 0
    assert all(margin_growth(s, flat_forecast.at_contention_bytes[s.pid]) > 0.5 * GiB for s in flat)
    assert contention_confidence(flat, flat_forecast, 5.0) < CRITICAL_CONFIDENCE
    unadjusted = [replace(s, adjust=1.0) for s in flat]
    assert contention_confidence(unadjusted, forecast_device(unadjusted, 37 * GiB, grace=5.0), 5.0) is None
    rising, rising_forecast = replicas_at_their_level(6 * GiB, 33 * GiB, 1.05)
    assert rising_forecast.contention_in_seconds == 40.0
    assert contention_confidence(rising, rising_forecast, 5.0) >= CRITICAL_CONFIDENCE
    assert margin_growth(replace(rising[0], adjust=0.9), rising_forecast.at_contention_bytes[1]) == 0  # slack


def beside_a_declared_process(age: float, position: float = 10.0) -> tuple[list[ProcessState], object]:
    """A twice-learned job rising 10 -> 20 GiB at 50 s of its run (at ``position``), beside a process declared
    at 30 GiB that holds it already and has run ``age`` seconds, on a 46 GiB device: 4 GiB over."""
    learned = ProcessState(1, 10 * GiB, position, profile((20 * GiB, 20 * GiB)), position=position, basis="learned")
    declared = ProcessState(2, 30 * GiB, age, basis="declared", floor_bytes=30 * GiB)
    states = [learned, declared]
    return states, forecast_device(states, 46 * GiB, grace=5.0)


def test_what_a_process_of_unknown_duration_holds_is_grounded_as_far_as_it_has_run():
    """No profile says when a declared (or trend) process ends; one that has run ``age`` seconds is about as
    likely to stop within another ``age`` as to go on, so eta / (age + eta) of what it holds is not grounded
    at a collision eta away (may_have_ended; the declared preprocessors and ETL jobs of corpus 2 seeds 3 and
    5005 and corpus 1 seed 7007 ended before the learned co-tenant's rise). After 1000 s, 40 s ahead: 1.2 of
    its 30 GiB, the 4 GiB overflow clears, a page. After 60 s (counted as YOUNGEST_SECONDS: a job spends its
    first minutes starting): 3.5 GiB, a warning. At the next poll nothing
    is left to end: a page. A learned run (its profile says when it ends) and a process held at what it
    uses (basis current) lose nothing."""
    old, old_forecast = beside_a_declared_process(1000.0)
    assert old_forecast.contention_in_seconds == 40.0 and old_forecast.headroom_bytes == -4 * GiB
    assert abs(may_have_ended(old[1], 40.0) - 30 * GiB * 40 / 1040) < 1
    young_share = 30 * GiB * 40 / (YOUNGEST_SECONDS + 40)
    assert abs(may_have_ended(replace(old[1], age_seconds=60.0), 40.0) - young_share) < 1
    assert contention_confidence(old, old_forecast, 5.0) >= CRITICAL_CONFIDENCE
    young, young_forecast = beside_a_declared_process(60.0)
    assert contention_confidence(young, young_forecast, 5.0) < CRITICAL_CONFIDENCE
    now, now_forecast = beside_a_declared_process(60.0, position=48.0)
    assert now_forecast.contention_in_seconds <= 5.0
    assert contention_confidence(now, now_forecast, 5.0) >= CRITICAL_CONFIDENCE
    assert may_have_ended(young[0], 40.0) == 0
    assert may_have_ended(replace(young[1], basis="trend"), 40.0) == may_have_ended(young[1], 40.0)
    assert may_have_ended(replace(young[1], basis="current"), 40.0) == 0


def held_through(polls: list[tuple[float, float | None, float]], poll: float = 5.0) -> list[float | None]:
    """The exported confidence of one device over polls (time, ETA, raw confidence), as state.py computes it:
    mark_due, then hold_confidence."""
    hold, out = None, []
    for now, eta, raw in polls:
        hold = mark_due(hold, now, eta, poll)
        confidence, hold = hold_confidence(raw, hold, now, 2 * GiB, 40 * GiB, 60.0, frozenset({1, 2}))
        out.append(confidence)
    return out


def test_a_collision_predicted_now_that_does_not_come_is_late():
    """A collision "now" (within the next poll) at three polls in a row without an OOM is a run late for its
    rise (a spike due at a landmark it has not crossed): grounded 0.92 at the fourth poll, it stays a
    warning. The same confidence the first time the collision is due pages, and a page already up stays up
    while the collision stays due. A collision that was ahead until this poll is not late; a poll that did
    not predict it breaks the row (docs/foresight.md, eighth round)."""
    late = held_through([(0.0, 0.0, 0.5), (5.0, 0.0, 0.5), (10.0, 0.0, 0.5), (15.0, 0.0, 0.92)])
    assert late[-1] < CRITICAL_CONFIDENCE
    on_time = held_through([(0.0, 0.0, 0.92), (5.0, 0.0, 0.92), (10.0, 0.0, 0.92), (15.0, 0.0, 0.92)])
    assert on_time == [0.92] * 4
    arriving = held_through([(0.0, 30.0, 0.5), (5.0, 25.0, 0.5), (10.0, 20.0, 0.5), (15.0, 0.0, 0.92),
                             (20.0, 0.0, 0.92)])
    assert arriving[-2:] == [0.92, 0.92]
    broken = held_through([(0.0, 0.0, 0.5), (5.0, 0.0, 0.5), (10.0, None, None), (15.0, 0.0, 0.92)])
    assert broken[-1] == 0.92
    assert mark_due(None, 0.0, None, 5.0) is None, "no contention predicted: nothing to remember"


def test_a_larger_collision_after_a_late_one_is_news_and_pages():
    """Late is said of the overflow the polls in a row predicted. "Now" by 1 GiB of a 40 GiB device at low
    confidence for three polls, then "now" by 6 GiB (more than MIN_MARGIN_SHARE of the device larger:
    memory moved towards a bigger collision, as a preallocating replica does) at 0.93 pages; the same
    confidence on an overflow within the margin of the late one stays a warning (corpus 3 seed 8008 ep 18;
    docs/foresight.md, eighth round)."""
    def held(overflows_gib: list[float], raws: list[float]) -> list[float | None]:
        hold, out = None, []
        for i, (over, raw) in enumerate(zip(overflows_gib, raws)):
            now = 5.0 * i
            hold = mark_due(hold, now, 0.0, 5.0, int(over * GiB), 40 * GiB)
            confidence, hold = hold_confidence(raw, hold, now, int(over * GiB), 40 * GiB, 60.0, frozenset({1, 2}))
            out.append(confidence)
        return out

    larger = held([1.0, 1.0, 1.0, 6.0, 6.0], [0.14, 0.14, 0.14, 0.93, 0.93])
    assert larger[-2:] == [0.93, 0.93]
    same = held([1.0, 1.0, 1.0, 1.5, 1.5], [0.14, 0.14, 0.14, 0.93, 0.93])
    assert same[-1] < CRITICAL_CONFIDENCE, "within the margin it is the late collision still"


def test_the_replays_factors_are_the_confidences_own():
    """bench/foresight_replay.py `components` (the miss classes of docs/foresight.md) reads the factors
    contention_confidence takes the least of, not a copy of their sums: a notebook late for its step is held
    under the tier by `clears` (its late growth is ungrounded), and the factors' least is the confidence."""
    replay = bench_module("foresight_replay")
    for position, holds in ((700.0, 4 * GiB), (602.0, 4 * GiB), (500.0, 4 * GiB)):
        states, forecast = notebook_beside_server(position, holds)
        factors = replay.components({"states": states, "forecast": forecast, "grace": 5.0})
        least = min(factors["grounded"], factors["clears"], factors["timing"])
        assert least == contention_confidence(states, forecast, 5.0)
    late, late_forecast = notebook_beside_server(700.0, 4 * GiB)
    factors = replay.components({"states": late, "forecast": late_forecast, "grace": 5.0})
    assert factors["clears"] < CRITICAL_CONFIDENCE <= min(factors["grounded"], factors["timing"])
    assert factors["ungrounded_gib"] >= 16.0  # the rise it is late for, whole
