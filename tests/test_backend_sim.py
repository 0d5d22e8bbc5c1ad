"""NvmlBackend on the simulator (SimBackend): MIG, MPS, faults, reconfiguration, GPM."""

from __future__ import annotations

import threading
from collections import Counter

import pynvml
import pytest

from exporter.backend import nvml_mig
from exporter.backend.nvml import NvmlBackend
from exporter.backend.sim import SimBackend
from exporter.sim import Simulation
from exporter.sim.scenario import parse_scenario

GIB, MIB = 2**30, 2**20


def scenario(**data):
    data.setdefault("name", "t")
    return parse_scenario(data, "test.yaml")


@pytest.fixture
def backends():
    """Opened SimBackends, closed after the test (also restores pynvml.nvmlLib)."""
    opened = []

    def _open(scn, **kwargs):
        backend = SimBackend(scn, **kwargs)
        backend.open()
        opened.append(backend)
        return backend

    yield _open
    for backend in opened:
        backend.close()


def poll_at(backend, t):
    backend.step_to(t)
    return backend.poll()


def test_sparse_mig_indices_are_skipped_not_stopped(backends):
    """Instances at MIG indices 2 and 5 are both found; the empty slots before them are skipped."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb", "start": 0, "device_index": 5},
                                                         {"profile": "1g.5gb", "start": 4, "device_index": 2}]}],
                   processes=[{"pid": 501, "cmdline": "python3 a.py", "gpu": 0, "mig": 0, "memory": "2GiB"},
                              {"pid": 502, "cmdline": "python3 b.py", "gpu": 0, "mig": 1, "memory": "1GiB"}])
    gpu = poll_at(backends(scn), 10).gpus[0]
    by_index = {m.mig_index: m for m in gpu.mig_instances}
    assert sorted(by_index) == [2, 5]
    big, small = by_index[5], by_index[2]
    assert (big.profile, big.placement_start, big.placement_size) == ("3g.20gb", 0, 4)
    assert (small.profile, small.placement_start, small.placement_size) == ("1g.5gb", 4, 1)
    assert big.sm_count == 42 and small.sm_count == 14  # A100 3g / 1g SM counts (nvml_facts §2.3)
    assert gpu.mig_mode is True and gpu.sharing == "mig"


def test_mig_processes_come_from_instances_once(backends):
    """On a MIG GPU each process appears once, tagged with its instance's gi/ci, without per-process util."""
    scn = scenario(gpus=[{"model": "H100-80GB", "mig": [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]}],
                   processes=[{"pid": 601, "cmdline": "python3 a.py", "gpu": 0, "mig": 0, "memory": "3GiB"},
                              {"pid": 602, "cmdline": "python3 b.py", "gpu": 0, "mig": 1, "memory": "5GiB"}])
    gpu = poll_at(backends(scn), 5).gpus[0]
    gi_of = {m.mig_uuid: m.gi for m in gpu.mig_instances}
    assert len(gi_of) == 2
    procs = {p.pid: p for p in gpu.processes}
    assert sorted(procs) == [601, 602] and len(gpu.processes) == 2
    assert procs[601].gi != procs[602].gi and {procs[601].gi, procs[602].gi} == set(gi_of.values())
    assert (procs[601].used_memory_bytes, procs[602].used_memory_bytes) == (3 * GIB, 5 * GIB)
    assert all(p.sm_utilization_ratio is None for p in gpu.processes)
    assert gpu.utilization_ratio is None  # NotSupported on MIG GPUs: omitted, not zero
    used = {m.gi: m.memory_used_bytes for m in gpu.mig_instances}
    assert used[procs[601].gi] >= 3 * GIB and used[procs[602].gi] >= 5 * GIB


