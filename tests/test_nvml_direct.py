"""The direct NVML calls (exporter/backend/nvml_direct.py) answer exactly as pynvml's wrappers.

Compared on the simulator's fake driver (the shipped mixed 8-GPU node: MIG, MPS, NVLink) and on
the unit-test fake library (absent symbols, failing calls), through the real pynvml: same
entries, same field values, same exception classes, and the same outcomes at the choke point.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import weakref

import pynvml
import pytest
from backend_fakelib import GPU_IS_LOST, NOT_SUPPORTED, FakeGpu, FakeNvmlLib, FakeProc

from exporter.backend.nvml_caller import NvmlCaller
from exporter.backend.nvml_direct import direct_calls
from exporter.backend.nvml_types import (
    NA,
    DeviceTag,
    GpuLostError,
    NvmlCallError,
    frozen_maker,
)
from exporter.shipped import resolve_scenario
from exporter.sim import Simulation
from exporter.sim.scenario import load_scenario, parse_scenario
from exporter.snapshot import DeviceHealth, GpuInfo, NvLink, ProcessInfo

LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses")
TAG = DeviceTag("NVIDIA H100 80GB HBM3", "GPU-a")


def _entries(procs) -> list[tuple]:
    return [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs]


def _fields(values) -> list[tuple]:
    return [(v.fieldId, v.scopeId, v.nvmlReturn, v.valueType, v.value.ullVal, v.timestamp) for v in values]


def _outcome(fn, *args):
    """The value, or the exception's class and value (pynvml errors compare by class)."""
    try:
        return fn(*args)
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
        return type(exc), getattr(exc, "value", None)


@pytest.fixture
def simulated(install_simulation):
    """sim(scenario) -> an installed Simulation with NVML initialised; closed after the test."""

    def start(scenario, at: float = 0.0):
        sim = Simulation(scenario)
        sim.advance_to(at)
        return install_simulation(sim)

    return start


def _devices():
    """Every GPU handle and every MIG device handle of the simulated node."""
    handles = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(i)
        handles.append(gpu)
        try:
            slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)
        except pynvml.NVMLError:
            continue
        for slot in range(slots):
            try:
                handles.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot))
            except pynvml.NVMLError:
                pass
    return handles


def test_process_lists_match_pynvml_on_the_mixed_node(simulated):
    """Every GPU and MIG device of the mixed node: the same entries, in the same order, as
    pynvml's friendly objects; or the same error."""
    simulated(load_scenario(resolve_scenario("h100-mixed-node")), at=600.0)
    direct = direct_calls(pynvml)
    compared = 0
    for handle in _devices():
        for name in LISTS:
            mine, theirs = _outcome(direct[name], handle), _outcome(getattr(pynvml, name), handle)
            if isinstance(theirs, list):
                assert _entries(mine) == _entries(theirs)
                compared += len(theirs)
            else:
                assert mine == theirs
    assert compared > 80  # the node's processes were really listed


