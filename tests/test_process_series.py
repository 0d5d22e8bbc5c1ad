"""--process-series: what one per-process series stands for, and how many series churn creates."""

from __future__ import annotations

import pytest

from exporter.backend.replicas import ReplicaSlots
from exporter.backend.sim import SimBackend
from exporter.collectors.forecast import ForecastCollector
from exporter.collectors.mps import MpsCollector
from exporter.collectors.process import ProcessCollector
from exporter.foresight import Foresight
from exporter.sim.scenario import load_scenario
from tests.conftest import SCENARIOS

SCENARIO = load_scenario(SCENARIOS / "k8s-shared-node.yaml")
FAMILY = "gpushare_process_memory_used_bytes"


def series_over_run(mode: str, step: int = 10):
    """(label sets ever exported, per-poll checks) for the k8s node's 30 minutes in ``mode``."""
    backend = SimBackend(SCENARIO)
    foresight = Foresight()
    collectors = [ProcessCollector(lambda: snap["s"], mode), MpsCollector(lambda: snap["s"], mode),
                  ForecastCollector(foresight, mode)]
    snap, ever, polls = {}, set(), []
    backend.open()
    try:
        for t in range(0, 1801, step):
            backend.step_to(t)
            snap["s"] = backend.poll()
            foresight.observe(snap["s"])
            samples = [s for c in collectors for f in c.collect() for s in f.samples]
            memory = [s for s in samples if s.name == FAMILY]
            ever.update(tuple(sorted(s.labels.items())) for s in memory)
            polls.append((snap["s"], samples))
    finally:
        backend.close()
    return ever, polls


@pytest.fixture(scope="module")
def runs():
    return {mode: series_over_run(mode) for mode in ("pid", "pod", "workload")}


def test_each_mode_keeps_the_device_totals(runs):
    """Whatever a series stands for, the memory of a GPU's process series sums to its processes'."""
    for mode, (_, polls) in runs.items():
        for snapshot, samples in polls:
            for gpu in snapshot.gpus:
                exported = sum(s.value for s in samples if s.name == FAMILY and s.labels["uuid"] == gpu.uuid)
                assert exported == sum(p.used_memory_bytes for p in gpu.processes), mode


def test_pod_mode_is_one_series_per_container_and_pid_for_host_processes(runs):
    ever, polls = runs["pod"]
    pods = {dict(k)["pod"] for k in ever if dict(k)["pod"]}
    assert "notebook-0" in pods
    notebook = [k for k in ever if dict(k)["pod"] == "notebook-0"]
    assert len(notebook) == 1 and dict(notebook[0])["pid"] == "", "four kernels, one series"
    host = [dict(k) for k in ever if not dict(k)["pod"]]
    assert {h["pid"] for h in host} >= {"4001"} and all(h["pid"] for h in host)
    # wan-render-a's two containers on the MPS GPU: two series, each its own limit.
    _, samples = polls[-1]
    limits = {s.labels["container"]: s.value for s in samples
              if s.name == "gpushare_mps_client_memory_limit_bytes" and s.labels["pod"] == "wan-render-a"}
    assert limits == {"render": 30 * 2**30, "upscale": 30 * 2**30}


def test_workload_mode_reuses_replica_slots(runs):
    ever, _ = runs["workload"]
    embed = {dict(k)["replica"] for k in ever if dict(k)["workload"] == "k8s:batch/embed/embed"}
    notebook = {dict(k)["replica"] for k in ever if dict(k)["workload"] == "k8s:research/notebook/jupyter"}
    assert embed == {"0"} and notebook == {"0"}  # five Job pods and four kernels, one at a time
    assert all(dict(k)["pid"] == "" and dict(k)["pod"] == "" for k in ever)


def test_series_created_shrink_pid_then_pod_then_workload(runs):
    counts = {mode: len(ever) for mode, (ever, _) in runs.items()}
    assert counts["pid"] > counts["pod"] > counts["workload"]


def test_forecast_series_are_the_same_instances(runs):
    for mode in ("pod", "workload"):
        _, polls = runs[mode]
        snapshot, samples = polls[-1]
        # The forecast's workload label is the learned profile key (workload@device size).
        def key(s):
            return tuple(sorted((k, v) for k, v in s.labels.items() if k != "workload"))

        memory = {key(s) for s in samples if s.name == FAMILY}
        peaks = {key(s) for s in samples if s.name == "gpushare_process_memory_expected_peak_bytes"}
        assert peaks and peaks <= memory, mode


def test_replica_slots_lowest_free_and_reused():
    slots = ReplicaSlots()
    slots.begin_poll()
    assert slots.assign(None, {10: "w", 11: "w", 12: "v"}) == {10: 0, 11: 1, 12: 0}
    slots.end_poll()
    slots.begin_poll()
    # 10 exits and 13 starts in the same poll: 13 takes slot 0 at once; 11 keeps 1.
    assert slots.assign(None, {11: "w", 13: "w", 12: "v"}) == {11: 1, 13: 0, 12: 0}
    # The workload key of 12 changed (its pod became known): a new instance of the new key.
    assert slots.assign(None, {11: "w", 13: "w", 12: "w"}) == {11: 1, 13: 0, 12: 2}
    slots.end_poll()
    slots.begin_poll()
    slots.assign(1, {20: "w"})
    slots.end_poll()  # device None was not read this poll: its slots are freed
    slots.begin_poll()
    assert slots.assign(None, {30: "w"}) == {30: 0}
