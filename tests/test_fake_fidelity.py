"""The fake libnvidia-ml seen through the real pynvml wrappers behaves like NVML documents.

Expected values come from nvml_facts.md (profile ids, placements, memory sizes) and from the
scenario each test builds, never from the fake's own output.
"""

from __future__ import annotations

import dataclasses

import ctypes
import os

import pynvml
import pytest

from exporter.catalog import MIB, MODELS
from exporter.sim import Simulation
from exporter.sim.model import EventSpec, FaultSpec, GpuSpec, MigSpec, ProcessSpec, Scenario

GIB = 2**30
NO_ID = 0xFFFFFFFF


def gpu(index, model="H100-80GB", mig=None, mps=False) -> GpuSpec:
    return GpuSpec(index=index, model=model, uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-ddddeeeeffff",
                   pci_bus_id=f"00000000:{0x1B + index:02X}:00.0", mig=mig, mps=mps)


def proc(pid, gpu, memory, mig=None, start=0.0, sm=0.5, end=None) -> ProcessSpec:
    return ProcessSpec(pid=pid, name="python3", cmdline=f"python3 w{pid}.py", gpu=gpu, mig=mig,
                       start=start, end=end, memory=((start, float(memory)),),
                       activity={"sm_active": ((start, sm),)})


MIG_H100 = (MigSpec("3g.40gb", 4), MigSpec("1g.10gb", 0), MigSpec("1g.10gb", 1, device_index=5))


def standard_scenario(events=()) -> Scenario:
    """GPU 0: plain H100; GPU 1: H100 in MIG with sparse indices; GPU 2: A100 in MIG; GPU 3: MPS."""
    return Scenario(
        name="fidelity", source="fidelity.yaml", duration=None,
        gpus=(gpu(0), gpu(1, mig=MIG_H100), gpu(2, "A100-40GB", mig=(MigSpec("7g.40gb", 0),)),
              gpu(3, mps=True)),
        processes=(proc(100, 0, 5 * GIB, sm=0.4), proc(101, 0, 3 * GIB, sm=0.2),
                   proc(110, 1, 2 * GIB, mig=0), proc(111, 1, 1 * GIB, mig=2),
                   proc(130, 3, 4 * GIB), proc(131, 3, 6 * GIB)),
        events=tuple(events))


@pytest.fixture
def nvml():
    """Install a simulation of ``standard_scenario`` (or another) and nvmlInit it."""
    sims = []

    def stop():
        while sims:
            pynvml.nvmlShutdown()
            sims.pop().close()

    def start(scenario=None, hidden=()):
        stop()  # one simulation installed at a time
        sim = Simulation(scenario or standard_scenario())
        sim.install(hidden_symbols=hidden)
        pynvml.nvmlInit()
        sims.append(sim)
        return sim

    yield start
    stop()


def handle(i):
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def mig_handles(parent):
    """MIG handles by index, skipping empty (NotFound) indices as go-nvlib does."""
    found = {}
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found[i] = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        except pynvml.NVMLError_NotFound:
            pass
    return found


def test_identity_strings_are_str_including_struct_char_fields(nvml):
    """convertStrBytes gives str for names/UUIDs, and pynvml's _PrintableStructure decodes the
    C struct's char arrays too (profile name, busId), although the C side holds bytes.

    nvml_facts.md 1.1/7 say the profile name stays bytes; pynvml 13.615.71's own code
    (_PrintableStructure.__getattribute__) says otherwise, and this fake runs that code."""
    nvml()
    assert pynvml.nvmlDeviceGetCount() == 4
    assert pynvml.nvmlDeviceGetName(handle(0)) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetUUID(handle(2)) == gpu(2).uuid
    assert isinstance(pynvml.nvmlSystemGetDriverVersion(), str)
    assert pynvml.nvmlDeviceGetPciInfo(handle(1)).busId == "00000000:1C:00.0"
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle(1), pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert info.name == "MIG 3g.40gb"
    assert ctypes.Structure.__getattribute__(info, "name") == b"MIG 3g.40gb"  # the raw C field
    mig = mig_handles(handle(1))[0]
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert pynvml.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(mig)) is not None


def test_is_mig_device_handle_returns_a_c_uint(nvml):
    """pynvml returns the c_uint object itself, not its value."""
    nvml()
    mig = mig_handles(handle(1))[0]
    result = pynvml.nvmlDeviceIsMigDeviceHandle(mig)
    assert isinstance(result, ctypes.c_uint) and result.value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(handle(0)).value == 0
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(parent) == gpu(1).uuid
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(handle(0))


