"""Per-pod numbers under time-slicing, MPS and MIG add up to the device's; accounting counters
only grow across pod and process churn, and a GPU's pod energies add up to its energy.

Snapshots come from the simulated Kubernetes node (examples/scenarios/k8s-shared-node.yaml)
through the real backend, and the values are read back from /metrics.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings, strategies as st
from prometheus_client import CollectorRegistry

from exporter.accounting import Accounting
from exporter.backend.sim import SimBackend
from exporter.collectors.pods import PodCollector
from exporter.podshare import device_shares
from exporter.sim.scenario import load_scenario
from exporter.snapshot import GpuInfo, ProcessInfo, Snapshot
from tests.conftest import SCENARIOS
from snapshot_samples import UUID1, rich_snapshot_with_pods

SCENARIO = load_scenario(SCENARIOS / "k8s-shared-node.yaml")
GIB = 1024**3


@pytest.fixture(scope="module")
def run():
    """(time, snapshot, exposition samples) every 5 s over the whole 30 minutes of churn."""
    backend = SimBackend(SCENARIO)
    collector = PodCollector(lambda: None)
    out = []
    backend.open()
    try:
        for t in range(0, 1801, 5):
            backend.step_to(t)
            snapshot = backend.poll()
            families = list(collector.families(snapshot))
            samples = [(s.name, s.labels, s.value) for f in families for s in f.samples]
            out.append((t, snapshot, samples))
    finally:
        backend.close()
    return out


def values(samples, name, **labels):
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def test_pod_memory_adds_up_to_each_device(run):
    """Time-sliced GPU 0, MPS GPU 1: pod rows + unattributed = the GPU's used memory; MIG GPU 2:
    the same per instance, from the instance's used memory."""
    for t, snapshot, samples in run:
        for gpu in snapshot.gpus:
            rows = values(samples, "gpushare_pod_memory_used_bytes", uuid=gpu.uuid)
            if not gpu.mig_mode:
                assert sum(v for _, v in rows) == pytest.approx(gpu.memory_used_bytes), t
                continue
            for inst in gpu.mig_instances:
                mine = [v for l, v in rows if l["gi"] == str(inst.gi)]
                assert sum(mine) == pytest.approx(inst.memory_used_bytes), (t, inst.gi)


def test_pod_memory_is_its_own_not_the_devices(run):
    """Under sharing no pod gets the device's value: each gets what its processes hold."""
    t, snapshot, samples = next(r for r in run if r[0] == 600)
    gpu0 = snapshot.gpus[0]
    for labels, value in values(samples, "gpushare_pod_memory_used_bytes", uuid=gpu0.uuid):
        if labels["pod"]:
            mine = sum(p.used_memory_bytes for p in gpu0.processes if p.pod == labels["pod"])
            assert value == mine < gpu0.memory_used_bytes


def test_sm_shares_add_up_to_the_device_busy_time(run):
    for t, snapshot, samples in run:
        for gpu in snapshot.gpus:
            if gpu.mig_mode or gpu.utilization_ratio is None:
                continue
            rows = values(samples, "gpushare_pod_sm_share_ratio", uuid=gpu.uuid)
            assert sum(v for _, v in rows) == pytest.approx(gpu.utilization_ratio, abs=1e-9), t
            assert all(0.0 <= v <= 1.0 for _, v in rows)


def test_counters_only_grow_across_churn(run):
    """Every pod and namespace counter is monotonic poll to poll while it exists, also for pods
    whose processes came and went (the notebook's kernels, the Job's pods)."""
    names = [n for n in ("gpushare_pod_memory_byte_seconds_total", "gpushare_pod_sm_seconds_total",
                         "gpushare_pod_energy_joules_total", "gpushare_namespace_memory_byte_seconds_total",
                         "gpushare_namespace_sm_seconds_total", "gpushare_namespace_energy_joules_total")]
    last: dict = {}
    for t, _, samples in run:
        for name, labels, value in samples:
            if name in names:
                key = (name, tuple(sorted(labels.items())))
                assert value >= last.get(key, 0.0), (t, key)
                last[key] = value
    notebook = [v for (n, k), v in last.items() if n == "gpushare_pod_memory_byte_seconds_total"
                and ("pod", "notebook-0") in k]
    # Four kernels of ~5 min each at 6-8 GiB: one continuous counter far above one kernel's share.
    assert notebook and notebook[0] > 4 * 4 * 60 * 6 * GIB