def test_memory_not_available_is_none(simulated):
    """usedGpuMemory N/A (NVML_VALUE_NOT_AVAILABLE) comes back as None, as pynvml gives it."""
    simulated(parse_scenario({"gpus": [{"model": "H100-80GB"}],
                              "processes": [{"pid": 5, "name": "a", "gpu": 0, "memory": "3GiB", "memory_na": True},
                                            {"pid": 6, "name": "b", "gpu": 0, "memory": "1GiB"}]}, "na.yaml"))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    mine = direct_calls(pynvml)["nvmlDeviceGetComputeRunningProcesses"](handle)
    assert _entries(mine) == _entries(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    assert {p.pid: p.usedGpuMemory for p in mine} == {5: None, 6: 2**30}


def test_field_values_match_pynvml(simulated):
    """The health reader's ids (plain and NVLink-scoped pairs, as tuples or lists), asked twice so
    the reused request array is checked too: the same values as pynvml's array."""
    simulated(load_scenario(resolve_scenario("h100-mixed-node")), at=600.0)
    nv = pynvml
    ids = [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_MEMORY_TEMP, nv.NVML_FI_DEV_PERF_POLICY_POWER,
           nv.NVML_FI_DEV_NVLINK_LINK_COUNT, (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
           [nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 17], 999_999]  # the last: an unknown field
    read = direct_calls(pynvml)["nvmlDeviceGetFieldValues"]
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for _ in range(2):
            assert _fields(read(handle, ids)) == _fields(pynvml.nvmlDeviceGetFieldValues(handle, ids))


def _samples(samples) -> list[tuple]:
    return [(s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil) for s in samples]


def test_process_utilization_matches_pynvml(simulated):
    """Every GPU and MIG device of the mixed node, from the start and from a recent time stamp,
    asked twice (the kept array type is reused): the same samples as pynvml's, or the same error
    (NotFound, or pynvml's NVMLError(0) when the probe finds nothing)."""
    simulated(load_scenario(resolve_scenario("h100-mixed-node")), at=600.0)
    read = direct_calls(pynvml)["nvmlDeviceGetProcessUtilization"]
    compared = errors = 0
    for handle in _devices():
        for since in (0, 590 * 1_000_000, 2**63):
            for _ in range(2):
                mine = _outcome(read, handle, since)
                theirs = _outcome(pynvml.nvmlDeviceGetProcessUtilization, handle, since)
                if isinstance(theirs, list):
                    assert _samples(mine) == _samples(theirs)
                    compared += len(theirs)
                else:
                    assert mine == theirs
                    errors += 1
    assert compared > 20 and errors  # samples were really compared, and so were the errors


def test_array_types_are_kept_between_calls(simulated):
    """The ctypes array class a list is read into outlives the call (ctypes' own cache is weak: a
    class made per call is left as cyclic garbage), and the next call of that size reuses it."""
    simulated(load_scenario(resolve_scenario("h100-mixed-node")), at=600.0)
    calls = direct_calls(pynvml)
    read, listed = calls["nvmlDeviceGetProcessUtilization"], calls["nvmlDeviceGetComputeRunningProcesses"]
    samples = [s for s in (_outcome(read, h, 0) for h in _devices()) if isinstance(s, list) and s]
    kept = [weakref.ref(type(s[0]._b_base_)) for s in samples]
    assert kept and listed(pynvml.nvmlDeviceGetHandleByIndex(1)) is not None
    del samples
    gc.collect()
    assert all(ref() is not None for ref in kept)
    again = [s for s in (_outcome(read, h, 0) for h in _devices()) if isinstance(s, list) and s]
    assert {type(s[0]._b_base_) for s in again} <= {ref() for ref in kept}


@pytest.fixture
def lib(monkeypatch):
    """A one-GPU fake library with two processes (one an MPS client) as pynvml.nvmlLib."""
    fake = FakeNvmlLib([FakeGpu(procs=[FakeProc(7, 3 << 30, "train"), FakeProc(9, 1 << 30, "serve", mps=True)])])
    monkeypatch.setattr(pynvml, "nvmlLib", fake)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield fake
    pynvml._nvmlGetFunctionPointer_cache.clear()


@pytest.mark.parametrize("name", LISTS)
@pytest.mark.parametrize("fault", ["absent", NOT_SUPPORTED, GPU_IS_LOST, None])
def test_errors_match_pynvml(lib, name, fault):
    """An absent symbol (NVMLLibraryMismatchError: pynvml's unversioned list functions turn
    FunctionNotFound into it) and failing codes raise what pynvml raises; no fault gives the
    same entries."""
    symbol = name + "_v3"
    if fault == "absent":
        lib.absent.add(symbol)
    elif fault is not None:
        lib.fail[(symbol, None)] = fault
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    mine = _outcome(direct_calls(pynvml)[name], handle)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    theirs = _outcome(getattr(pynvml, name), handle)
    if isinstance(theirs, list):
        assert _entries(mine) == _entries(theirs) and theirs
    else:
        assert mine == theirs


def test_choke_point_outcomes_are_unchanged(lib, caplog):
    """Through NvmlCaller: NA and one warning for an absent symbol, GpuLostError and a counted
    error for a lost GPU, other errors counted: the same with and without the direct calls."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def outcomes(direct: bool):
        caller = NvmlCaller(pynvml)
        if not direct:
            caller._direct = {}
        results = []
        lib.absent.add("nvmlDeviceGetComputeRunningProcesses_v3")
        pynvml._nvmlGetFunctionPointer_cache.clear()
        with caplog.at_level(logging.WARNING):
            results.append(caller.call("nvmlDeviceGetComputeRunningProcesses", handle, gpu=TAG) is NA)
        lib.absent.clear()
        pynvml._nvmlGetFunctionPointer_cache.clear()
        for code, raised in ((GPU_IS_LOST, GpuLostError), (999, NvmlCallError)):
            lib.fail[("nvmlDeviceGetMPSComputeRunningProcesses_v3", None)] = code
            with pytest.raises(raised) as info:
                caller.call("nvmlDeviceGetMPSComputeRunningProcesses", handle, gpu=TAG)
            results.append((type(info.value), info.value.error))
        lib.fail.clear()
        results.append(_entries(caller.call("nvmlDeviceGetMPSComputeRunningProcesses", handle, gpu=TAG)))
        results.append(caller.errors_snapshot())
        results.append(caller.calls_this_poll)
        return results

    direct, wrapped = outcomes(True), outcomes(False)
    assert direct == wrapped
    assert direct[0] is True and direct[3] == [(9, 1 << 30, 0xFFFFFFFF, 0xFFFFFFFF)]
    warnings = [r.getMessage() for r in caplog.records if "nvmlDeviceGetComputeRunningProcesses" in r.getMessage()]
    assert len(warnings) == 2 and "not found in the NVIDIA driver library" in warnings[0]  # one per caller


def test_frozen_maker_builds_the_same_frozen_record():
    """The fast constructor gives what the dataclass's own __init__ gives (equal, same repr and
    hash, frozen); a missing or unknown field still fails as __init__ fails it."""
    values = dict(pid=7, name="train", cmdline="python train.py", gpu_index=1, gi=None, ci=None,  # noqa: C408
                  used_memory_bytes=3 << 30, sm_utilization_ratio=0.5, is_mps_client=True, is_mps_server=False,
                  mps_memory_limit_bytes=1 << 30, mps_active_thread_ratio=0.25, environ={"A": "1"}, start_time=1.5,
                  workload="train", namespace="ns", pod="p", container="c", replica=0)
    make = frozen_maker(ProcessInfo)
    fast, slow = make(**values), ProcessInfo(**values)
    assert fast == slow and repr(fast) == repr(slow) and type(fast) is ProcessInfo
    link = frozen_maker(NvLink)(link=2, active=True, tx_bytes=5, rx_bytes=6, errors={"replay": 1})
    assert link == NvLink(2, True, 5, 6, {"replay": 1}) and repr(link) == repr(NvLink(2, True, 5, 6, {"replay": 1}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.pid = 8
    with pytest.raises(TypeError, match="missing"):
        make(**{k: v for k, v in values.items() if k != "name"})
    with pytest.raises(TypeError, match="unexpected"):
        make(**values, colour="red")
    assert frozen_maker(DeviceHealth)() == DeviceHealth()  # defaults as __init__ gives them
    gpu = frozen_maker(GpuInfo)
    first, second = gpu(index=0, uuid="GPU-a", name="H100", pci_bus_id="0", up=True), GpuInfo(0, "GPU-a", "H100", "0", True)
    assert first == second and repr(first) == repr(second)
    assert first.ecc_errors == {} and first.ecc_errors is not gpu(index=1, uuid="", name="", pci_bus_id="", up=False).ecc_errors
    with pytest.raises(TypeError, match="missing"):
        gpu(index=0)
