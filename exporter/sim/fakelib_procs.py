"""Fake NVML: running-process lists and per-process utilization samples.

Lists use NVML's size-probe idiom: a call with a NULL array returns SUCCESS when nothing
runs, else INSUFFICIENT_SIZE with the count; the second call fills the caller's array.
The compute list holds every process on the device including the MPS server; the MPS list
holds MPS clients only (so a client appears in both, like nvidia-smi's "M+C"); the graphics
list is always empty. On a MIG parent handle the lists aggregate all instances. GI/CI ids
are 0xFFFFFFFF when MIG is off.

A process whose scenario entry has ``memory_na`` lists usedGpuMemory as NVML_VALUE_NOT_AVAILABLE
(pynvml turns it into None). The _v2 lists have the v3 layout (same struct in pynvml), and
nvmlDeviceGetRunningProcessDetailList fills the detail struct from the same lists.

Utilization samples (non-MIG only): one per live non-server process, stamped with the
simulation clock (``Simulation.clock_us``: virtual time on the epoch /proc and forecasts
use, so "now" of the simulated host); smUtil = min(100, 115 x the process's
sm_active) (same gain as GPU utilization), memUtil = 100 x dram_active. A timestamp at or
after the newest sample gives NOT_FOUND, as NVML does when no newer samples exist.
"""

from __future__ import annotations

import pynvml

from exporter.sim.fakelib_base import (
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, NO_ID, NOT_AVAILABLE, NOT_FOUND, NOT_SUPPORTED, SUCCESS,
    VERSION_MISMATCH, Dev, array_length, out, value,
)
from exporter.sim.state import Proc
from exporter.sim.telemetry import UTILIZATION_GAIN, process_activity


class ProcessCalls:
    """Process calls; every method returns an nvmlReturn_t code."""

    def _procs(self, dev: Dev) -> list[Proc]:
        if dev.is_mig:
            return self.engine.alive(device=(dev.gpu, dev.inst.serial))
        return self.engine.alive(gpu=dev.gpu)

    def _fill_list(self, dev: Dev, procs: list[Proc], count, array) -> int:
        if array is None or count._obj.value < len(procs):
            out(count, len(procs))
            return SUCCESS if not procs else INSUFFICIENT_SIZE
        room = array_length(array)
        if room is not None and room < len(procs):
            out(count, len(procs))
            return INSUFFICIENT_SIZE
        entries = array._obj if hasattr(array, "_obj") else array
        for i, p in enumerate(procs):
            entry = entries[i]
            entry.pid = p.pid
            entry.usedGpuMemory = NOT_AVAILABLE if p.memory_na else int(p.memory_at(self.now))
            mig = dev.epoch.mig_enabled
            entry.gpuInstanceId = p.gi if mig else NO_ID
            entry.computeInstanceId = 0 if mig else NO_ID
        out(count, len(procs))
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, array):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return self._fill_list(dev, self._procs(dev), count, array)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle, count, array):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return self._fill_list(dev, [p for p in self._procs(dev) if p.mps_client], count, array)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle, count, array):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return self._fill_list(dev, [], count, array)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v2 = nvmlDeviceGetMPSComputeRunningProcesses_v3
    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3

    def nvmlDeviceGetRunningProcessDetailList(self, handle, ref):
        """Mode 0 compute, 1 graphics, 2 MPS; a NULL array asks for the count."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        info = ref._obj
        if info.version != pynvml.nvmlProcessDetailList_v1:
            return VERSION_MISMATCH
        mode = info.mode
        if mode not in (0, 1, 2):
            return INVALID_ARGUMENT
        procs = {0: self._procs(dev), 1: [], 2: [p for p in self._procs(dev) if p.mps_client]}[mode]
        if not info.procArray or info.numProcArrayEntries < len(procs):
            info.numProcArrayEntries = len(procs)
            return SUCCESS if not procs else INSUFFICIENT_SIZE
        mig = dev.epoch.mig_enabled
        for i, p in enumerate(procs):
            entry = info.procArray[i]
            entry.pid = p.pid
            entry.usedGpuMemory = NOT_AVAILABLE if p.memory_na else int(p.memory_at(self.now))
            entry.gpuInstanceId = p.gi if mig else NO_ID
            entry.computeInstanceId = 0 if mig else NO_ID
            entry.usedGpuCcProtectedMemory = 0
        info.numProcArrayEntries = len(procs)
        return SUCCESS

    # --- per-process utilization ---------------------------------------------------------

    def _samples(self, handle, since_us) -> list[tuple[int, int, int, int]] | int:
        """[(pid, timestamp µs, smUtil %, memUtil %)] newer than since_us, or an error code."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        stamp = self.sim.clock_us()
        if value(since_us) >= stamp:
            return NOT_FOUND
        samples = []
        for p in self._procs(dev):
            if p.mps_server:
                continue
            sm = min(1.0, UTILIZATION_GAIN * process_activity(p, "sm_active", self.now))
            dram = process_activity(p, "dram_active", self.now)
            samples.append((p.pid, stamp, round(100 * sm), round(100 * min(1.0, dram))))
        return samples or NOT_FOUND

    def nvmlDeviceGetProcessUtilization(self, handle, array, count, since_us):
        samples = self._samples(handle, since_us)
        if isinstance(samples, int):
            return samples
        if array is None or count._obj.value < len(samples):
            out(count, len(samples))
            return INSUFFICIENT_SIZE
        for i, (pid, stamp, sm, mem) in enumerate(samples):
            entry = array[i]
            entry.pid, entry.timeStamp, entry.smUtil, entry.memUtil = pid, stamp, sm, mem
            entry.encUtil = entry.decUtil = 0
        out(count, len(samples))
        return SUCCESS

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle, ref):
        info = ref._obj
        if info.version != pynvml.ProcessesUtilizationInfo_v1:
            return VERSION_MISMATCH
        samples = self._samples(handle, info.lastSeenTimeStamp)
        if isinstance(samples, int):
            return samples
        if not info.procUtilArray or info.processSamplesCount < len(samples):
            info.processSamplesCount = len(samples)
            return INSUFFICIENT_SIZE
        for i, (pid, stamp, sm, mem) in enumerate(samples):
            entry = info.procUtilArray[i]
            entry.pid, entry.timeStamp, entry.smUtil, entry.memUtil = pid, stamp, sm, mem
            entry.encUtil = entry.decUtil = entry.jpgUtil = entry.ofaUtil = 0
        info.processSamplesCount = len(samples)
        return SUCCESS
