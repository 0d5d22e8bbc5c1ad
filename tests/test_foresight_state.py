"""Foresight end to end on synthetic polls: learning, the Wan contention story, persistence, the collector."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.collectors.forecast import ForecastCollector
from exporter.foresight import Foresight
from exporter.foresight.workload import workload_label
from foresight_scenarios import (
    GiB,
    UUID,
    WAN_DURATION,
    Job,
    learn_solo_run,
    mig_snapshot,
    mps_gpu_snapshot,
    replay,
)


def scrape(foresight: Foresight) -> dict[str, list]:
    """Samples of the forecast collector by metric name, parsed back from the text format."""
    registry = CollectorRegistry()
    registry.register(ForecastCollector(foresight))
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def three_jobs(foresight: Foresight, start: float, offsets, step: float = 5.0, horizon: float = 700.0):
    """Run three Wan jobs started at the offsets; (t, headroom) per poll."""
    jobs = [Job(pid=200 + i, start=start + 10 + o) for i, o in enumerate(offsets)]
    return [(t, r.devices[0].forecast.headroom_bytes) for t, r in replay(foresight, jobs, start, start + horizon, step)]


@pytest.mark.parametrize("step", [1.0, 5.0, 15.0, 30.0])
def test_together_goes_negative_at_start_and_staggered_never(step):
    """After a solo run, the together case is flagged once the jobs have loaded; the staggered case never."""
    together = Foresight()
    t = learn_solo_run(together)
    series = three_jobs(together, t, [0, 0, 0], step)
    first_negative = next(tt for tt, h in series if h < 0)
    # The jobs load for 20 s; they are compared with the profile once they hold a quarter of the
    # peak, so the forecast turns within that load time plus a poll or two.
    assert first_negative - (t + 10) <= 20 + 2 * step
    # The OOM would come at the jobs' peak (age 480 s); the warning is minutes earlier.
    assert (t + 10 + WAN_DURATION - 30) - first_negative >= 5 * 60

    staggered = Foresight()
    t = learn_solo_run(staggered)
    assert all(h >= 0 for _, h in three_jobs(staggered, t, [0, 60, 120], step))


def test_without_a_learned_profile_nothing_is_predicted():
    """Never having seen the workload finish, the forecast is current use (no false alarm, no foresight)."""
    foresight = Foresight()
    series = three_jobs(foresight, 1_000_000.0, [0, 0, 0], horizon=400)
    assert all(h >= 0 for _, h in series)


def test_killed_run_does_not_become_the_timeline():
    """A run that vanished while the simulator counted an OOM kill is not learned as complete."""
    foresight = Foresight()
    job = Job(pid=300, start=1000.0, duration=100.0)
    for t in range(1000, 1100, 5):
        foresight.observe(mps_gpu_snapshot(float(t), [job]), now=float(t))
    foresight.observe(mps_gpu_snapshot(1105.0, [job], oom_kills=1), now=1105.0)
    (profile,) = foresight.profiles.values()
    assert profile.runs == 0 and not profile.usable


def test_lost_gpu_does_not_end_runs():
    """A poll where the GPU could not be read does not count its processes as finished."""
    foresight = Foresight()
    job = Job(pid=301, start=1000.0)
    foresight.observe(mps_gpu_snapshot(990.0, []), now=990.0)
    for t in (1000.0, 1005.0):
        foresight.observe(mps_gpu_snapshot(t, [job]), now=t)
    foresight.observe(mps_gpu_snapshot(1010.0, [job], up=False), now=1010.0)
    assert foresight.profiles == {}
    foresight.observe(mps_gpu_snapshot(1015.0, [job]), now=1015.0)
    assert foresight.result().processes[0].pid == 301


def test_profiles_persist_across_restarts(tmp_path):
    """A finished run is saved at once: a new Foresight on the same state dir forecasts from it (no flush)."""
    first = Foresight(state_dir=tmp_path)
    t = learn_solo_run(first)
    second = Foresight(state_dir=tmp_path)
    assert second.profiles == first.profiles
    assert any(h < 0 for _, h in three_jobs(second, t, [0, 0, 0], horizon=60))


def test_import_lets_a_fresh_node_forecast():
    """Profiles exported on one node and imported on another predict the same contention."""
    source = Foresight()
    t = learn_solo_run(source)
    target = Foresight()
    assert target.import_json(source.export_json(), "profiles.json") == 1
    assert any(h < 0 for _, h in three_jobs(target, t, [0, 0, 0], horizon=60))


def test_process_joined_mid_run_is_not_learned_as_complete():
    """Runs already going when the exporter started (start time unknown) teach no timeline."""
    foresight = Foresight()
    job = Job(pid=302, start=1000.0, known_start=False)
    for t in range(1100, int(1000 + WAN_DURATION) + 10, 5):
        foresight.observe(mps_gpu_snapshot(float(t), [job]), now=float(t))
    (profile,) = foresight.profiles.values()
    assert profile.runs == 0


def test_collector_exports_contention_with_culprits():
    """During the together case the scrape shows negative headroom, an ETA, stagger advice and culprits."""
    foresight = Foresight()
    t = learn_solo_run(foresight)
    three_jobs(foresight, t, [0, 0, 0], horizon=60)
    samples = scrape(foresight)
    gpu = {"gpu": "0", "uuid": UUID}
    (headroom,) = samples["gpushare_gpu_memory_headroom_bytes"]
    assert headroom.labels == gpu and headroom.value < 0
    (eta,) = samples["gpushare_gpu_memory_contention_eta_seconds"]
    assert 5 * 60 < eta.value < WAN_DURATION
    (stagger,) = samples["gpushare_gpu_memory_stagger_needed_seconds"]
    assert 25 <= stagger.value <= 60
    culprits = samples["gpushare_process_memory_expected_at_contention_bytes"]
    assert sorted(s.labels["pid"] for s in culprits) == ["200", "201", "202"]
    assert all(s.value == 33 * GiB for s in culprits)
    peaks = samples["gpushare_process_memory_expected_peak_bytes"]
    assert {s.labels["sharing"] for s in peaks} == {"mps"} and all(s.value == 33 * GiB for s in peaks)
    assert "gpushare_mig_memory_headroom_bytes" not in samples


def test_collector_without_contention_has_no_eta_or_culprits():
    """When everything fits, contention series are absent rather than zero."""
    foresight = Foresight()
    foresight.observe(mps_gpu_snapshot(1000.0, [Job(pid=1, start=990.0)]), now=1000.0)
    samples = scrape(foresight)
    assert samples["gpushare_gpu_memory_headroom_bytes"][0].value > 0
    for name in ("gpushare_gpu_memory_contention_eta_seconds", "gpushare_gpu_memory_stagger_needed_seconds",
                 "gpushare_process_memory_expected_at_contention_bytes",
                 "gpushare_gpu_memory_exhaustion_eta_seconds"):
        assert name not in samples


def test_mig_instances_are_forecast_separately():
    """Under MIG each GPU instance is its own device; no whole-GPU demand is exported."""
    foresight = Foresight()
    instances = [(1, "3g.40gb", 40 * GiB), (2, "3g.40gb", 40 * GiB)]
    build = lambda t, jobs: mig_snapshot(t, jobs, instances)  # noqa: E731
    small = lambda age: 8 * GiB if age < 400 else 12 * GiB  # noqa: E731
    learn = [Job(pid=100, start=1005.0, memory=small, duration=450, gi=1, cmdline="python serve.py")]
    for _ in replay(foresight, learn, 1000.0, 1480.0, build=build):
        pass
    crowd = [Job(pid=200 + i, start=1505.0, memory=small, duration=450, gi=1, cmdline="python serve.py")
             for i in range(4)]
    for _ in replay(foresight, crowd, 1500.0, 1530.0, build=build):
        pass
    samples = scrape(foresight)
    headroom = {s.labels["gi"]: s.value for s in samples["gpushare_mig_memory_headroom_bytes"]}
    assert headroom["1"] == 40 * GiB - 4 * 12 * GiB and headroom["2"] == 40 * GiB
    assert {s.labels["profile"] for s in samples["gpushare_mig_memory_headroom_bytes"]} == {"3g.40gb"}
    assert "gpushare_gpu_memory_headroom_bytes" not in samples
    assert {s.labels["sharing"] for s in samples["gpushare_process_memory_expected_peak_bytes"]} == {"mig+mps"}


def test_profiles_are_learned_per_device_size():
    """What a job did on a whole GPU is not applied to a run in a MIG instance that does not look like it.

    (A run that does follow it gets the scaled profile: tests/test_foresight_outcome.py.)"""
    foresight = Foresight()
    learn_solo_run(foresight)  # on the 79 GiB H100
    instances = [(1, "3g.40gb", 40 * GiB)]
    build = lambda t, jobs: mig_snapshot(t, jobs, instances)  # noqa: E731
    crowd = [Job(pid=200 + i, start=3_000_010.0, gi=1, memory=lambda a: 8 * GiB) for i in range(3)]
    for _, result in replay(foresight, crowd, 3_000_000.0, 3_000_030.0, build=build):
        pass
    (device,) = result.devices
    assert device.forecast.peak_demand_bytes == 3 * 8 * GiB  # current use: 8 GiB is not Wan's 22 GiB
    assert {r.expected_peak_bytes for r in result.processes} == {8 * GiB}


def test_exported_profiles_are_capped_running_first():
    """Only max_exported_workloads profiles are exported, the running workloads' among them."""
    foresight = Foresight(max_exported_workloads=2)
    for i in range(5):
        job = Job(pid=10 + i, start=1000.0 + 100 * i, duration=20.0, cmdline=f"python job{i}.py")
        for t in range(int(job.start) - 5, int(job.start) + 30, 5):
            foresight.observe(mps_gpu_snapshot(float(t), [job]), now=float(t))
    running = Job(pid=99, start=2000.0, duration=100.0, cmdline="python job0.py")
    foresight.observe(mps_gpu_snapshot(2005.0, [running]), now=2005.0)
    workloads = {s.labels["workload"] for s in scrape(foresight)["gpushare_workload_profile_peak_bytes"]}
    # H100: 81559 MiB - 512 MiB reserved = 79.1 GiB usable, so profiles are learned "@79GiB".
    assert len(workloads) == 2 and workload_label("python job0.py@79GiB") in workloads
    assert scrape(foresight)["gpushare_workload_profiles"][0].value == 5


def test_observe_failure_keeps_the_previous_forecast(monkeypatch):
    """A bug inside observe() is logged, marks the collector unhealthy and keeps the last result."""
    foresight = Foresight()
    foresight.observe(mps_gpu_snapshot(1000.0, [Job(pid=1, start=990.0)]), now=1000.0)
    before = foresight.result()
    monkeypatch.setattr(foresight, "_observe", lambda *a: 1 / 0)
    foresight.observe(mps_gpu_snapshot(1005.0, []), now=1005.0)
    assert foresight.result() is before and not ForecastCollector(foresight).section_ok()


def test_store_health_is_exported(tmp_path):
    """With a state dir the scrape says whether the store works."""
    foresight = Foresight(state_dir=tmp_path)
    foresight.observe(mps_gpu_snapshot(1000.0, []), now=1000.0)
    assert scrape(foresight)["gpushare_exporter_state_store_ok"][0].value == 1
