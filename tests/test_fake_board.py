"""Board-level NVML answers of the fake, per model and variant, through the real pynvml.

Expected values come from the sources the catalog cites (pci.ids, nvidia-smi -q output
posted in NVIDIA/nccl#1453, NVIDIA/DCGM#120 and #152, spec sheets) and from the scenario
each test writes, not from the fake's own output.
"""

from __future__ import annotations

import ctypes
import inspect
import re

import pynvml
import pytest

from exporter.catalog import MIB
from exporter.errors import UserError
from exporter.sim import Simulation
from exporter.sim.nvml_symbols import SINCE
from exporter.sim.scenario import parse_scenario

GIB = 2**30


@pytest.fixture
def host():
    """host(scenario dict) -> Simulation installed and nvmlInit-ed (one at a time)."""
    sims = []

    def start(data, at=0.0):
        while sims:
            pynvml.nvmlShutdown()
            sims.pop().close()
        sim = Simulation(parse_scenario(data, "board.yaml"), start_at=at)
        sim.install()
        sim.advance_to(at)
        pynvml.nvmlInit()
        sims.append(sim)
        return sim

    yield start
    while sims:
        pynvml.nvmlShutdown()
        sims.pop().close()


def h(i):
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def first_mig(parent):
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        except pynvml.NVMLError_NotFound:
            continue
    raise AssertionError("no MIG device")


# --- variants: SXM vs PCIe vs NVL ---------------------------------------------------------


@pytest.mark.parametrize("model,variant,name,device_id,limit_w", [
    ("NVIDIA A100-PCIE-40GB", None, "NVIDIA A100-PCIE-40GB", 0x20F110DE, 250),
    ("A100-40GB", None, "NVIDIA A100-SXM4-40GB", 0x20B010DE, 400),
    ("A100-80GB", "PCIe", "NVIDIA A100 80GB PCIe", 0x20B510DE, 300),
    ("H100-80GB", "pcie", "NVIDIA H100 PCIe", 0x233110DE, 350),
    ("H100-NVL", None, "NVIDIA H100 NVL", 0x232110DE, 400),
    ("H200", "NVL", "NVIDIA H200 NVL", 0x233B10DE, 600),
    ("V100", "PCIe", "Tesla V100-PCIE-16GB", 0x1DB410DE, 250),
])
def test_variant_name_pci_id_and_power_limit(host, model, variant, name, device_id, limit_w):
    """pci.ids device ids (pciutils/pciids) and the board's default power limit."""
    gpu = {"model": model}
    if variant:
        gpu["variant"] = variant
    host({"gpus": [gpu]})
    assert pynvml.nvmlDeviceGetName(h(0)) == name
    assert pynvml.nvmlDeviceGetPciInfo(h(0)).pciDeviceId == device_id
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h(0)) == limit_w * 1000
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h(0)) == limit_w * 1000


def test_seed_scenario_a100_pcie_reports_the_pcie_card(host):
    """The shipped seed-001 scenario names an A100-PCIE-40GB: 250 W limit, PCIe device id."""
    from exporter.sim.scenario import load_scenario

    sim = Simulation(load_scenario("examples/scenarios/a100-40gb-two-3g.yaml"))
    sim.install()
    try:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h(0)) == [150000, 250000]
        assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h(0)) == 250000
        assert pynvml.nvmlDeviceGetPciInfo(h(0)).pciDeviceId == 0x20F110DE
        pynvml.nvmlShutdown()
    finally:
        sim.close()


def test_power_limit_key_sets_the_enforced_limit_and_caps_power(host):
    """gpus[].power_limit_watts is the enforced limit; a draw above it is capped there."""
    sim = host({"gpus": [{"model": "H100-80GB", "power_limit_watts": 500, "power_watts": 650}]})
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h(0)) == 500000
    assert pynvml.nvmlDeviceGetPowerManagementLimit(h(0)) == 500000
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h(0)) == 700000
    assert pynvml.nvmlDeviceGetPowerUsage(h(0)) == 500000
    assert sim.engine.models[0].power_limit_watts == 500