def test_energy_of_a_gpu_is_split_without_loss(run):
    """Namespace counters (which outlive pods) sum to the GPU's energy since the first poll; pod
    counters sum to it while no pod has expired yet (15 minutes after its last process)."""
    first, last = run[0], run[-1]
    at_10m = next(r for r in run if r[0] == 600)
    for gpu0, gpu10, gpu30 in zip(first[1].gpus, at_10m[1].gpus, last[1].gpus):
        by_namespace = sum(v for _, v in values(last[2], "gpushare_namespace_energy_joules_total", uuid=gpu30.uuid))
        assert by_namespace == pytest.approx(gpu30.energy_joules - gpu0.energy_joules, rel=1e-9) and by_namespace > 0
        booked = sum(v for _, v in values(at_10m[2], "gpushare_pod_energy_joules_total", uuid=gpu10.uuid))
        assert booked == pytest.approx(gpu10.energy_joules - gpu0.energy_joules, rel=1e-9)


def test_busier_pods_are_booked_more_energy(run):
    """The vLLM pod (SM 0.35-0.55) is booked more than a notebook (SM 0.1) on the same GPU."""
    samples = run[-1][2]
    uuid = run[-1][1].gpus[0].uuid
    energy = {l["pod"]: v for l, v in values(samples, "gpushare_pod_energy_joules_total", uuid=uuid)}
    assert energy["llm-7d9f8b6c4-x2k9p"] > 3 * energy["notebook-0"] > 0


def test_mig_instance_held_alone_is_the_pods():
    """A MIG instance with no visible pod process but one holder (pod-resources) is that pod's."""
    snapshot = rich_snapshot_with_pods()
    gpu = next(g for g in snapshot.gpus if g.uuid == UUID1)
    rows = {(r.gi, r.pod): r for r in device_shares(gpu, snapshot.pod_devices)}
    inst = next(i for i in gpu.mig_instances if i.gi == 2)
    held = rows[(2, "detect-5f6g7")]
    assert held.memory_bytes == inst.memory_used_bytes
    assert held.sm_share == pytest.approx(0.1 * 60 / 132)  # instance sm_active x its SMs / the H100's
    assert rows[(1, "finetune-x7k2q")].memory_bytes == 11 * GIB


def test_same_snapshot_twice_is_counted_once():
    snapshot = rich_snapshot_with_pods()
    accounting = Accounting()
    accounting.observe(snapshot)
    before = {k: (v.memory_byte_seconds, v.energy_joules) for k, v in accounting.rows.items()}
    accounting.observe(snapshot)
    assert {k: (v.memory_byte_seconds, v.energy_joules) for k, v in accounting.rows.items()} == before


def test_no_pod_no_pod_series():
    """A host without Kubernetes gets no gpushare_pod_* or gpushare_namespace_* series."""
    from snapshot_samples import rich_snapshot

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PodCollector(lambda: rich_snapshot()))
    assert [m.name for m in registry.collect()] == []


def _gpu(processes, util, used, energy):
    return GpuInfo(index=0, uuid="GPU-x", name="NVIDIA H100 80GB HBM3", pci_bus_id="0", up=True, mig_mode=False,
                   utilization_ratio=util, memory_used_bytes=used, energy_joules=energy, processes=tuple(processes))


proc_strategy = st.tuples(st.sampled_from(["", "a", "b", "c"]), st.integers(0, 8 * GIB),
                          st.one_of(st.none(), st.floats(0, 1)))


@settings(max_examples=150, deadline=None)
@example([([("a", 0, 5e-324)], 0.75, 0, 0.0)])  # a subnormal SM sample once gave the pod 1.0 of a 0.75-busy GPU
@given(st.lists(st.tuples(st.lists(proc_strategy, max_size=6), st.floats(0, 1), st.integers(0, 8 * GIB),
                          st.floats(0, 400)), min_size=1, max_size=8))
