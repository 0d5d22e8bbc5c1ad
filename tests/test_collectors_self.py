"""GuardedCollectors, ExporterCollector and SimulationCollector."""

from __future__ import annotations

import dataclasses
import logging

from prometheus_client import CollectorRegistry

from exporter.collectors import GuardedCollectors, PollStats, default_collectors
from exporter.collectors.exporter_self import ExporterCollector
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.simulation import SimulationCollector
from snapshot_samples import UUID0, rich_snapshot


class Exploding:
    """A collector that fails the way a bug in a real one would."""

    name = "exploding"

    def __init__(self, when: str = "collect") -> None:
        self.when = when

    def collect(self):
        if self.when == "collect":
            raise KeyError("boom")
        return []

    def section_ok(self) -> bool:
        raise RuntimeError("section check failed")


def guarded(*collectors) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GuardedCollectors(collectors))
    return registry


def stats(**kw) -> PollStats:
    return PollStats(backend="nvml", version="9.9.9", **kw)


def test_failing_collector_is_isolated():
    """A raising collector reports success 0 while the others' series and success 1 remain."""
    snapshot = rich_snapshot()
    registry = guarded(GpuCollector(lambda: snapshot), Exploding())
    value = registry.get_sample_value
    assert value("gpushare_exporter_collector_success", {"collector": "exploding"}) == 0
    assert value("gpushare_exporter_collector_success", {"collector": "gpu"}) == 1
    assert value("gpushare_gpu_up", {"gpu": "0", "uuid": UUID0}) == 1


def test_failure_in_section_check_is_isolated_too():
    """An exception from section_ok() counts as a failure of that collector only."""
    registry = guarded(Exploding(when="section"))
    assert registry.get_sample_value("gpushare_exporter_collector_success", {"collector": "exploding"}) == 0


def test_failed_section_marks_collector_unsuccessful_but_keeps_its_data():
    """section_ok False turns collector_success to 0 for that section's collector only."""
    snapshot = dataclasses.replace(rich_snapshot(), section_ok={"gpu": False, "mig": True})
    collectors = default_collectors(lambda: snapshot, lambda: stats())
    registry = guarded(*collectors)
    value = registry.get_sample_value
    assert value("gpushare_exporter_collector_success", {"collector": "gpu"}) == 0
    assert value("gpushare_exporter_collector_success", {"collector": "mig"}) == 1
    assert value("gpushare_exporter_collector_success", {"collector": "process"}) == 1  # missing key = ok
    assert value("gpushare_gpu_up", {"gpu": "0", "uuid": UUID0}) == 1


def test_no_snapshot_means_unsuccessful_data_collectors():
    """Before any successful poll the data collectors report 0 and the exporter collector 1."""
    registry = guarded(*default_collectors(lambda: None, lambda: stats(polls_error=1)))
    value = registry.get_sample_value
    assert value("gpushare_exporter_collector_success", {"collector": "gpu"}) == 0
    assert value("gpushare_exporter_collector_success", {"collector": "exporter"}) == 1
    assert value("gpushare_exporter_polls_total", {"result": "error"}) == 1


def test_durations_come_from_the_clock():
    """collector_duration_seconds is the clock difference around each collector's run."""
    ticks = iter([10.0, 10.25, 20.0, 20.5])
    registry = CollectorRegistry(auto_describe=False)
    snapshot = rich_snapshot()
    registry.register(GuardedCollectors([GpuCollector(lambda: snapshot), Exploding()], clock=lambda: next(ticks)))
    families = {f.name: f for f in registry.collect()}
    samples = families["gpushare_exporter_collector_duration_seconds"].samples
    durations = {s.labels["collector"]: s.value for s in samples}
    assert durations == {"gpu": 0.25, "exploding": 0.5}


def test_failure_logged_once_per_distinct_message(caplog):
    """The same failure on every poll is logged once, not once per poll."""
    guard = GuardedCollectors([Exploding()])
    with caplog.at_level(logging.WARNING, logger="exporter.collectors.guard"):
        guard.collect()
        guard.collect()
    assert len([r for r in caplog.records if "exploding" in r.getMessage()]) == 1


def test_exporter_metrics_from_stats_and_call_errors():
    """Build info, poll counters, durations and per-call errors come from PollStats and the snapshot."""
    snapshot = rich_snapshot()
    s = stats(polls_ok=4, polls_error=1, last_duration_seconds=0.125, last_success_timestamp=1_700_000_000.5)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(lambda: s, lambda: snapshot))
    value = registry.get_sample_value
    assert value("gpushare_exporter_build_info", {"version": "9.9.9", "backend": "nvml"}) == 1
    assert value("gpushare_exporter_polls_total", {"result": "ok"}) == 4
    assert value("gpushare_exporter_polls_total", {"result": "error"}) == 1
    assert value("gpushare_exporter_poll_duration_seconds") == 0.125
    assert value("gpushare_exporter_last_poll_timestamp_seconds") == 1_700_000_000.5
    errors = {"call": "nvmlDeviceGetPowerUsage", "error": "GpuIsLost"}
    assert value("gpushare_exporter_poll_errors_total", errors) == 2


def test_exporter_metrics_before_first_poll():
    """With no poll yet: no duration or timestamp sample, both poll counters at 0."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(lambda: stats(), lambda: None))
    value = registry.get_sample_value
    assert value("gpushare_exporter_poll_duration_seconds") is None
    assert value("gpushare_exporter_last_poll_timestamp_seconds") is None
    assert value("gpushare_exporter_polls_total", {"result": "ok"}) == 0


def test_simulation_series():
    """Simulation time and OOM kills per (gpu, gi) come from SimulationInfo."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimulationCollector(rich_snapshot))
    value = registry.get_sample_value
    assert value("gpushare_simulation_time_seconds") == 120.0
    assert value("gpushare_simulation_oom_kills_total", {"gpu": "0", "gi": ""}) == 1
    assert value("gpushare_simulation_oom_kills_total", {"gpu": "1", "gi": "2"}) == 0


def test_oom_kill_counter_starts_at_zero_for_every_device():
    """Each MIG instance and non-MIG GPU read this poll has an OOM counter at 0 before any kill."""
    import dataclasses

    snapshot = rich_snapshot()
    quiet = dataclasses.replace(snapshot, simulation=dataclasses.replace(snapshot.simulation, oom_kills={}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimulationCollector(lambda: quiet))
    expected = set()
    for gpu in quiet.gpus:
        if gpu.up and gpu.mig_mode:
            expected |= {(str(gpu.index), str(m.gi)) for m in gpu.mig_instances}
        elif gpu.up:
            expected.add((str(gpu.index), ""))
    samples = {
        (s.labels["gpu"], s.labels["gi"]): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == "gpushare_simulation_oom_kills_total"
    }
    assert expected and set(samples) == expected
    assert set(samples.values()) == {0.0}


def test_no_simulation_series_on_real_hardware():
    """Without SimulationInfo the simulation collector exports nothing."""
    snapshot = rich_snapshot(simulated=False)
    assert list(SimulationCollector(lambda: snapshot).collect()) == []
