"""A workload whose runs peak at no fixed age (a GPU test suite whose tests run in another order each
time): a run late for the peak its newest learned run had is still expected to reach it before its end,
and pages only where the overflow holds whenever it comes (exporter.foresight.unscheduled)."""

from __future__ import annotations

from exporter.foresight import Foresight
from exporter.foresight.confidence import CRITICAL_CONFIDENCE
from exporter.foresight.forecast import ProcessState, follows, forecast_device, process_curve
from exporter.foresight.profiles import PEAK_BAND, RunRecorder, WorkloadProfile, learn_run
from exporter.foresight.progress import RunProgress
from exporter.foresight.unscheduled import still_to_come, unscheduled, whenever_overflow
from foresight_scenarios import Job, replay

GiB = 2**30
SUITE = "python3 -m pytest -q tests/gpu/test_kernels.py -k smoke"
SERVER = "python3 -m serve_worker --model bge-reranker --workers 1"
SUITE_SECONDS = 180.0
SPIKE_GIB = 24


def suite_memory(spike_at: float | None):
    """A smoke suite: 2 GiB of base after its imports, one test that takes SPIKE_GIB for 6 s at ``spike_at``."""
    def memory(age: float) -> int:
        if spike_at is not None and spike_at <= age < spike_at + 6.0:
            return SPIKE_GIB * GiB
        return 2 * GiB if age >= 8.0 else int(2 * GiB * age / 8.0)
    return memory


def learned_profile(spike_ages: list[float]) -> WorkloadProfile:
    """The suite's profile after runs alone whose spike came at these ages (5 s polls), newest last."""
    profile = None
    for spike_at in spike_ages:
        run = RunRecorder("suite", 0.0, True, 80 * GiB)
        memory = suite_memory(spike_at)
        for i in range(int(SUITE_SECONDS / 5.0)):
            run.add(5.0 * i + 2.5, memory(5.0 * i + 2.5))
        profile = learn_run(profile, run, now=1000.0, truncated=False, poll_interval=5.0)
    return profile


def test_runs_that_peak_at_ages_no_slowdown_explains_are_unscheduled():
    assert unscheduled(learned_profile([40.0, 120.0]))
    assert unscheduled(learned_profile([120.0, 40.0, 80.0]))
    assert not unscheduled(learned_profile([120.0])), "one run says nothing of the spread"
    assert not unscheduled(learned_profile([100.0, 120.0])), "20 % later: a slower run, the same schedule"
    assert not unscheduled(None)


def test_a_run_late_for_an_unscheduled_peak_still_follows_its_profile_and_holds_it_to_its_end():
    """The old reading: a run that has not risen by 1.5 times its newest learned run's spike age is another
    kind of run (follows), and one that stays under a quarter of its peak that long is 'smaller'
    (progress): either way it was forecast at what it holds, the spike taken as never coming."""
    profile = learned_profile([120.0, 40.0])  # the newest run spiked at 40 s
    base = 2 * GiB
    assert follows(profile, base, 100.0), "late for 40 s, but its runs peak when they peak"
    progress = RunProgress(profile)
    for age in range(5, 105, 5):
        progress.feed(float(age), base, base, 1.0, 5.0)
    assert not progress.smaller
    assert still_to_come(profile, base, 30.0, 1.0) == 0, "not late yet: the learned timing is read as before"
    top = still_to_come(profile, base, 100.0, 1.0)
    assert top == profile.peak_bytes
    assert still_to_come(profile, profile.peak_bytes, 100.0, 1.0) == 0, "a run that peaked is not waiting"
    state = ProcessState(pid=1, used_bytes=base, age_seconds=100.0, profile=profile, position=40.0,
                         basis="learned", unscheduled_top=top)
    steps, end = process_curve(state)
    assert steps == ((0.0, profile.peak_bytes),)
    assert end == profile.duration_seconds - 40.0


def test_the_overflow_must_hold_whenever_the_peak_comes():
    """Beside a server the spike overflows whenever it comes; beside a job that ends in 30 s it only
    overflows if it comes before that, which nobody can say: no overflow holds over the window."""
    profile = learned_profile([120.0, 40.0])
    top = profile.peak_bytes
    suite = ProcessState(pid=1, used_bytes=2 * GiB, age_seconds=100.0, profile=profile, position=40.0,
                         basis="learned", unscheduled_top=top)
    server = ProcessState(pid=2, used_bytes=60 * GiB, age_seconds=1000.0)
    capacity = 80 * GiB
    forecast = forecast_device([suite, server], capacity)
    curves = [process_curve(s) for s in (suite, server)]
    assert forecast.contention_in_seconds == 0.0
    assert whenever_overflow([suite, server], curves, 0, capacity) == 60 * GiB + top - capacity
    ending = WorkloadProfile(key="job", peak_bytes=60 * GiB, peak_offset_seconds=10.0, duration_seconds=130.0,
                             runs=2, samples=30, timeline=((0.0, 60 * GiB),), updated_at=0.0)
    job = ProcessState(pid=3, used_bytes=60 * GiB, age_seconds=100.0, profile=ending, position=100.0,
                       basis="learned")
    curves = [process_curve(s) for s in (suite, job)]
    assert whenever_overflow([suite, job], curves, 0, capacity) < 0
    assert whenever_overflow([server], [process_curve(server)], 0, capacity) is None