def test_utilization_not_supported_under_mig_on_parent_and_instance(nvml):
    """MIG GPUs refuse utilization rates; a plain GPU reports them in percent."""
    nvml()
    for h in (handle(1), mig_handles(handle(1))[0]):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(h)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    util = pynvml.nvmlDeviceGetUtilizationRates(handle(0))
    assert util.gpu == round(100 * min(1, 1.15 * 0.6))  # two processes at 0.4 + 0.2 SM active


def test_sparse_mig_indices_give_not_found_for_holes(nvml):
    """Forcing device_index 5 leaves 2..4 and 6 empty; past the maximum is InvalidArgument."""
    nvml()
    parent = handle(1)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    assert sorted(mig_handles(parent)) == [0, 1, 5]
    for hole in (2, 3, 4, 6):
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, hole)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)
    assert pynvml.nvmlDeviceGetIndex(mig_handles(parent)[5]) == 5
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle(0)) == 0  # MIG off


def test_gi_and_ci_ids_of_mig_devices(nvml):
    """3g at slice 4 is GI 1; 1g at slices 0 and 1 are GIs 7 and 8 (MIG guide numbering)."""
    nvml()
    found = mig_handles(handle(1))
    assert {i: pynvml.nvmlDeviceGetGpuInstanceId(h) for i, h in found.items()} == {0: 1, 1: 7, 5: 8}
    assert {pynvml.nvmlDeviceGetComputeInstanceId(h) for h in found.values()} == {0}


def test_process_lists_have_the_documented_shape(nvml):
    """Friendly objects with pid/usedGpuMemory/GI/CI; 0xFFFFFFFF ids without MIG."""
    nvml()
    plain = pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in plain] == [
        (100, 5 * GIB, NO_ID, NO_ID), (101, 3 * GIB, NO_ID, NO_ID)]
    found = mig_handles(handle(1))
    on_3g = pynvml.nvmlDeviceGetComputeRunningProcesses(found[0])
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in on_3g] == [(110, 1, 0)]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(found[1]) == []  # size probe: SUCCESS, empty
    aggregate = pynvml.nvmlDeviceGetComputeRunningProcesses(handle(1))
    assert [(p.pid, p.gpuInstanceId) for p in aggregate] == [(110, 1), (111, 8)]
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle(0)) == []


def test_mps_server_in_compute_list_clients_in_both(nvml):
    """The MPS server is a compute process; clients are in the MPS list and the compute list."""
    nvml()
    compute = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle(3))}
    mps = {p.pid for p in pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle(3))}
    assert mps == {130, 131}
    (server,) = compute - mps
    assert pynvml.nvmlSystemGetProcessName(server) == "nvidia-cuda-mps-server"
    assert pynvml.nvmlDeviceGetComputeMode(handle(3)) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert pynvml.nvmlDeviceGetComputeMode(handle(0)) == pynvml.NVML_COMPUTEMODE_DEFAULT


def test_memory_v1_counts_reserved_as_used_v2_does_not(nvml):
    """v1 used = reserved + allocated, v2 used = allocated; free and total agree."""
    nvml()
    model = MODELS["H100-80GB"]
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle(0))
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle(0), version=pynvml.nvmlMemory_v2)
    assert v2.used == 8 * GIB and v2.reserved == model.memory_reserved_mib * MIB
    assert v1.used == v2.used + v2.reserved and v1.free == v2.free and v1.total == v2.total
    assert v2.total == v2.reserved + v2.used + v2.free


def test_mig_instance_memory_total_is_the_profile_size(nvml):
    """H100 3g.40gb shows 40448 MiB and 1g.10gb 9.75 GiB = 9984 MiB (nvml_facts.md 1.4, 2.3)."""
    nvml()
    found = mig_handles(handle(1))
    assert pynvml.nvmlDeviceGetMemoryInfo(found[0]).total == 40448 * MIB
    assert pynvml.nvmlDeviceGetMemoryInfo(found[1]).total == 9984 * MIB
    assert pynvml.nvmlDeviceGetMemoryInfo(found[0], version=pynvml.nvmlMemory_v2).used == 2 * GIB


def _profile_ids(h):
    ids, index = {}, 0
    while True:
        try:
            ids[index] = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index).id
        except pynvml.NVMLError_NotSupported:
            pass
        except pynvml.NVMLError_InvalidArgument:
            return ids, index
        index += 1