def test_mig_reconfigure_is_followed_without_restart(backends):
    """After a mig_reconfigure the new instances, profiles, capacity and processes are read."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb", "start": 0}]}],
                   processes=[{"pid": 701, "cmdline": "python3 old.py", "gpu": 0, "mig": 0, "memory": "1GiB",
                               "end": "50s"},
                              {"pid": 702, "cmdline": "python3 new.py", "gpu": 0, "mig": 1, "memory": "2GiB",
                               "start": "70s"}],
                   events=[{"at": "60s", "mig_reconfigure": {"gpu": 0, "mig": [{"profile": "3g.20gb", "start": 0},
                                                                               {"profile": "3g.20gb", "start": 4}]}}])
    backend = backends(scn)
    before = poll_at(backend, 10).gpus[0]
    assert [m.profile for m in before.mig_instances] == ["3g.20gb"]
    assert before.mig_free_capacity["3g.20gb"] == 1  # memory slices 4-7 still free for a second 3g
    for t in range(61, 80):  # polling every second, as the exporter does
        poll_at(backend, t)
    after = poll_at(backend, 80).gpus[0]
    assert sorted((m.profile, m.placement_start) for m in after.mig_instances) == [("3g.20gb", 0), ("3g.20gb", 4)]
    assert after.mig_free_capacity["3g.20gb"] == 0
    assert [p.pid for p in after.processes] == [702]
    new_gi = next(m.gi for m in after.mig_instances if m.placement_start == 4)
    assert after.processes[0].gi == new_gi


def test_mig_instance_added_beside_kept_ones_appears_within_the_rescan_period(backends):
    """An instance created in an empty slot shows up by the MIG_RESCAN_POLLS-th poll; one destroyed vanishes at the next poll."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb", "start": 0}]}],
                   events=[{"at": "20s", "mig_reconfigure": {"gpu": 0, "mig": [{"profile": "3g.20gb", "start": 0},
                                                                               {"profile": "3g.20gb", "start": 4}]}},
                           {"at": "50s", "mig_reconfigure": {"gpu": 0, "mig": [{"profile": "3g.20gb", "start": 4}]}}])
    backend = backends(scn)
    seen = {t: len(poll_at(backend, t).gpus[0].mig_instances) for t in range(1, 50)}
    assert seen[19] == 1
    appeared = min(t for t in range(20, 50) if seen[t] == 2)
    assert appeared <= 20 + nvml_mig.MIG_RESCAN_POLLS and all(seen[t] == 2 for t in range(appeared, 50))
    after = poll_at(backend, 50).gpus[0]
    assert [m.placement_start for m in after.mig_instances] == [4]
    assert after.mig_free_capacity["3g.20gb"] == 1


def test_mig_slots_are_not_reenumerated_every_poll(backends):
    """In a steady MIG layout a poll asks each kept handle its UUID and does not probe every slot again."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb", "start": 0}]}])
    backend = backends(scn)
    for t in range(1, 4):
        poll_at(backend, t)
    before = Counter(backend.sim.call_counts)
    poll_at(backend, 4)
    made = Counter(backend.sim.call_counts) - before
    assert made["nvmlDeviceGetMigDeviceHandleByIndex"] == 0
    assert made["nvmlDeviceGetUUID"] == 1


def test_mps_server_clients_and_restart(backends):
    """MPS: server flagged, clients carry env limits; after a restart the new server pid is reported."""
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20G", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    scn = scenario(gpus=[{"model": "H100-80GB", "mps": True}],
                   processes=[{"pid": 801, "cmdline": "python3 a.py", "gpu": 0, "memory": "2GiB", "env": env},
                              {"pid": 802, "cmdline": "python3 b.py", "gpu": 0, "memory": "2GiB", "start": "100s"}],
                   events=[{"at": "60s", "mps_restart": {"gpu": 0}}])
    backend = backends(scn)
    first = poll_at(backend, 10).gpus[0]
    assert first.sharing == "mps" and len(first.mps_servers) == 1
    server_pid = first.mps_servers[0].pid
    procs = {p.pid: p for p in first.processes}
    assert procs[server_pid].is_mps_server and procs[server_pid].name == "nvidia-cuda-mps-server"
    assert procs[801].is_mps_client and procs[801].mps_memory_limit_bytes == 20 * GIB
    assert procs[801].mps_active_thread_ratio == pytest.approx(0.5)
    later = poll_at(backend, 110).gpus[0]
    assert len(later.mps_servers) == 1 and later.mps_servers[0].pid != server_pid
    pids = {p.pid for p in later.processes}
    assert 801 not in pids and 802 in pids  # the restart ended the old client; the new one is seen
    assert later.sharing == "mps"


def test_mig_plus_mps_limit_on_instance(backends):
    """A client on a MIG instance with an MPS server: sharing mig+mps, ordinal-0 limit applies to the instance."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb", "mps": True}, {"profile": "2g.10gb"}]}],
                   processes=[{"pid": 901, "cmdline": "python3 a.py", "gpu": 0, "mig": 0, "memory": "1GiB",
                               "env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G"}}])
    gpu = poll_at(backends(scn), 5).gpus[0]
    assert gpu.sharing == "mig+mps"
    gi = next(m.gi for m in gpu.mig_instances if m.profile == "3g.20gb")
    assert [s.gi for s in gpu.mps_servers] == [gi]
    client = next(p for p in gpu.processes if p.pid == 901)
    assert client.is_mps_client and client.gi == gi and client.mps_memory_limit_bytes == 4 * GIB