def test_power_limit_outside_the_board_range_is_refused():
    """nvidia-smi -pl refuses a limit outside [min, max]; so does the loader (one line)."""
    with pytest.raises(UserError, match=r"gpus\[0\]\.power_limit_watts: 800 W is outside the 200\.\.700 W"):
        parse_scenario({"gpus": [{"model": "H100-80GB", "power_limit_watts": 800}]}, "s.yaml")
    with pytest.raises(UserError, match=r"gpus\[0\]\.variant: unknown variant 'SXM9'"):
        parse_scenario({"gpus": [{"model": "H100-80GB", "variant": "SXM9"}]}, "s.yaml")


def test_h100_pcie_has_114_sms_and_its_clocks(host):
    """H100 PCIe: 114 SMs (NVIDIA H100 MIG launchpad page), boost 1755 MHz."""
    host({"gpus": [{"model": "NVIDIA H100 PCIe"}]})
    assert pynvml.nvmlDeviceGetNumGpuCores(h(0)) == 114 * 128
    assert pynvml.nvmlDeviceGetMaxClockInfo(h(0), pynvml.NVML_CLOCK_SM) == 1755


# --- readings nvidia-smi -q shows for an idle H100 SXM5 (NVIDIA/nccl#1453, DCGM#120) ------


def test_idle_h100_matches_posted_nvidia_smi_q(host):
    """BAR1 131072 MiB with 1 MiB used, P0, fan N/A, persistence on, display off, max clocks."""
    host({"gpus": [{"model": "H100-80GB"}]})
    bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(h(0))
    assert (bar1.bar1Total, bar1.bar1Used, bar1.bar1Free) == (131072 * MIB, MIB, 131071 * MIB)
    assert pynvml.nvmlDeviceGetPerformanceState(h(0)) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(h(0))
    assert pynvml.nvmlDeviceGetPersistenceMode(h(0)) == pynvml.NVML_FEATURE_ENABLED
    assert pynvml.nvmlDeviceGetDisplayMode(h(0)) == pynvml.nvmlDeviceGetDisplayActive(h(0)) == 0
    # Windows only. (pynvml 13.615's wrapper calls the R595 _v2 symbol: FunctionNotFound on
    # a 580 driver, real or simulated; the R580 symbol itself answers NotSupported.)
    driver_model = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetDriverModel")
    current, pending = ctypes.c_uint(), ctypes.c_uint()
    assert driver_model(h(0), ctypes.byref(current), ctypes.byref(pending)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    maxima = [pynvml.nvmlDeviceGetMaxClockInfo(h(0), c) for c in range(4)]
    assert maxima == [1980, 1980, 2619, 1545]
    assert pynvml.nvmlDeviceGetApplicationsClock(h(0), pynvml.NVML_CLOCK_GRAPHICS) == 1980
    assert pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h(0)) == 5
    assert pynvml.nvmlDeviceGetCurrPcieLinkWidth(h(0)) == 16


def test_inference_cards_idle_in_p8_and_busy_in_p0(host):
    """L4/T4 drop to P8 when idle; any process puts the GPU in P0."""
    sim = host({"gpus": [{"model": "L4"}],
                "processes": [{"pid": 9, "name": "srv", "gpu": 0, "start": 10, "memory": "1GiB"}]})
    assert pynvml.nvmlDeviceGetPerformanceState(h(0)) == 8
    sim.advance_to(10)
    assert pynvml.nvmlDeviceGetPerformanceState(h(0)) == 0


