"""The fault model (docs/scenarios.md) as clients see it through the real pynvml.

Each test writes a scenario with one kind of fault and checks what NVML answers before,
during and after it: the error class, which calls and devices it hits, and what recovers.
"""

from __future__ import annotations

import pynvml
import pytest

from exporter.errors import UserError
from exporter.sim import Simulation
from exporter.sim.scenario import parse_scenario

GIB = 2**30


@pytest.fixture
def host():
    """host(scenario dict, init=True) -> installed Simulation; cleaned up after the test."""
    sims = []

    def start(data, init=True):
        sim = Simulation(parse_scenario(data, "faults.yaml"))
        sim.install()
        if init:
            pynvml.nvmlInit()
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        while sim._installed and sim._installed._impl._init_count:
            pynvml.nvmlShutdown()
        sim.close()


def h(i):
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def mig_handles(parent):
    found = {}
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found[i] = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        except pynvml.NVMLError_NotFound:
            pass
    return found


def outcomes(n):
    """n power reads of GPU 0: True for a failure."""
    result = []
    for _ in range(n):
        try:
            pynvml.nvmlDeviceGetPowerUsage(h(0))
            result.append(False)
        except pynvml.NVMLError_Unknown:
            result.append(True)
    return result


def flaky(seed):
    return {"seed": seed, "gpus": [{"model": "H100-80GB"}],
            "events": [{"at": 0, "fault": {"call": "nvmlDeviceGetPowerUsage", "gpu": 0, "error": "Unknown",
                                            "probability": 0.25}}]}


def test_probability_faults_are_seeded_and_reproducible(host):
    """Same seed, same failing calls; another seed, another pattern; about p of them fail."""
    host(flaky(7))
    first = outcomes(400)
    pynvml.nvmlShutdown()
    host(flaky(7))
    assert outcomes(400) == first
    pynvml.nvmlShutdown()
    host(flaky(8))
    assert outcomes(400) != first
    assert 0.18 <= sum(first) / 400 <= 0.32


def test_fault_scoped_to_one_mig_instance(host):
    """Calls on that instance fail; its sibling and the parent answer."""
    sim = host({"gpus": [{"model": "H100-80GB", "mig": [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]}],
                "events": [{"at": 5, "fault": {"call": "*", "gpu": 0, "mig": 1, "error": "Unknown"}}]})
    devices = mig_handles(h(0))
    sim.advance_to(5)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetMemoryInfo(devices[1])
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h(0), 1)
    assert pynvml.nvmlDeviceGetMemoryInfo(devices[0]).total == 40448 * 2**20
    assert pynvml.nvmlDeviceGetPowerUsage(h(0)) > 0


def test_delay_only_fault_is_slow_but_succeeds(host, monkeypatch):
    """error: Success with a delay: the call blocks, then answers normally."""
    slept = []
    monkeypatch.setattr("exporter.sim.fakelib.time.sleep", slept.append)
    host({"gpus": [{"model": "A30"}],
          "events": [{"at": 0, "fault": {"call": "nvmlDeviceGetMemoryInfo", "error": "Success", "delay": "2s"}}]})
    assert pynvml.nvmlDeviceGetMemoryInfo(h(0)).total == 24576 * 2**20
    assert slept == [2.0]


def test_gpu_lost_then_reset_clears_counters_processes_and_mig_instances(host):
    """Lost at 10 s: GpuIsLost. Reset at 20 s: answers again with the energy counter and the
    volatile ECC counts restarted (aggregate kept), its processes gone, MIG instances
    recreated from the reset's layout with new UUIDs."""
    sim = host({
        "gpus": [{"model": "A100-40GB", "power_watts": 100, "ecc_corrected": [[0, 0], [15, 4]],
                  "mig": [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}]}],
        "processes": [{"pid": 10, "name": "job", "gpu": 0, "mig": 0, "memory": "1GiB"},
                      {"pid": 11, "name": "late", "gpu": 0, "mig": 0, "start": 25, "memory": "1GiB"}],
        "events": [{"at": 10, "gpu_lost": {"gpu": 0}},
                   {"at": 20, "gpu_reset": {"gpu": 0, "mig": [{"profile": "7g.40gb"}]}}]})
    before = pynvml.nvmlDeviceGetUUID(mig_handles(h(0))[0])
    sim.advance_to(10)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(h(0))
    sim.advance_to(20)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h(0)) == 0
    sim.advance_to(22)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h(0)) == 200 * 1000
    corrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    assert pynvml.nvmlDeviceGetTotalEccErrors(h(0), corrected, pynvml.NVML_VOLATILE_ECC) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(h(0), corrected, pynvml.NVML_AGGREGATE_ECC) == 4
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h(0)) == []
    (only,) = mig_handles(h(0)).values()
    assert pynvml.nvmlDeviceGetName(only).endswith("MIG 7g.40gb")
    assert pynvml.nvmlDeviceGetUUID(only) != before
    sim.advance_to(25)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h(0))] == [11]