def test_values_and_units_from_scenario(backends):
    """Scenario overrides come back in base units: W, °C, cumulative ECC, decoded clock reasons."""
    scn = scenario(gpus=[{"model": "H100-80GB", "power_watts": 312.5, "temperature_celsius": 57,
                          "ecc_corrected": 5, "clock_event_reasons": [[0, ["sw_power_cap"]]]}])
    gpu = poll_at(backends(scn), 1).gpus[0]
    assert gpu.power_watts == pytest.approx(312.5)
    assert gpu.temperature_celsius == pytest.approx(57)
    assert gpu.ecc_errors["corrected"] == 5
    assert gpu.clock_event_reasons["sw_power_cap"] is True
    assert gpu.clock_event_reasons["hw_slowdown"] is False
    assert all(v > 1e6 for v in gpu.clocks_hertz.values())  # Hz, not MHz
    assert gpu.memory_reserved_bytes is not None and gpu.memory_total_bytes > gpu.memory_used_bytes


def test_gpm_activity_between_polls(backends):
    """Hopper GPM: no activity on the first poll, then the process's share as a ratio; none on Ampere."""
    scn = scenario(gpus=[{"model": "H100-80GB"}, {"model": "A100-40GB"}],
                   processes=[{"pid": 1001, "cmdline": "python3 a.py", "gpu": 0, "memory": "1GiB",
                               "sm_active": 0.5, "tensor_active": 0.25},
                              {"pid": 1002, "cmdline": "python3 b.py", "gpu": 1, "memory": "1GiB", "sm_active": 0.5}])
    backend = backends(scn)
    first = poll_at(backend, 10)
    assert first.gpus[0].activity.sm_active is None
    second = poll_at(backend, 20)
    assert second.gpus[0].activity.sm_active == pytest.approx(0.5, abs=0.01)
    assert second.gpus[0].activity.tensor_active == pytest.approx(0.25, abs=0.01)
    assert second.gpus[1].activity.sm_active is None  # A100: GPM not supported
    proc = second.gpus[0].processes[0]
    # The simulator samples smUtil = int(115 x sm_active) percent (exporter/sim/fakelib_procs.py).
    assert proc.sm_utilization_ratio == pytest.approx(int(115 * 0.5) / 100)


def test_gpu_lost_only_that_gpu(backends):
    """A lost GPU is down with GpuIsLost while the other GPU is read normally."""
    scn = scenario(gpus=[{"model": "H100-80GB"}, {"model": "H100-80GB"}],
                   events=[{"at": "30s", "gpu_lost": {"gpu": 1}}])
    backend = backends(scn)
    assert all(g.up for g in poll_at(backend, 10).gpus)
    snap = poll_at(backend, 40)
    assert snap.gpus[0].up and not snap.gpus[1].up and snap.gpus[1].error == "GpuIsLost"
    assert snap.gpus[1].uuid == poll_at(backend, 41).gpus[1].uuid != ""  # identity kept for labels
    assert any(err == "GpuIsLost" for _, err in snap.call_errors)


def test_hang_times_out_one_gpu_only(backends):
    """A call that blocks on GPU 1 makes it "timeout" while GPU 0 is read; a stuck read is not restarted."""
    scn = scenario(gpus=[{"model": "H100-80GB"}, {"model": "H100-80GB"}],
                   events=[{"at": "10s", "fault": {"call": "nvmlDeviceGetPowerUsage", "gpu": 1, "error": "Unknown",
                                                   "delay": "1s", "until": "20s"}}])
    backend = backends(scn, gpu_timeout=0.2)
    threads_at_open = threading.active_count()
    snap = poll_at(backend, 12)
    assert snap.gpus[0].up and (snap.gpus[1].up, snap.gpus[1].error) == (False, "timeout")
    power_reads = backend.sim.call_counts["nvmlDeviceGetPowerUsage"]
    again = backend.poll()
    assert again.gpus[1].error == "timeout"
    assert backend.sim.call_counts["nvmlDeviceGetPowerUsage"] == power_reads + 1  # GPU 0's only
    assert threading.active_count() == threads_at_open
    assert backend.nvml._workers[1].done.wait(5)
    assert poll_at(backend, 25).gpus[1].up


def test_vanished_process_is_kept(backends):
    """A process whose name and /proc entry are gone is kept with its memory and empty name/cmdline."""
    scn = scenario(gpus=[{"model": "H100-80GB"}],
                   processes=[{"pid": 1101, "cmdline": "python3 train.py", "gpu": 0, "memory": "4GiB"}],
                   events=[{"at": "10s", "fault": {"call": "nvmlSystemGetProcessName", "gpu": 0, "error": "NotFound"}}])
    proc = poll_at(backends(scn), 15).gpus[0].processes[0]
    assert (proc.pid, proc.name, proc.cmdline, proc.used_memory_bytes) == (1101, "", "", 4 * GIB)