def _suite_job(pid: int, start: float, spike_at: float | None) -> Job:
    return Job(pid=pid, start=start, duration=SUITE_SECONDS, memory=suite_memory(spike_at), cmdline=SUITE)


BATCH = "python3 embed_corpus.py --model BAAI/bge-m3 --batch-size 256"


def confidences_with(learned_batch: bool) -> list[tuple[float, float | None]]:
    """Learn the suite from two runs alone (spikes at 120 s, then 40 s), then run it alone until it is
    late for its spike, and from its age 60 s on beside 60 GiB of another process: a server never seen
    before (held for good), or a batch job learned alone to run 100 s. The suite's spike comes at 150 s.
    (age of the suite run, the device's confidence) at every poll from 60 s on, before the spike."""
    foresight = Foresight()
    t = 1_000_000.0
    for pid, spike_at in ((101, 120.0), (102, 40.0)):
        job = _suite_job(pid, t + 10.0, spike_at)
        for _ in replay(foresight, [job], t, t + 10.0 + SUITE_SECONDS + 10.0):
            pass
        t += SUITE_SECONDS + 30.0
    suite = _suite_job(301, t + 10.0, 150.0)
    other = Job(pid=300, start=suite.start + 60.0, duration=10_000.0, memory=lambda age: 60 * GiB, cmdline=SERVER)
    if learned_batch:
        batch = Job(pid=200, start=t + 10.0, duration=100.0, memory=lambda age: 60 * GiB, cmdline=BATCH)
        for _ in replay(foresight, [batch], t, t + 130.0):
            pass
        t += 140.0
        suite = _suite_job(301, t + 10.0, 150.0)
        other = Job(pid=300, start=suite.start + 60.0, duration=100.0, memory=lambda age: 60 * GiB, cmdline=BATCH)
    out = []
    for now, result in replay(foresight, [other, suite], t, t + 10.0 + 145.0):
        age = now - suite.start
        if age >= 60.0:
            out.append((age, result.devices[0].confidence if result.devices else None))
    return out


def test_a_suite_late_for_its_spike_beside_a_server_it_cannot_fit_beside_pages():
    """60 GiB of server and a 24 GiB spike on an 80 GB H100: the spike collides whenever it comes. The
    old forecast dropped the suite's profile once it was late for the spike at 40 s (a 'smaller' run)
    and predicted nothing; now the page is up from the server's start at the suite's age 60 s,
    well before the spike at 150 s."""
    seen = confidences_with(learned_batch=False)
    paged = [age for age, c in seen if c is not None and c >= CRITICAL_CONFIDENCE]
    assert paged and paged[0] <= 70.0, seen


def test_a_suite_late_for_its_spike_beside_a_job_ending_first_does_not_page():
    """Beside a batch job learned to run 100 s (it ends before the suite does), whether the spike collides
    depends on when it comes, which the suite's runs do not say: a warning at most."""
    seen = confidences_with(learned_batch=True)
    assert any(c is not None for _, c in seen), "the collision is still predicted (a warning)"
    assert all(c is None or c < CRITICAL_CONFIDENCE for _, c in seen), seen


def test_of_several_runs_awaiting_an_unscheduled_peak_one_is_held_at_it():
    """Two unknown moments meeting is not likely: the run that grows most by its peak is held at it, the
    other at what it uses (the healthy mixed node's queue workers are not all forecast at their peaks at
    once: tests/test_foresight_sim.py)."""
    from exporter.foresight.unscheduled import one_awaited

    profile = learned_profile([120.0, 40.0])
    small = ProcessState(pid=1, used_bytes=10 * GiB, age_seconds=100.0, profile=profile, position=40.0,
                         basis="learned", unscheduled_top=profile.peak_bytes)
    large = ProcessState(pid=2, used_bytes=2 * GiB, age_seconds=100.0, profile=profile, position=40.0,
                         basis="learned", unscheduled_top=profile.peak_bytes)
    plain = ProcessState(pid=3, used_bytes=GiB, age_seconds=5.0)
    held = one_awaited([small, large, plain])
    assert [process_curve(s)[0][0][1] for s in held] == [10 * GiB, profile.peak_bytes, GiB]
    assert held[1] is large and held[2] is plain
    alone = [large, plain]
    assert one_awaited(alone) is alone