def test_bar1_per_mig_device_is_its_share_of_memory_slices(host):
    """A100-40GB 3g.20gb: 4 of 8 memory slices of 65536 MiB, less 1 MiB, before R580 (MIG guide
    table); R580 maps a smaller aperture: 4g.20gb 12211 MiB, 1g.5gb 3052 MiB on 580.126.09."""
    host({"driver_version": "535.104.05",
          "gpus": [{"model": "A100-40GB", "mig": [{"profile": "3g.20gb"}, {"profile": "1g.5gb"}]}]})
    mig = first_mig(h(0))
    assert pynvml.nvmlDeviceGetBAR1MemoryInfo(mig).bar1Total == 32767 * MIB
    assert pynvml.nvmlDeviceGetBAR1MemoryInfo(h(0)).bar1Total == 65536 * MIB
    host({"driver_version": "580.126.09",
          "gpus": [{"model": "A100-40GB", "mig": [{"profile": "4g.20gb"}, {"profile": "1g.5gb", "start": 4}]}]})
    totals = sorted(pynvml.nvmlDeviceGetBAR1MemoryInfo(
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h(0), i)).bar1Total // MIB for i in range(2))
    assert totals == [3052, 12211]


def test_mig_parent_compute_mode_is_default_and_media_engines_not_supported(host):
    """Real drivers show "Default" on a MIG-enabled GPU; encoder/decoder util is NotSupported."""
    host({"gpus": [{"model": "H100-80GB", "mig": [{"profile": "3g.40gb", "mps": True}]},
                   {"model": "H100-80GB"}]})
    assert pynvml.nvmlDeviceGetComputeMode(h(0)) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert pynvml.nvmlDeviceGetComputeMode(first_mig(h(0))) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    for fn in (pynvml.nvmlDeviceGetEncoderUtilization, pynvml.nvmlDeviceGetDecoderUtilization):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn(h(0))
        assert fn(h(1)) == [0, 167000]


def test_pcie_throughput_is_the_scenario_timeline_in_kib(host):
    """pcie_tx/rx_bytes_per_second become nvmlDeviceGetPcieThroughput KB/s (1024 B)."""
    sim = host({"gpus": [{"model": "A30", "pcie_tx_bytes_per_second": [[0, "1MiB"], [10, "3MiB"]],
                          "pcie_rx_bytes_per_second": "512KiB"}]})
    assert pynvml.nvmlDeviceGetPcieThroughput(h(0), pynvml.NVML_PCIE_UTIL_TX_BYTES) == 1024
    assert pynvml.nvmlDeviceGetPcieThroughput(h(0), pynvml.NVML_PCIE_UTIL_RX_BYTES) == 512
    sim.advance_to(5)
    assert pynvml.nvmlDeviceGetPcieThroughput(h(0), pynvml.NVML_PCIE_UTIL_TX_BYTES) == 2048


def test_pcie_byte_counters_are_the_integral_of_the_throughput(host):
    """NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES: bytes since driver load, consistent with the
    throughput the same timelines give nvmlDeviceGetPcieThroughput (ramp 1 -> 3 MiB/s over
    0..10 s: 20 MiB by 10 s, then 3 MiB/s)."""
    sim = host({"gpus": [{"model": "A30", "pcie_tx_bytes_per_second": [[0, "1MiB"], [10, "3MiB"]],
                          "pcie_rx_bytes_per_second": "512KiB"}]})
    ids = [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]

    def counters():
        values = pynvml.nvmlDeviceGetFieldValues(h(0), ids)
        assert [v.nvmlReturn for v in values] == [pynvml.NVML_SUCCESS] * 2
        assert {v.valueType for v in values} == {pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG}
        return [v.value.ullVal for v in values], values[0].timestamp

    assert counters()[0] == [0, 0]
    sim.advance_to(10)
    (tx, rx), stamp10 = counters()
    assert (tx, rx) == (20 * MIB, 5 * MIB)
    sim.advance_to(14)
    (tx14, rx14), stamp14 = counters()
    assert (tx14 - tx) / ((stamp14 - stamp10) / 1e6) == 3 * MIB  # the rate a reader derives
    assert tx14 - tx == 1024 * pynvml.nvmlDeviceGetPcieThroughput(h(0), pynvml.NVML_PCIE_UTIL_TX_BYTES) * 4


