"""Read-only NVML probes for bench/real_gpu_smoke.py: the same questions to a real GPU and the fake.

Only Get/Query calls: nothing here changes a GPU setting (a test asserts that every probe
calls a Get/Query function). Each probe answers an *outcome*:
``("ok", value)`` or ``("error", "NotSupported")`` (pynvml error class suffix). Static
probes (identity, sizes, tables) are compared by value; dynamic ones (power, clocks,
utilization...) only by whether they answered or which error they raised.
"""

from __future__ import annotations

# (label, pynvml function, argument builder (nv, handle) -> args, static?)
GPU_PROBES = (
    ("name", "nvmlDeviceGetName", lambda nv, h: (h,), True),
    ("memory total (v2)", "nvmlDeviceGetMemoryInfo", lambda nv, h: (h, nv.nvmlMemory_v2), True),
    ("MIG mode", "nvmlDeviceGetMigMode", lambda nv, h: (h,), True),
    ("max MIG devices", "nvmlDeviceGetMaxMigDeviceCount", lambda nv, h: (h,), True),
    ("GPM support", "nvmlGpmQueryDeviceSupport", lambda nv, h: (h,), True),
    ("supported clock-event reasons", "nvmlDeviceGetSupportedClocksEventReasons", lambda nv, h: (h,), True),
    ("SM count (attributes)", "nvmlDeviceGetAttributes", lambda nv, h: (h,), True),
    ("GPU cores", "nvmlDeviceGetNumGpuCores", lambda nv, h: (h,), True),
    ("power usage", "nvmlDeviceGetPowerUsage", lambda nv, h: (h,), False),
    ("enforced power limit", "nvmlDeviceGetEnforcedPowerLimit", lambda nv, h: (h,), False),
    ("energy", "nvmlDeviceGetTotalEnergyConsumption", lambda nv, h: (h,), False),
    ("temperature", "nvmlDeviceGetTemperature", lambda nv, h: (h, nv.NVML_TEMPERATURE_GPU), False),
    ("clock graphics", "nvmlDeviceGetClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_GRAPHICS), False),
    ("clock sm", "nvmlDeviceGetClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_SM), False),
    ("clock memory", "nvmlDeviceGetClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_MEM), False),
    ("clock video", "nvmlDeviceGetClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_VIDEO), False),
    ("current clock-event reasons", "nvmlDeviceGetCurrentClocksEventReasons", lambda nv, h: (h,), False),
    ("ECC corrected (volatile)", "nvmlDeviceGetTotalEccErrors",
     lambda nv, h: (h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC), False),
    ("ECC uncorrected (volatile)", "nvmlDeviceGetTotalEccErrors",
     lambda nv, h: (h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC), False),
    ("utilization", "nvmlDeviceGetUtilizationRates", lambda nv, h: (h,), False),
    ("compute mode", "nvmlDeviceGetComputeMode", lambda nv, h: (h,), False),
    ("process utilization", "nvmlDeviceGetProcessUtilization", lambda nv, h: (h, 0), False),
    ("compute processes", "nvmlDeviceGetComputeRunningProcesses", lambda nv, h: (h,), False),
    ("encoder utilization", "nvmlDeviceGetEncoderUtilization", lambda nv, h: (h,), False),
    ("fan speed", "nvmlDeviceGetFanSpeed", lambda nv, h: (h,), False),
    ("PCIe TX throughput", "nvmlDeviceGetPcieThroughput", lambda nv, h: (h, nv.NVML_PCIE_UTIL_TX_BYTES), False),
    ("PCIe RX throughput", "nvmlDeviceGetPcieThroughput", lambda nv, h: (h, nv.NVML_PCIE_UTIL_RX_BYTES), False),
    # Board identity and configuration (issue 12's list): compared by value.
    ("PCI device id", "nvmlDeviceGetPciInfo", lambda nv, h: (h,), True),
    ("BAR1 total", "nvmlDeviceGetBAR1MemoryInfo", lambda nv, h: (h,), True),
    ("brand", "nvmlDeviceGetBrand", lambda nv, h: (h,), True),
    ("architecture", "nvmlDeviceGetArchitecture", lambda nv, h: (h,), True),
    ("memory bus width", "nvmlDeviceGetMemoryBusWidth", lambda nv, h: (h,), True),
    ("power limit constraints", "nvmlDeviceGetPowerManagementLimitConstraints", lambda nv, h: (h,), True),
    ("default power limit", "nvmlDeviceGetPowerManagementDefaultLimit", lambda nv, h: (h,), True),
    ("max clock graphics", "nvmlDeviceGetMaxClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_GRAPHICS), True),
    ("max clock sm", "nvmlDeviceGetMaxClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_SM), True),
    ("max clock memory", "nvmlDeviceGetMaxClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_MEM), True),
    ("max clock video", "nvmlDeviceGetMaxClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_VIDEO), True),
    ("default application clock", "nvmlDeviceGetDefaultApplicationsClock", lambda nv, h: (h, nv.NVML_CLOCK_GRAPHICS), True),
    ("max PCIe link generation", "nvmlDeviceGetMaxPcieLinkGeneration", lambda nv, h: (h,), True),
    ("max PCIe link width", "nvmlDeviceGetMaxPcieLinkWidth", lambda nv, h: (h,), True),
    ("display mode", "nvmlDeviceGetDisplayMode", lambda nv, h: (h,), True),
    ("display active", "nvmlDeviceGetDisplayActive", lambda nv, h: (h,), True),
    ("driver model", "nvmlDeviceGetDriverModel", lambda nv, h: (h,), True),
    ("fan count", "nvmlDeviceGetNumFans", lambda nv, h: (h,), True),
    ("shutdown temperature", "nvmlDeviceGetTemperatureThreshold",
     lambda nv, h: (h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN), True),
    ("slowdown temperature", "nvmlDeviceGetTemperatureThreshold",
     lambda nv, h: (h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN), True),
    ("conf compute memory sizes", "nvmlDeviceGetConfComputeMemSizeInfo", lambda nv, h: (h,), True),
    ("virtualization mode", "nvmlDeviceGetVirtualizationMode", lambda nv, h: (h,), True),
    ("ECC mode", "nvmlDeviceGetEccMode", lambda nv, h: (h,), True),
    ("NVLink fields (link count, version of link 0)", "nvmlDeviceGetFieldValues",
     lambda nv, h: (h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT, (nv.NVML_FI_DEV_NVLINK_GET_VERSION, 0)]), True),
    # Readings that depend on what runs: compared by outcome (answers / which error).
    ("performance state", "nvmlDeviceGetPerformanceState", lambda nv, h: (h,), False),
    ("persistence mode", "nvmlDeviceGetPersistenceMode", lambda nv, h: (h,), False),
    ("decoder utilization", "nvmlDeviceGetDecoderUtilization", lambda nv, h: (h,), False),
    ("NVLink 0 state", "nvmlDeviceGetNvLinkState", lambda nv, h: (h, 0), False),
    ("power fields (instant, max limit)", "nvmlDeviceGetFieldValues",
     lambda nv, h: (h, [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_MAX_LIMIT]), False),
    ("remapped rows", "nvmlDeviceGetRemappedRows", lambda nv, h: (h,), False),
    # What the health reader asks in its one field-values call instead of nvmlDeviceGetPcieThroughput
    # (20 ms sample per call) and nvmlDeviceGetViolationStatus: does this board and driver answer them?
    ("PCIe byte counters and violation-time fields", "nvmlDeviceGetFieldValues",
     lambda nv, h: (h, [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
                        *range(nv.NVML_FI_DEV_PERF_POLICY_POWER, nv.NVML_FI_DEV_PERF_POLICY_RELIABILITY + 1)]), False),
    ("retired pages pending", "nvmlDeviceGetRetiredPagesPendingStatus", lambda nv, h: (h,), False),
    ("accounting mode", "nvmlDeviceGetAccountingMode", lambda nv, h: (h,), False),
    ("application clock graphics", "nvmlDeviceGetApplicationsClock", lambda nv, h: (h, nv.NVML_CLOCK_GRAPHICS), False),
    ("running process details", "nvmlDeviceGetRunningProcessDetailList",
     lambda nv, h: (h, nv.nvmlProcessDetailList_v1, 0), False),
)
# Asked on a MIG device handle (the first one), when MIG is on.
MIG_PROBES = (
    ("MIG: memory total", "nvmlDeviceGetMemoryInfo", lambda nv, h: (h, nv.nvmlMemory_v2), True),
    ("MIG: SM count (attributes)", "nvmlDeviceGetAttributes", lambda nv, h: (h,), True),
    ("MIG: power usage", "nvmlDeviceGetPowerUsage", lambda nv, h: (h,), False),
    ("MIG: temperature", "nvmlDeviceGetTemperature", lambda nv, h: (h, nv.NVML_TEMPERATURE_GPU), False),
    ("MIG: clock sm", "nvmlDeviceGetClockInfo", lambda nv, h: (h, nv.NVML_CLOCK_SM), False),
    ("MIG: utilization", "nvmlDeviceGetUtilizationRates", lambda nv, h: (h,), False),
    ("MIG: compute processes", "nvmlDeviceGetComputeRunningProcesses", lambda nv, h: (h,), False),
    ("MIG: name", "nvmlDeviceGetName", lambda nv, h: (h,), True),
    ("MIG: BAR1 total", "nvmlDeviceGetBAR1MemoryInfo", lambda nv, h: (h,), True),
    ("MIG: compute mode", "nvmlDeviceGetComputeMode", lambda nv, h: (h,), False),
    ("MIG: encoder utilization", "nvmlDeviceGetEncoderUtilization", lambda nv, h: (h,), False),
    ("MIG: performance state", "nvmlDeviceGetPerformanceState", lambda nv, h: (h,), False),
    ("MIG: NVLink fields", "nvmlDeviceGetFieldValues", lambda nv, h: (h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT]), False),
)


def _error_name(nv, exc) -> str:
    if isinstance(exc, nv.NVMLLibraryMismatchError):
        return "LibraryMismatch"
    return type(exc).__name__.removeprefix("NVMLError_")


def nv_ull() -> int:
    """NVML_VALUE_TYPE_UNSIGNED_LONG_LONG (pynvml imported late: this module serves the fake too)."""
    import pynvml
    return pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG


def _summary(label: str, value):
    """The part of an answer worth comparing/printing."""
    if label.startswith("PCIe byte counters"):  # the value type says how soon a counter wraps
        return [(int(v.nvmlReturn), int(v.valueType), int(v.value.ullVal) if v.valueType == nv_ull() else
                 int(v.value.uiVal)) if v.nvmlReturn == 0 else (int(v.nvmlReturn), None, None) for v in value]
    if "fields" in label:
        return [(int(v.nvmlReturn), int(v.value.uiVal) if v.nvmlReturn == 0 else None) for v in value]
    if label == "PCI device id":
        return f"0x{value.pciDeviceId:08X}"
    if "BAR1 total" in label:
        return int(value.bar1Total)
    if label == "conf compute memory sizes":
        return f"protected {value.protectedMemSizeKib} KiB unprotected {value.unprotectedMemSizeKib} KiB"
    if label.endswith("memory total (v2)") or label.endswith("memory total"):
        return f"total {value.total} reserved {getattr(value, 'reserved', '?')}"
    if "attributes" in label:
        return f"SMs {value.multiprocessorCount} memory {value.memorySizeMB} MB"
    if label == "GPM support":
        return f"isSupportedDevice {value.isSupportedDevice}"
    if label in ("MIG mode",):
        return f"current {value[0]} pending {value[1]}"
    if "processes" in label or label == "process utilization":
        return f"{len(value)} entries"
    if hasattr(value, "gpu") and hasattr(value, "memory"):
        return "gpu/memory %"
    return value


def ask(nv, probes, handle) -> dict:
    """label -> ("ok", summary) | ("error", name) for each probe on ``handle``."""
    out = {}
    for label, fn, build, _ in probes:
        try:
            out[label] = ("ok", _summary(label, getattr(nv, fn)(*build(nv, handle))))
        except (nv.NVMLError, nv.NVMLLibraryMismatchError) as exc:
            out[label] = ("error", _error_name(nv, exc))
    return out


def profiles(nv, handle) -> dict:
    """Profile enum index -> (id, name, SMs, memory MB, slices), asked as the exporter asks (pynvml's
    default, the v2 struct); and the outcome of the v1 call for enum 0."""
    table, v1 = {}, None
    for enum in range(64):
        try:
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except nv.NVMLError_InvalidArgument:
            break
        except (nv.NVMLError, nv.NVMLLibraryMismatchError) as exc:
            table[enum] = ("error", _error_name(nv, exc))
            continue
        name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
        table[enum] = ("ok", (int(info.id), name, int(info.multiprocessorCount), int(info.memorySizeMB),
                              int(info.sliceCount)))
    try:
        nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0, version=1)
        v1 = ("ok", "answers")
    except (nv.NVMLError, nv.NVMLLibraryMismatchError) as exc:
        v1 = ("error", _error_name(nv, exc))
    except TypeError:  # an nvidia-ml-py without the version argument
        v1 = ("error", "no version argument in this nvidia-ml-py")
    return {"table": table, "v1 call": v1}


def mig_layout(nv, handle) -> list[dict]:
    """The GPU's MIG instances as scenario entries ({profile, start}), one per GPU instance."""
    names = {}
    for outcome in profiles(nv, handle)["table"].values():
        if outcome[0] == "ok":
            names[outcome[1][0]] = outcome[1][1].removeprefix("MIG ").strip()
    layout, seen = [], set()
    for index in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            gi = nv.nvmlDeviceGetGpuInstanceId(mig)
            if gi in seen:
                continue
            seen.add(gi)
            info = nv.nvmlGpuInstanceGetInfo(nv.nvmlDeviceGetGpuInstanceById(handle, gi))
        except nv.NVMLError:
            continue
        layout.append({"profile": names.get(int(info.profileId), str(info.profileId)),
                       "start": int(info.placement.start)})
    return layout


def first_mig_handle(nv, handle):
    for index in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            return nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except nv.NVMLError:
            continue
    return None