def test_nvml_init_failure_then_driver_loaded(host):
    """nvmlInit fails with the scenario's error during its window, then succeeds."""
    sim = host({"gpus": [{"model": "L4"}],
                "events": [{"at": 0, "nvml_init_failure": {"error": "DriverNotLoaded", "until": "30s"}}]},
               init=False)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    sim.advance_to(30)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_driver_mismatch_keeps_running_sessions_and_fails_new_ones(host):
    """After an upgrade without reload: a running session keeps its (old) library; a new
    nvmlInit fails with LibRmVersionMismatch until the new module is loaded."""
    sim = host({"driver_version": "580.95.05", "gpus": [{"model": "H200"}],
                "events": [{"at": 60, "driver_mismatch": {"version": "580.105.08", "until": "5m"}}]})
    sim.advance_to(60)
    assert pynvml.nvmlSystemGetDriverVersion() == "580.95.05"
    assert pynvml.nvmlDeviceGetCount() == 1
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_LibRmVersionMismatch):
        pynvml.nvmlInit()
    sim.advance_to(300)
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "580.105.08"


def test_gpu_removal_and_attachment_change_the_count_at_the_next_init(host):
    """A removed GPU answers GpuIsLost to the session that knew it; a new session counts one
    GPU fewer and renumbers densely; an attached GPU appears at the next init."""
    sim = host({"gpus": [{"model": "H100-80GB"}, {"model": "A100-80GB"}, {"model": "L4", "present": False}],
                "events": [{"at": 10, "gpu_removed": {"gpu": 0}}, {"at": 20, "gpu_attached": {"gpu": 2}}]})
    assert pynvml.nvmlDeviceGetCount() == 2
    kept = h(0)
    sim.advance_to(10)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(kept)
    assert pynvml.nvmlDeviceGetCount() == 2  # enumerated at init
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    assert [pynvml.nvmlDeviceGetName(h(i)) for i in range(pynvml.nvmlDeviceGetCount())] == [
        "NVIDIA A100-SXM4-80GB"]
    sim.advance_to(20)
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    assert [pynvml.nvmlDeviceGetName(h(i)) for i in range(pynvml.nvmlDeviceGetCount())] == [
        "NVIDIA A100-SXM4-80GB", "NVIDIA L4"]
    assert pynvml.nvmlDeviceGetIndex(h(1)) == 1 and pynvml.nvmlDeviceGetMinorNumber(h(1)) == 2


def test_process_with_na_memory(host):
    """memory_na: usedGpuMemory is N/A (None in pynvml); the device still counts it."""
    host({"gpus": [{"model": "H100-80GB"}],
          "processes": [{"pid": 5, "name": "a", "gpu": 0, "memory": "3GiB", "memory_na": True},
                        {"pid": 6, "name": "b", "gpu": 0, "memory": "1GiB"}]})
    by_pid = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h(0))}
    assert by_pid == {5: None, 6: 1 * GIB}
    assert pynvml.nvmlDeviceGetMemoryInfo(h(0), version=pynvml.nvmlMemory_v2).used == 4 * GIB