def test_profile_ids_differ_from_enum_indices(nvml):
    """Enumerating until InvalidArgument yields the real ids of nvml_facts.md table 2.2."""
    a30 = Scenario(name="a30", source="a30.yaml", duration=None,
                   gpus=(gpu(0, "A30", mig=()),), processes=(), events=())
    nvml()
    ids, stop = _profile_ids(handle(1))
    assert stop == 17  # R580's count (580.159.04 observed), not nvidia-ml-py's newer constant
    assert ids == {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 9: 15}
    by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle(1), 15)
    assert (by_id.name, by_id.memorySizeMB, by_id.multiprocessorCount) == ("MIG 1g.20gb", 20096, 26)
    nvml(a30)
    assert _profile_ids(handle(0))[0] == {0: 14, 1: 5, 3: 0, 7: 21, 8: 6}
    later = dataclasses.replace(a30, driver_version="595.45.04")  # a branch after R580: pynvml's count
    nvml(later)
    assert _profile_ids(handle(0))[1] == max(17, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_the_profile_table_answers_with_mig_disabled(nvml):
    """A real H100 on 580.159.04 with MIG disabled answered the whole table through the V call
    (bench/real_gpu_smoke.py, 2026-11-26): the same ids, names, SMs and sizes as with MIG on."""
    nvml()
    assert pynvml.nvmlDeviceGetMigMode(handle(0))[0] == pynvml.NVML_DEVICE_MIG_DISABLE
    ids, stop = _profile_ids(handle(0))
    assert ids == {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 9: 15} and stop == 17
    seen = []
    for index in ids:
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle(0), index)
        seen.append((info.id, info.name, info.multiprocessorCount, info.memorySizeMB, info.sliceCount))
    assert seen == [(19, "MIG 1g.10gb", 16, 9984, 1), (14, "MIG 2g.20gb", 32, 20096, 2), (9, "MIG 3g.40gb", 60, 40448, 3),
                    (5, "MIG 4g.40gb", 64, 40448, 4), (0, "MIG 7g.80gb", 132, 81152, 7),
                    (20, "MIG 1g.10gb+me", 16, 9984, 1), (15, "MIG 1g.20gb", 26, 20096, 1)]
    assert pynvml.nvmlDeviceGetNumFans(handle(0)) == 0  # answered, as on the real board
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(handle(0))


def test_possible_placements_match_the_catalog(nvml):
    """Placements (start, size in memory slices) for every profile, as in the catalog and facts."""
    nvml()
    model = MODELS["H100-80GB"]
    for profile in model.mig_profiles:
        count = ctypes.c_uint()
        pid = profile.profile_id
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(1), pid, None, ctypes.byref(count))
        array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(1), pid, array, ctypes.byref(count))
        expected = [(s, profile.memory_slices) for s in profile.starts]
        assert [(p.start, p.size) for p in array] == expected
    assert model.profile("3g.40gb").starts == (0, 4)  # facts 2.1: 3g {0,4}:4


def test_gpu_instances_and_compute_instances_enumerate(nvml):
    """GetGpuInstances -> GetInfo gives ids and placements; each GI has one full CI."""
    nvml()
    count = ctypes.c_uint()
    array = (pynvml.c_nvmlGpuInstance_t * 7)()
    pynvml.nvmlDeviceGetGpuInstances(handle(1), 19, array, ctypes.byref(count))
    infos = [pynvml.nvmlGpuInstanceGetInfo(array[i]) for i in range(count.value)]
    found = [(i.id, i.profileId, i.placement.start, i.placement.size) for i in infos]
    assert found == [(7, 19, 0, 1), (8, 19, 1, 1)]
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle(1), 19) == 2  # 7 - 3 - 1 - 1 slices
    cis = (pynvml.c_nvmlComputeInstance_t * 1)()
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle(1), 1)
    ci_profile = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_profile, cis, ctypes.byref(count))
    assert count.value == 1 and pynvml.nvmlComputeInstanceGetInfo(cis[0]).id == 0
    # Compute-instance profiles inside the 3g GI (nvidia-smi mig -lcip): 1c.3g.40gb x3 .. 3g.40gb x1.
    one = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
    full = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, 0)
    assert (one.name, one.instanceCount, full.name, full.instanceCount) == ("MIG 1c.3g.40gb", 3, "MIG 3g.40gb", 1)
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, ci_profile) == 0  # taken by its CI
    assert pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)).id == 0