def test_perf_policy_fields_hold_the_violation_status_times(host):
    """NVML_FI_DEV_PERF_POLICY_POWER .. _RELIABILITY answer the ns nvmlDeviceGetViolationStatus
    gives for the same policy (power from the scenario, the others 0)."""
    sim = host({"gpus": [{"model": "H100-80GB", "power_violation_seconds": [[0, 0], [10, 0], [20, 10]]}]})
    sim.advance_to(15)
    policies = range(pynvml.NVML_PERF_POLICY_POWER, pynvml.NVML_PERF_POLICY_RELIABILITY + 1)
    fields = pynvml.nvmlDeviceGetFieldValues(h(0), [pynvml.NVML_FI_DEV_PERF_POLICY_POWER + p for p in policies])
    calls = [pynvml.nvmlDeviceGetViolationStatus(h(0), p).violationTime for p in policies]
    assert [f.value.ullVal for f in fields] == calls
    assert calls[0] == 5 * 10**9 and calls[1:] == [0] * 5


def test_process_samples_are_stamped_on_the_simulation_clock(host):
    """Started at --at 600, the simulated host's "now" is the real now: per-process
    utilization samples are not 600 s in the future, and nvitop's "now - 1 s" finds them."""
    import time

    host({"gpus": [{"model": "H100-80GB"}],
          "processes": [{"pid": 7, "name": "job", "gpu": 0, "memory": "1GiB", "sm_active": 0.5}]}, at=600)
    now_us = time.time() * 1e6
    (sample,) = pynvml.nvmlDeviceGetProcessUtilization(h(0), int(now_us - 1e6))
    assert abs(sample.timeStamp - now_us) < 2e6
    assert sample.smUtil == round(100 * min(1.0, 1.15 * 0.5))


# --- NVLink through field values, per board ------------------------------------------------


def _fields(handle, ids):
    return [(v.nvmlReturn, v.value.uiVal) for v in pynvml.nvmlDeviceGetFieldValues(handle, ids)]


@pytest.mark.parametrize("model,links,active", [
    ("H100-80GB", 18, 1), ("A100-40GB", 12, 1), ("NVIDIA A100-PCIE-40GB", 12, 0), ("H100-NVL", 12, 1),
    ("V100", 6, 1),
])
def test_nvlink_link_count_and_state(host, model, links, active):
    """NVML_FI_DEV_NVLINK_LINK_COUNT per board; SXM links up, PCIe bridge links down."""
    host({"gpus": [{"model": model}]})
    assert _fields(h(0), [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]) == [(0, links)]
    assert pynvml.nvmlDeviceGetNvLinkState(h(0), links - 1) == active
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetNvLinkState(h(0), links)
    state = pynvml.nvmlDeviceGetFieldValues(h(0), [(pynvml.NVML_FI_DEV_NVLINK_GET_STATE, links - 1),
                                                   (pynvml.NVML_FI_DEV_NVLINK_GET_STATE, links)])
    assert (state[0].nvmlReturn, state[0].value.uiVal, state[1].nvmlReturn) == (0, active, 3 - 1)


