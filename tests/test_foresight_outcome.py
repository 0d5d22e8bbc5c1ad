"""Outcome counters (suspected OOM kills, contention warnings) and first-run bases, through the
real pipeline: simulated H100 -> fake libnvidia-ml -> NvmlBackend -> Foresight -> collector."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from exporter.collectors.forecast import ForecastCollector
from exporter.foresight import Foresight
from exporter.foresight.outcome import OUTCOME_GRACE, WARNING_FOR, Outcomes
from exporter.sim.scenario import load_scenario
from foresight_scenarios import Job, learn_solo_run, mig_snapshot, mps_gpu_snapshot, replay
from test_foresight_sim import SCENARIOS, play

GiB = 2**30


def registry_of(foresight: Foresight) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ForecastCollector(foresight))
    return registry


def wan(name: str):
    return load_scenario(SCENARIOS / f"wan22-h100-mps-{name}.yaml")


def test_counters_start_at_zero_on_first_sight_of_a_gpu():
    """increase() can only see a first kill if the series existed before it: all four exist at 0."""
    foresight = Foresight()
    play(foresight, dataclasses.replace(wan("together"), processes=wan("together").processes[:1]), 30.0)
    registry = registry_of(foresight)
    uuid = foresight.result().outcomes[0][1]
    for predicted in ("true", "false"):
        assert registry.get_sample_value("gpushare_suspected_oom_kills_total",
                                         {"gpu": "0", "uuid": uuid, "predicted": predicted}) == 0.0
    for outcome in ("oom", "none"):
        assert registry.get_sample_value("gpushare_memory_contention_warnings_total",
                                         {"gpu": "0", "uuid": uuid, "outcome": outcome}) == 0.0


def test_predicted_collision_counts_a_predicted_kill_and_a_warning_with_an_oom():
    """Wan x3 together after a solo run: the simulator kills one; the counters say the warning was right."""
    foresight = Foresight()
    play(foresight, dataclasses.replace(wan("together"), processes=wan("together").processes[:1]), 620.0)
    polls = play(foresight, wan("together"), 720.0)
    assert polls[-1][2] >= 1  # the simulator's truth: an OOM kill happened
    registry = registry_of(foresight)
    uuid = foresight.result().outcomes[0][1]
    value = lambda name, **labels: registry.get_sample_value(name, {"gpu": "0", "uuid": uuid, **labels})  # noqa: E731
    assert value("gpushare_suspected_oom_kills_total", predicted="true") == 1.0
    assert value("gpushare_suspected_oom_kills_total", predicted="false") == 0.0
    assert value("gpushare_memory_contention_warnings_total", outcome="oom") == 1.0
    assert value("gpushare_memory_contention_warnings_total", outcome="none") == 0.0


def test_staggered_jobs_raise_no_warning():
    """Staggered by a minute the jobs fit: no warning is counted."""
    foresight = Foresight()
    play(foresight, dataclasses.replace(wan("together"), processes=wan("together").processes[:1]), 620.0)
    play(foresight, wan("staggered"), 900.0)
    assert all(row[4] == row[5] == 0 for row in foresight.result().outcomes)


def test_warning_needs_the_rules_for_and_its_outcome_waits_for_the_grace():
    """Shorter than WARNING_FOR is no warning; an ended one is judged OUTCOME_GRACE later."""
    outcomes, device = Outcomes(), ("GPU-x", None)
    outcomes.gpu_seen(0, "GPU-x")
    outcomes.forecast(device, -1, 0.0)
    outcomes.forecast(device, -1, WARNING_FOR - 1)
    outcomes.forecast(device, 5, WARNING_FOR)
    outcomes.settle(WARNING_FOR + OUTCOME_GRACE + 1)
    assert outcomes.rows() == ((0, "GPU-x", 0, 0, 0, 0),)
    for t in (100.0, 100.0 + WARNING_FOR):
        outcomes.forecast(device, -1, t)
    assert outcomes.warning_up(device)
    outcomes.forecast(device, 5, 140.0)
    outcomes.settle(150.0)
    assert outcomes.rows()[0][4:] == (0, 0)  # still within the grace: a kill may follow
    outcomes.vanished(device, suspected=True, predicted=False, now=160.0)
    outcomes.settle(160.0)
    assert outcomes.rows() == ((0, "GPU-x", 0, 1, 1, 0),)


def test_first_run_inside_a_mig_instance_is_forecast_from_the_whole_gpu_profile():
    """Learned on a whole H100, three Wan jobs in an H200 3g.71gb instance get a scaled forecast, not none.

    Wan's 33 GiB peak is far from filling the 79 GiB it was learned on, so it needs its bytes
    wherever it runs: 3 x 22 GiB fit the 71 GiB instance, 3 x 33 GiB overflow it, minutes ahead.
    """
    foresight = Foresight()
    learn_solo_run(foresight)  # on the 79 GiB H100
    instances = [(1, "3g.71gb", 71 * GiB)]
    build = lambda t, jobs: mig_snapshot(t, jobs, instances)  # noqa: E731
    trio = [Job(pid=300 + i, start=3_000_010.0, gi=1) for i in range(3)]
    for _, result in replay(foresight, trio, 3_000_000.0, 3_000_100.0, build=build):
        pass
    (device,) = result.devices
    assert device.forecast.headroom_bytes < 0 and device.forecast.contention_in_seconds > 300
    assert {r.basis for r in result.processes} == {"scaled"}
    registry = registry_of(foresight)
    culprit = registry.get_sample_value("gpushare_process_memory_expected_at_contention_bytes", {
        "gpu": "0", "uuid": device.uuid, "gi": "1", "pid": "300", "process": "python3", "sharing": "mig+mps",
        "workload": result.processes[0].workload, "namespace": "", "pod": "", "container": "", "basis": "scaled"})
    assert culprit == 33 * GiB


def test_first_run_declared_size_and_trend():
    """GPUSHARE_EXPECTED_PEAK is held from the start; a never-seen leak is extrapolated."""
    foresight = Foresight()
    declared = Job(pid=401, start=1000.0, memory=lambda a: 2 * GiB, cmdline="python3 serve.py --model x")
    leak = Job(pid=402, start=1000.0, memory=lambda a: int(10 * GiB + a * 50 * 2**20), cmdline="python3 nb.py")
    results = []
    for t in range(1000, 1400, 5):
        snapshot = mps_gpu_snapshot(float(t), [declared, leak])
        procs = tuple(dataclasses.replace(p, environ={"GPUSHARE_EXPECTED_PEAK": "40GiB"}) if p.pid == 401 else p
                      for p in snapshot.gpus[0].processes)
        snapshot = dataclasses.replace(snapshot, gpus=(dataclasses.replace(snapshot.gpus[0], processes=procs),))
        foresight.observe(snapshot, now=float(t))
        results.append(foresight.result())
    bases = {r.pid: r.basis for r in results[-1].processes}
    assert bases == {401: "declared", 402: "trend"}
    peaks = {r.pid: r.expected_peak_bytes for r in results[-1].processes}
    assert peaks[401] == 40 * GiB
    assert peaks[402] > 10 * GiB + 395 * 50 * 2**20  # above what it uses now: it keeps growing
    assert {r.pid: r.basis for r in results[5].processes}[402] == "current"  # 25 s old: loading, no trend yet


def test_declared_size_travels_from_the_process_environment_to_the_scrape(tmp_path):
    """Two never-seen servers on an H100 under MPS, each declaring 45 GiB in its environment
    (as a pod annotation through the downward API would): read from the simulated /proc by the
    real backend, forecast as `declared`, and scraped with basis="declared" at the overflow."""
    scenario = tmp_path / "declared.yaml"
    scenario.write_text(
        "name: declared\nduration: 5m\ngpus:\n  - model: H100-80GB\n    mps: true\n"
        "processes:\n"
        + "".join(
            f"  - {{pid: {pid}, name: python3, cmdline: python3 serve.py --port {pid}, gpu: 0, start: 0s,\n"
            f"     memory: [[+0s, 1GiB], [+20s, 20GiB]], env: {{GPUSHARE_EXPECTED_PEAK: 45GiB}}}}\n"
            for pid in (5001, 5002)))
    foresight = Foresight()
    play(foresight, load_scenario(scenario), 60.0)
    result = foresight.result()
    assert {r.basis for r in result.processes} == {"declared"}
    (device,) = result.devices
    assert device.forecast.contention_in_seconds == 0.0  # 2 x 45 GiB > 79 GiB from the start
    registry = registry_of(foresight)
    labels = {"gpu": "0", "uuid": device.uuid, "gi": "", "pid": "5001", "process": "python3", "sharing": "mps",
              "workload": result.processes[0].workload, "namespace": "", "pod": "", "container": "",
              "basis": "declared"}
    assert registry.get_sample_value("gpushare_process_memory_expected_at_contention_bytes", labels) == 45 * GiB