def test_gpm_not_supported_before_hopper_and_averages_on_hopper(nvml):
    """A100: isSupportedDevice 0 and sampling fails; H100: SM util between samples in percent."""
    sim = nvml()
    assert pynvml.nvmlGpmQueryDeviceSupport(handle(2)).isSupportedDevice == 0
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(handle(2), sample)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle(0)).isSupportedDevice == 1
    second = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle(0), sample)
    sim.advance_to(5)
    pynvml.nvmlGpmSampleGet(handle(0), second)
    metrics = pynvml.c_nvmlGpmMetricsGet_t()
    metrics.version, metrics.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, 2
    metrics.sample1, metrics.sample2 = sample, second
    metrics.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    metrics.metrics[1].metricId = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    pynvml.nvmlGpmMetricsGet(metrics)
    assert metrics.metrics[0].nvmlReturn == 0 and metrics.metrics[0].value == pytest.approx(60.0)
    assert metrics.metrics[1].value == 0.0
    # GI 1 (the 3g instance) runs process 110 at 0.5 SM active: sampled through its parent.
    pynvml.nvmlGpmMigSampleGet(handle(1), 1, sample)
    sim.advance_to(8)
    pynvml.nvmlGpmMigSampleGet(handle(1), 1, second)
    pynvml.nvmlGpmMetricsGet(metrics)
    assert metrics.metrics[0].value == pytest.approx(50.0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(handle(1), 2, sample)  # no GI 2 in this layout
    pynvml.nvmlGpmSampleFree(sample)
    pynvml.nvmlGpmSampleFree(second)


def test_event_wait_times_out_when_empty_and_delivers_xids(nvml):
    """No queued event: NVMLError_Timeout; an XID on a MIG instance carries its GI id."""
    sim = nvml(standard_scenario([EventSpec(at=3, kind="xid", gpu=1, xid=43, gi=0)]))
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(1), pynvml.nvmlEventTypeXidCriticalError, events)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(events, 1000)
    sim.advance_to(3)
    data = pynvml.nvmlEventSetWait(events, 0)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (43, 1, 0)
    assert pynvml.nvmlDeviceGetUUID(data.device) == gpu(1).uuid
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(events, 0)
    pynvml.nvmlEventSetFree(events)


def test_missing_versioned_symbol_raises_library_mismatch(nvml):
    """Without the _v3 symbol the unversioned wrapper raises NVMLLibraryMismatchError."""
    nvml(hidden={"nvmlDeviceGetComputeRunningProcesses_v3"})
    with pytest.raises(pynvml.NVMLLibraryMismatchError) as err:
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))
    assert not isinstance(err.value, pynvml.NVMLError)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle(0))


def test_stale_mig_handle_after_reconfigure(nvml):
    """A destroyed instance's handle is rejected; a kept instance's handle still works."""
    new_layout = (MigSpec("3g.40gb", 4), MigSpec("3g.40gb", 0))
    sim = nvml(standard_scenario([EventSpec(at=10, kind="mig_reconfigure", gpu=1, mig=new_layout)]))
    before = mig_handles(handle(1))
    sim.advance_to(10)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMemoryInfo(before[1])
    assert pynvml.nvmlDeviceGetGpuInstanceId(before[0]) == 1
    after = mig_handles(handle(1))
    assert sorted(after) == [0, 1]  # the new 3g took the lowest freed index
    assert pynvml.nvmlDeviceGetGpuInstanceId(after[1]) == 2
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle(1)) == []  # drained


def test_faults_hit_the_named_call_and_gpu_during_their_window(nvml, monkeypatch):
    """A fault matches C symbol and pynvml name, one GPU, [at, until); delays sleep first."""
    slept = []
    monkeypatch.setattr("exporter.sim.fakelib.time.sleep", slept.append)
    faults = [
        EventSpec(at=2, kind="fault", fault=FaultSpec("nvmlDeviceGetPowerUsage", 0, "Unknown", until=4)),
        EventSpec(at=0, kind="fault", fault=FaultSpec("nvmlDeviceGetMemoryInfo", 3, "Timeout", None, 1.5)),
    ]
    sim = nvml(standard_scenario(faults))
    pynvml.nvmlDeviceGetPowerUsage(handle(0))
    sim.advance_to(2)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetPowerUsage(handle(0))
    pynvml.nvmlDeviceGetPowerUsage(handle(1))
    for version in (None, pynvml.nvmlMemory_v2):
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlDeviceGetMemoryInfo(handle(3), version=version)
    assert slept == [1.5, 1.5]
    sim.advance_to(4)
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) > 0


