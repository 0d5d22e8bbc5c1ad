"""A small fake libnvidia-ml for backend unit tests (whole GPUs only, no MIG).

It sits where ctypes.CDLL would: ``pynvml.nvmlLib``. The real pynvml code calls its
methods with ctypes arguments, so return shapes and exception classes come from pynvml.
A symbol that is not defined here is FunctionNotFound, exactly like an old driver.
The full simulator (exporter.sim) covers MIG, MPS and scenarios; this one exists so the
choke point and unit conversions are tested with values chosen in the test itself.
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from dataclasses import dataclass, field

import pynvml

SUCCESS, NOT_SUPPORTED, NOT_FOUND, INSUFFICIENT_SIZE, TIMEOUT, GPU_IS_LOST = 0, 3, 6, 7, 10, 15
HANDLE_BASE = 0x1000


def handle_value(h) -> int:
    return ctypes.cast(h, ctypes.c_void_p).value


def set_pointer(ref, value: int) -> None:
    ctypes.c_void_p.from_address(ctypes.addressof(ref._obj)).value = value


@dataclass
class FakeProc:
    pid: int
    used: int  # bytes
    name: str  # what nvmlSystemGetProcessName answers; "" -> NOT_FOUND (process vanished)
    mps: bool = False  # also listed by nvmlDeviceGetMPSComputeRunningProcesses


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: bytes = b"00000000:01:00.0"
    total: int = 80 * 2**30
    reserved: int = 512 * 2**20
    used: int = 10 * 2**30
    util_gpu: int = 50
    util_mem: int = 20
    power_mw: int = 350_000
    limit_mw: int = 700_000
    energy_mj: int = 12_345_678
    temp_c: int = 61
    clocks_mhz: tuple = (1980, 1980, 2619, 1545)  # graphics, sm, mem, video
    reasons_supported: int = 0x1FF
    reasons_current: int = 0x4 | 0x1  # sw_power_cap + gpu_idle
    ecc: tuple = (3, 1)  # corrected, uncorrected (volatile)
    compute_mode: int = 0
    procs: list = field(default_factory=list)
    xids: list = field(default_factory=list)  # queued XID codes


class FakeNvmlLib:
    """Fake C library with per-symbol faults: ``fail[(symbol, gpu_index|None)] = code``."""

    def __init__(self, gpus: list[FakeGpu]):
        self.gpus = gpus
        self.fail: dict[tuple[str, int | None], int] = {}
        self.block: dict[int, threading.Event] = {}  # gpu index -> event nvmlDeviceGetPowerUsage waits on
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._event_sets: dict[int, int] = {}  # event set pointer -> gpu index
        self._next_set = 0x9000
        self.absent: set[str] = set()  # symbols to hide, as an older driver would

    def __getattribute__(self, name):
        if name.startswith("nvml") and name in object.__getattribute__(self, "absent"):
            raise AttributeError(name)  # pynvml turns this into FunctionNotFound
        return object.__getattribute__(self, name)

    # -- plumbing -----------------------------------------------------------------------

    def _gpu(self, h) -> int:
        return handle_value(h) - HANDLE_BASE

    def _enter(self, symbol: str, gpu: int | None = None) -> int:
        with self._lock:
            self.calls[symbol] += 1
        if gpu is not None and gpu in self.block and symbol == "nvmlDeviceGetPowerUsage":
            self.block[gpu].wait(10)
        return self.fail.get((symbol, gpu), self.fail.get((symbol, None), SUCCESS))

    # -- init / system ------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags):
        return self._enter("nvmlInitWithFlags")

    def nvmlShutdown(self):
        return self._enter("nvmlShutdown")

    def nvmlDeviceGetCount_v2(self, ref):
        ref._obj.value = len(self.gpus)
        return self._enter("nvmlDeviceGetCount_v2")

    def nvmlSystemGetDriverVersion(self, buf, size):
        buf.value = b"580.95.05"
        return self._enter("nvmlSystemGetDriverVersion")

    def nvmlSystemGetProcessName(self, pid, buf, size):
        rc = self._enter("nvmlSystemGetProcessName")
        for g in self.gpus:
            for p in g.procs:
                if p.pid == pid.value and p.name:
                    buf.value = p.name.encode()
                    return rc
        return NOT_FOUND

    # -- identity -----------------------------------------------------------------------

    def nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        set_pointer(ref, HANDLE_BASE + index.value)
        return self._enter("nvmlDeviceGetHandleByIndex_v2", index.value)

    def nvmlDeviceGetName(self, h, buf, size):
        buf.value = self.gpus[self._gpu(h)].name.encode()
        return self._enter("nvmlDeviceGetName", self._gpu(h))

    def nvmlDeviceGetUUID(self, h, buf, size):
        buf.value = self.gpus[self._gpu(h)].uuid.encode()
        return self._enter("nvmlDeviceGetUUID", self._gpu(h))

    def nvmlDeviceGetPciInfo_v3(self, h, ref):
        ref._obj.busId = self.gpus[self._gpu(h)].bus_id
        return self._enter("nvmlDeviceGetPciInfo_v3", self._gpu(h))

    def nvmlDeviceGetMigMode(self, h, cur, pending):
        self._enter("nvmlDeviceGetMigMode", self._gpu(h))
        return NOT_SUPPORTED  # these fake GPUs are not MIG-capable

    # -- telemetry ----------------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo_v2(self, h, ref):
        g = self.gpus[self._gpu(h)]
        ref._obj.total, ref._obj.reserved, ref._obj.used = g.total, g.reserved, g.used
        ref._obj.free = g.total - g.reserved - g.used
        return self._enter("nvmlDeviceGetMemoryInfo_v2", self._gpu(h))

    def nvmlDeviceGetMemoryInfo(self, h, ref):
        g = self.gpus[self._gpu(h)]
        ref._obj.total, ref._obj.used = g.total, g.used + g.reserved  # v1 used includes reserved
        ref._obj.free = g.total - g.reserved - g.used
        return self._enter("nvmlDeviceGetMemoryInfo", self._gpu(h))

    def nvmlDeviceGetUtilizationRates(self, h, ref):
        g = self.gpus[self._gpu(h)]
        ref._obj.gpu, ref._obj.memory = g.util_gpu, g.util_mem
        return self._enter("nvmlDeviceGetUtilizationRates", self._gpu(h))

    def _uint(self, symbol, h, ref, value):
        ref._obj.value = value
        return self._enter(symbol, self._gpu(h))

    def nvmlDeviceGetPowerUsage(self, h, ref):
        return self._uint("nvmlDeviceGetPowerUsage", h, ref, self.gpus[self._gpu(h)].power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, h, ref):
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", h, ref, self.gpus[self._gpu(h)].limit_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, h, ref):
        return self._uint("nvmlDeviceGetTotalEnergyConsumption", h, ref, self.gpus[self._gpu(h)].energy_mj)

    def nvmlDeviceGetTemperature(self, h, sensor, ref):
        return self._uint("nvmlDeviceGetTemperature", h, ref, self.gpus[self._gpu(h)].temp_c)

    def nvmlDeviceGetClockInfo(self, h, clock_type, ref):
        return self._uint("nvmlDeviceGetClockInfo", h, ref, self.gpus[self._gpu(h)].clocks_mhz[clock_type.value])

    def nvmlDeviceGetSupportedClocksEventReasons(self, h, ref):
        return self._uint("nvmlDeviceGetSupportedClocksEventReasons", h, ref, self.gpus[self._gpu(h)].reasons_supported)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h, ref):
        return self._uint("nvmlDeviceGetCurrentClocksEventReasons", h, ref, self.gpus[self._gpu(h)].reasons_current)

    def nvmlDeviceGetTotalEccErrors(self, h, err_type, counter_type, ref):
        return self._uint("nvmlDeviceGetTotalEccErrors", h, ref, self.gpus[self._gpu(h)].ecc[err_type.value])

    def nvmlDeviceGetComputeMode(self, h, ref):
        return self._uint("nvmlDeviceGetComputeMode", h, ref, self.gpus[self._gpu(h)].compute_mode)

    # -- processes ----------------------------------------------------------------------

    def _proc_list(self, symbol, h, count_ref, array, procs):
        rc = self._enter(symbol, self._gpu(h))
        if rc:
            return rc
        if array is None:
            count_ref._obj.value = len(procs)
            return INSUFFICIENT_SIZE if procs else SUCCESS
        for i, p in enumerate(procs):
            array[i].pid, array[i].usedGpuMemory = p.pid, p.used
            array[i].gpuInstanceId = array[i].computeInstanceId = 0xFFFFFFFF
        count_ref._obj.value = len(procs)
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h, count_ref, array):
        procs = self.gpus[self._gpu(h)].procs
        return self._proc_list("nvmlDeviceGetComputeRunningProcesses_v3", h, count_ref, array, procs)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, h, count_ref, array):
        procs = [p for p in self.gpus[self._gpu(h)].procs if p.mps]
        return self._proc_list("nvmlDeviceGetMPSComputeRunningProcesses_v3", h, count_ref, array, procs)

    def nvmlDeviceGetProcessUtilization(self, h, samples, count_ref, ts):
        return self._enter("nvmlDeviceGetProcessUtilization", self._gpu(h)) or NOT_FOUND

    # -- events -------------------------------------------------------------------------

    def nvmlEventSetCreate(self, ref):
        self._next_set += 1
        set_pointer(ref, self._next_set)
        return self._enter("nvmlEventSetCreate")

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self._event_sets[handle_value(event_set)] = self._gpu(h)
        return self._enter("nvmlDeviceRegisterEvents", self._gpu(h))

    def nvmlEventSetWait_v2(self, event_set, data_ref, timeout):
        gpu = self._event_sets[handle_value(event_set)]
        rc = self._enter("nvmlEventSetWait_v2", gpu)
        if rc:
            return rc
        if not self.gpus[gpu].xids:
            return TIMEOUT
        data_ref._obj.eventType = pynvml.nvmlEventTypeXidCriticalError
        data_ref._obj.eventData = self.gpus[gpu].xids.pop(0)
        return SUCCESS

    def nvmlEventSetFree(self, event_set):
        self._event_sets.pop(handle_value(event_set), None)
        return self._enter("nvmlEventSetFree")