def test_boards_without_nvlink_say_not_supported_per_field(host):
    """T4 / L4 / L40S: the link count field is NotSupported, the call itself succeeds."""
    host({"gpus": [{"model": "T4"}, {"model": "L40S"}]})
    for i in (0, 1):
        assert _fields(h(i), [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[0][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetNvLinkState(h(i), 0)


def test_power_and_energy_fields_agree_with_the_calls(host):
    """POWER_INSTANT / limits / energy fields equal nvmlDeviceGetPowerUsage & co, timestamped
    on the simulation's clock."""
    sim = host({"gpus": [{"model": "A100-80GB", "power_watts": 180}]}, at=100)
    ids = [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_MAX_LIMIT, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
    values = pynvml.nvmlDeviceGetFieldValues(h(0), ids)
    assert values[0].value.uiVal == pynvml.nvmlDeviceGetPowerUsage(h(0)) == 180000
    assert values[1].value.uiVal == 400000
    assert values[2].value.ullVal == pynvml.nvmlDeviceGetTotalEnergyConsumption(h(0)) == 180 * 100 * 1000
    assert values[0].timestamp == sim.clock_us()


# --- what exists: the symbols of the simulated driver branch --------------------------------


def test_every_symbol_of_the_driver_branch_is_exported_and_newer_ones_are_not(host):
    """Driver 580 exports every symbol pynvml 13.580 looks up; later ones are FunctionNotFound,
    and the recorder lists exactly those a client asked for."""
    sim = host({"gpus": [{"model": "H100-80GB"}]})
    for name, branch in SINCE.items():
        present = hasattr(pynvml.nvmlLib, name)
        assert present == (branch <= 580), name
    assert set(sim.missing_symbols) == {n for n, b in SINCE.items() if b > 580}
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):  # R595 API, absent from 580
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetVgpuSchedulerLog_v2")
    # ... but the driver-model _v2 was seen exported by a real 580.159.04 (NOT_SUPPORTED on Linux)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetDriverModel_v2(h(0))


def test_an_older_driver_lacks_the_newer_symbols(host):
    """A scenario on driver 535 has no nvmlDeviceGetProcessesUtilizationInfo (R550 API)."""
    host({"driver_version": "535.216.01", "gpus": [{"model": "H100-80GB"}]})
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(h(0), 0)
    assert pynvml.nvmlSystemGetDriverVersion() == "535.216.01"


def test_changes_are_refused_as_for_a_non_root_caller(host):
    """The fake is read-only: setters answer NoPermission, not FunctionNotFound."""
    sim = host({"gpus": [{"model": "H100-80GB"}]})
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceSetPersistenceMode(h(0), 0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceSetPowerManagementLimit(h(0), 300000)
    assert sim.fallback_symbols["nvmlDeviceSetPersistenceMode"] == 1


def test_unusable_arguments_are_invalid_argument_and_recorded(host):
    """A NULL where NVML wants a buffer: INVALID_ARGUMENT (as NVML's pointer checks), never a
    Python error escaping through pynvml; the recorder counts it."""
    sim = host({"gpus": [{"model": "H100-80GB", "mig": []}]})
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h(0), 19, 0, 0)
    assert sim.invalid_calls["nvmlDeviceGetGpuInstancePossiblePlacements_v2"] == 1


def _one_handle_getters():
    for name in sorted(dir(pynvml)):
        fn = getattr(pynvml, name)
        if not (name.startswith("nvmlDeviceGet") and callable(fn)):
            continue
        params = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
        if len(params) == 1 and re.search(r"handle|device", params[0].name, re.I):
            yield name


@pytest.mark.parametrize("model", ["H100-80GB", "A100-40GB", "T4"])
def test_every_one_handle_getter_answers_without_crashing(host, model):
    """Every pynvml getter that takes only a handle, on a GPU and on a MIG device: a value or
    an NVMLError the C function returned; never FunctionNotFound for a 580 symbol, never a
    TypeError or ctypes error from a wrongly shaped answer."""
    gpu = {"model": model}
    if model != "T4":
        gpu["mig"] = [{"profile": "3g.40gb" if model.startswith("H100") else "3g.20gb"}]
    sim = host({"gpus": [gpu, {"model": model}]})
    handles = [h(0), h(1)] + ([first_mig(h(0))] if model != "T4" else [])
    asked = 0
    for name in _one_handle_getters():
        for handle in handles:
            before = set(sim.missing_symbols)
            try:
                getattr(pynvml, name)(handle)
            except pynvml.NVMLError_FunctionNotFound:
                # Only a wrapper reaching for a symbol newer than R580 may get it.
                looked_up = set(sim.missing_symbols) - before or set(sim.missing_symbols)
                assert all(SINCE.get(s, 0) > 580 for s in looked_up), (name, looked_up)
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
                pass
            asked += 1
    assert asked > 150