def test_gpu_lost_fails_every_call_on_that_gpu_only(nvml):
    """After gpu_lost every call with that GPU's handles is GpuIsLost; others still work."""
    sim = nvml(standard_scenario([EventSpec(at=1, kind="gpu_lost", gpu=1)]))
    mig = mig_handles(handle(1))[0]
    sim.advance_to(1)
    for call in (lambda: pynvml.nvmlDeviceGetName(handle(1)), lambda: pynvml.nvmlDeviceGetMemoryInfo(mig)):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert pynvml.nvmlDeviceGetCount() == 4
    assert pynvml.nvmlDeviceGetName(handle(0)) == "NVIDIA H100 80GB HBM3"


def test_process_vanishing_between_list_and_lookup(nvml):
    """With a NotFound fault on the name lookup the pid is listed but its name and /proc are gone."""
    fault = FaultSpec("nvmlSystemGetProcessName", 0, "NotFound", until=None)
    sim = nvml(standard_scenario([EventSpec(at=0, kind="fault", fault=fault)]))
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))] == [100, 101]
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlSystemGetProcessName(100)
    assert not os.path.exists(os.path.join(sim.procfs_root, "100"))
    assert pynvml.nvmlSystemGetProcessName(110) == "python3"  # a process on another GPU
    assert os.path.exists(os.path.join(sim.procfs_root, "110", "cmdline"))


def test_process_utilization_samples_and_not_found(nvml):
    """Per-pid smUtil on a plain GPU; NotFound when asking for samples newer than the last."""
    sim = nvml()
    samples = pynvml.nvmlDeviceGetProcessUtilization(handle(0), 0)
    assert {s.pid: s.smUtil for s in samples} == {100: round(115 * 0.4), 101: round(115 * 0.2)}
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle(0), samples[0].timeStamp)
    sim.advance_to(1)
    assert len(pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle(0), samples[0].timeStamp)) == 2


def test_energy_is_reported_in_millijoules_and_grows(nvml):
    """Energy over 10 s at constant power equals power x time, in mJ."""
    sim = nvml()
    power_mw = pynvml.nvmlDeviceGetPowerUsage(handle(0))
    start = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle(0))
    sim.advance_to(10)
    spent = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle(0)) - start
    assert spent == pytest.approx(power_mw * 10, abs=2)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # parent-only reading
        pynvml.nvmlDeviceGetPowerUsage(mig_handles(handle(1))[0])


def test_calls_are_counted_by_c_symbol_and_need_init(nvml):
    """call_counts is keyed by C symbol; before nvmlInit calls are Uninitialized."""
    sim = Simulation(standard_scenario())
    sim.install()
    try:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
    finally:
        sim.close()
    sim = nvml()
    sim.call_counts.clear()
    pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))
    assert sim.call_counts["nvmlDeviceGetComputeRunningProcesses_v3"] == 2  # size probe + fill
    assert sim.call_counts["nvmlDeviceGetHandleByIndex_v2"] == 1


def test_uninstall_restores_the_previous_library():
    """install/uninstall swap pynvml.nvmlLib and leave no cached fake symbols behind."""
    previous = pynvml.nvmlLib
    sim = Simulation(standard_scenario())
    sim.install()
    assert pynvml.nvmlLib is not previous
    sim.close()
    assert pynvml.nvmlLib is previous
    assert not any(type(f).__name__ == "_Symbol" for f in pynvml._nvmlGetFunctionPointer_cache.values())


def test_clock_event_reasons_combine_load_and_scenario(nvml):
    """Idle GPU shows GpuIdle; a scenario hw_slowdown entry adds HwSlowdown from its time on."""
    base = standard_scenario()
    slowed = GpuSpec(**{**gpu(4, "A100-40GB").__dict__, "clock_event_reasons": ((5.0, ("hw_slowdown",)),)})
    sim = nvml(Scenario(**{**base.__dict__, "gpus": base.gpus + (slowed,)}))
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(4)) == pynvml.nvmlClocksEventReasonGpuIdle
    sim.advance_to(5)
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(4)) == (
        pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwSlowdown)
    busy = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(0))
    assert not busy & pynvml.nvmlClocksEventReasonGpuIdle
    max_sm = pynvml.nvmlDeviceGetMaxClockInfo(handle(0), pynvml.NVML_CLOCK_SM)
    assert pynvml.nvmlDeviceGetClockInfo(handle(0), pynvml.NVML_CLOCK_SM) == max_sm
    idle_max = pynvml.nvmlDeviceGetMaxClockInfo(handle(4), pynvml.NVML_CLOCK_SM)
    assert pynvml.nvmlDeviceGetClockInfo(handle(4), pynvml.NVML_CLOCK_SM) < idle_max