def test_process_name_and_cmdline_from_sim(backends):
    """A live process gets NVML's name and the /proc command line."""
    scn = scenario(gpus=[{"model": "H100-80GB"}],
                   processes=[{"pid": 1201, "cmdline": "python3 train.py --epochs 3", "gpu": 0, "memory": "4GiB"}])
    proc = poll_at(backends(scn), 1).gpus[0].processes[0]
    assert (proc.name, proc.cmdline) == ("python3", "python3 train.py --epochs 3")
    assert poll_at(backends(scn), 1).gpus[0].sharing == "exclusive"


def test_xid_counted_on_parent_gpu(backends):
    """XIDs (also those attributed to a MIG instance) are counted per code on the physical GPU."""
    scn = scenario(gpus=[{"model": "A100-40GB", "mig": [{"profile": "3g.20gb"}]}],
                   events=[{"at": "10s", "xid": {"gpu": 0, "code": 43, "mig": 0}},
                           {"at": "20s", "xid": {"gpu": 0, "code": 43}}])
    backend = backends(scn)
    poll_at(backend, 1)
    assert poll_at(backend, 15).gpus[0].xid_errors == {43: 1}
    assert poll_at(backend, 25).gpus[0].xid_errors == {43: 2}


def test_simulation_info_and_clock(backends):
    """Snapshots carry virtual time and OOM kills; time stops at duration and never goes back."""
    scn = scenario(duration="60s", gpus=[{"model": "H100-80GB"}])
    backend = backends(scn)
    snap = poll_at(backend, 30)
    assert snap.backend == "nvml" and snap.simulation.time_seconds == 30 and snap.simulation.oom_kills == {}
    assert poll_at(backend, 500).simulation.time_seconds == 60
    assert poll_at(backend, 10).simulation.time_seconds == 60


def test_injected_clock_with_speed_free_default(backends):
    """A clock callable drives virtual time (capped by duration)."""
    now = [5.0]
    backend = backends(scenario(duration="60s", gpus=[{"model": "H100-80GB"}]), clock=lambda: now[0])
    assert backend.poll().simulation.time_seconds == 5.0
    now[0] = 42.0
    assert backend.poll().simulation.time_seconds == 42.0


def test_old_driver_without_memory_v2(tmp_path):
    """With nvmlDeviceGetMemoryInfo_v2 hidden (old driver) memory comes from v1 and reserved is None."""
    sim = Simulation(scenario(gpus=[{"model": "H100-80GB"}]), procfs_dir=str(tmp_path / "proc"))
    sim.install(hidden_symbols=("nvmlDeviceGetMemoryInfo_v2",))
    backend = NvmlBackend(pynvml, procfs_root=sim.procfs_root)
    try:
        backend.open()
        gpu = backend.poll().gpus[0]
        assert gpu.memory_reserved_bytes is None and gpu.memory_total_bytes > 0
        assert gpu.memory_used_bytes is not None
    finally:
        backend.close()
        sim.close()


def test_example_scenarios_poll_cleanly():
    """Every shipped scenario opens and polls with all sections OK at its start (once NVML
    can start: node-faults.yaml begins with the driver still loading)."""
    from pathlib import Path

    from exporter.sim.scenario import load_scenario

    root = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
    for path in sorted(root.glob("*.yaml")):
        scn = load_scenario(path)
        start = max([1.0] + [e.fault.until for e in scn.events if e.kind == "nvml_init_failure"])
        backend = SimBackend(scn)
        backend.step_to(start)
        backend.open()
        try:
            snap = poll_at(backend, start)
        finally:
            backend.close()
        assert all(g.up for g in snap.gpus), path.name
        assert all(snap.section_ok.values()), (path.name, snap.section_ok)


def test_close_frees_gpm_samples_and_event_sets():
    """Every GPM sample and XID event set allocated (also for instances removed by a reconfigure) is freed."""
    scn = scenario(gpus=[{"model": "H100-80GB", "mig": [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]}],
                   events=[{"at": "30s", "mig_reconfigure": {"gpu": 0, "mig": [{"profile": "7g.80gb"}]}}])
    backend = SimBackend(scn)
    backend.open()
    for t in (1, 10, 40, 50):
        poll_at(backend, t)
    counts = backend.sim.call_counts
    backend.nvml.close()
    try:
        assert counts["nvmlGpmSampleAlloc"] > 0 and counts["nvmlGpmSampleAlloc"] == counts["nvmlGpmSampleFree"]
        assert counts["nvmlEventSetCreate"] == counts["nvmlEventSetFree"] == 1
    finally:
        backend.close()