def test_sums_and_monotonic_for_any_time_sliced_history(history):
    """Whatever the processes, samples and energy: rows sum to the device and counters never drop."""
    accounting = Accounting()
    energy, last = 0.0, {}
    for step, (procs, util, extra, joules) in enumerate(history):
        infos = [ProcessInfo(100 + i, "p", "", 0, None, None, mem, sm, namespace="ns" if pod else "", pod=pod)
                 for i, (pod, mem, sm) in enumerate(procs)]
        used = sum(p.used_memory_bytes for p in infos) + extra
        energy += joules
        gpu = _gpu(infos, util, used, energy)
        accounting.observe(Snapshot(timestamp=1000.0 + 10 * step, backend="nvml", driver_version="",
                                    poll_duration_seconds=0.0, gpus=(gpu,)))
        rows = device_shares(gpu)
        assert math.isclose(sum(r.memory_bytes for r in rows), used, rel_tol=1e-12)
        assert math.isclose(sum(r.sm_share or 0 for r in rows), util, abs_tol=1e-9)
        for key, totals in accounting.rows.items():
            now = (totals.memory_byte_seconds, totals.sm_seconds, totals.energy_joules)
            # A counter once exported never drops or disappears (None: not known yet, not exported).
            assert all(b is None or (a is not None and a >= b) for a, b in zip(now, last.get(key, (None,) * 3)))
            last[key] = now
    booked = sum(t.energy_joules or 0.0 for t in accounting.rows.values())
    assert math.isclose(booked, energy - history[0][3], rel_tol=1e-9, abs_tol=1e-6)


def test_a_counter_read_every_ten_seconds_is_split_by_the_shares_over_those_seconds():
    """The NVML backend reads the energy counter every 10 s and repeats the reading in between:
    the difference is booked by each pod's SM share x seconds since the last reading, not by the
    shares of the poll that happens to read it. Pod a runs alone for 5 s, then pod b for 5 s,
    and the counter moves 1000 J once, at the end: 500 J each."""
    accounting = Accounting()
    for step in range(11):
        pod = "a" if step <= 5 else "b"
        proc = ProcessInfo(100 if pod == "a" else 101, "p", "", 0, None, None, GIB, 1.0, namespace="ns", pod=pod)
        gpu = _gpu([proc], 1.0, GIB, 1000.0 if step == 10 else 0.0)
        accounting.observe(Snapshot(timestamp=1000.0 + step, backend="nvml", driver_version="",
                                    poll_duration_seconds=0.0, gpus=(gpu,)))
        if 0 < step < 10:  # not moved yet: the pods appear, with nothing booked
            assert {k[4]: t.energy_joules for k, t in accounting.rows.items() if k[4]} == (
                {"a": 0.0} if step <= 5 else {"a": 0.0, "b": 0.0})
    energy = {k[4]: t.energy_joules for k, t in accounting.rows.items()}
    assert energy["a"] == pytest.approx(500.0) and energy["b"] == pytest.approx(500.0)
    assert sum(energy.values()) == pytest.approx(1000.0)


def test_unknown_sm_share_books_no_sm_seconds_and_no_energy():
    """A MIG pod on an A100 read through NVML (no GPM, so its instance's SM activity is unknown):
    memory byte-seconds accrue, SM-seconds and joules are absent rather than 0; through DCGM,
    which reads the instance's activity, all three are there."""
    from dcgm_helpers import scrape_at
    from tests.conftest import SCENARIOS

    path = SCENARIOS / "k8s-shared-node.yaml"
    for backend, expect_sm in (("nvml", False), ("dcgm", True)):
        series = scrape_at(path, backend, [58, 59, 60])
        mig_pods = {dict(k[1])["pod"]: k for k in series
                    if k[0] == "gpushare_pod_memory_byte_seconds_total" and dict(k[1])["gi"] and dict(k[1])["pod"]}
        assert mig_pods, backend
        for pod, key in mig_pods.items():
            labels = key[1]
            assert series[key] > 0
            for family in ("gpushare_pod_sm_seconds_total", "gpushare_pod_energy_joules_total"):
                assert ((family, labels) in series) == expect_sm, (backend, pod, family)