def test_mps_server_death_without_restart(host):
    """The server dies: its clients die with it (not OOM), later clients cannot connect and
    never appear; an mps_restart brings a new server for the next client."""
    sim = host({"gpus": [{"model": "H100-80GB", "mps": True}],
                "processes": [{"pid": 1, "name": "c1", "gpu": 0, "memory": "2GiB"},
                              {"pid": 2, "name": "c2", "gpu": 0, "start": 40, "memory": "2GiB"},
                              {"pid": 3, "name": "c3", "gpu": 0, "start": 70, "memory": "2GiB"}],
                "events": [{"at": 30, "mps_server_death": {"gpu": 0}},
                           {"at": 60, "mps_restart": {"gpu": 0}}]})
    names = lambda: sorted(pynvml.nvmlSystemGetProcessName(p.pid)  # noqa: E731
                           for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h(0)))
    assert names() == ["c1", "nvidia-cuda-mps-server"]
    sim.advance_to(45)
    assert names() == []
    assert [(e.pid, e.reason) for e in sim.mps_fault_events] == [(1, "mps_server_death"), (2, "mps_unavailable")]
    assert sim.oom_kills == {}
    sim.advance_to(70)
    assert names() == ["c3", "nvidia-cuda-mps-server"]


def test_failed_repartition_leaves_a_half_done_layout(host):
    """fails_after: only the first instances exist; a GPU instance without a compute instance
    holds its slices (capacity) but is no MIG device."""
    sim = host({"gpus": [{"model": "H100-80GB", "mig": [{"profile": "7g.80gb"}]}],
                "events": [{"at": 10, "mig_reconfigure": {"gpu": 0, "fails_after": 2, "mig": [
                    {"profile": "3g.40gb", "start": 4}, {"profile": "2g.20gb", "start": 0, "compute_instance": False},
                    {"profile": "2g.20gb", "start": 2}]}}]})
    sim.advance_to(10)
    devices = mig_handles(h(0))
    assert [pynvml.nvmlDeviceGetName(d).split()[-1] for d in devices.values()] == ["3g.40gb"]
    count = pynvml.c_uint()
    array = (pynvml.c_nvmlGpuInstance_t * 3)()
    pynvml.nvmlDeviceGetGpuInstances(h(0), 14, array, pynvml.byref(count))  # 2g.20gb: id 14
    assert count.value == 1
    info = pynvml.nvmlGpuInstanceGetInfo(array[0])
    cis = (pynvml.c_nvmlComputeInstance_t * 1)()
    pynvml.nvmlGpuInstanceGetComputeInstances(array[0], 1, cis, pynvml.byref(count))
    assert count.value == 0 and info.profileId == 14
    # Inside the orphan GPU instance a compute instance could still be created: capacity 1
    # for the full-size profile (2 slices), none found by id.
    full = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(array[0], full) == 1
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(array[0], 0)
    # 3g at 4-7 and the CI-less 2g at 0-1 hold their slices: one more 2g.20gb fits (at 2).
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h(0), 14) == 1
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h(0), 9) == 0


@pytest.mark.parametrize("event,message", [
    ({"at": 0, "fault": {"call": "nvmlDeviceGetPowerUsage", "error": "Success"}}, "give it a delay"),
    ({"at": 0, "fault": {"call": "nvmlDeviceGetPowerUsage", "error": "Unknown", "probability": 1.5}},
     r"1\.5 is outside \(0, 1\]"),
    ({"at": 0, "fault": {"call": "*", "error": "Unknown", "mig": 0}}, "needs the gpu"),
    ({"at": 0, "gpu_attached": {"gpu": 0}}, "already on the bus"),
    ({"at": 0, "nvml_init_failure": {"error": "NotFound"}}, "unknown NVML error 'NotFound'"),
    ({"at": 0, "driver_mismatch": {"version": 580}}, "quoted version string"),
    ({"at": 0, "mps_server_death": {"gpu": 0}}, "no MPS server runs"),
])
def test_fault_events_are_validated_in_one_line(event, message):
    """Every malformed fault event is refused with its place and problem."""
    with pytest.raises(UserError, match=message) as info:
        parse_scenario({"gpus": [{"model": "H100-80GB"}], "events": [event]}, "f.yaml")
    assert str(info.value).startswith("f.yaml: events[0]") and "\n" not in str(info.value)


def test_process_on_a_gpu_off_the_bus_is_refused():
    """A process cannot start on a GPU that is not present then."""
    with pytest.raises(UserError, match=r"processes\[0\]\.start: GPU 0 is not on the bus at 0s"):
        parse_scenario({"gpus": [{"model": "L4", "present": False}],
                        "processes": [{"pid": 1, "name": "x", "gpu": 0, "memory": "1GiB"}]}, "f.yaml")
