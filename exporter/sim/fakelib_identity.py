"""Fake NVML: identity of the board and its firmware, confidential computing, host level.

Brand, architecture, CUDA cores, memory bus width, board id, InfoROM / VBIOS / part numbers
(real formats, not real images' values), GSP firmware (the driver's version), lookups by
serial, CPU affinity, confidential computing (capable on Hopper and newer, off), and the
host-level counts a bare-metal node answers 0 to (S-class units, HICs, excluded GPUs).
Board-level: NOT_SUPPORTED on a MIG device handle (exporter.sim.fakelib_board).
"""

from __future__ import annotations

import os

import pynvml

from exporter.sim.fakelib_base import (
    INVALID_ARGUMENT, KIND_GPU, NOT_FOUND, NOT_SUPPORTED, SUCCESS, UNINITIALIZED, Dev, encode, out,
    out_handle, value, write_string,
)

_ARCH = {"volta": 5, "turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}  # NVML_DEVICE_ARCH_*
_VBIOS_PREFIX = {"volta": 88, "turing": 90, "ampere": 92, "ada": 95, "hopper": 96, "blackwell": 97}


class IdentityCalls:
    """Identity, firmware, confidential-computing and host-level calls (nvmlReturn_t codes)."""

    def _scalar(self, handle, ref, v):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, v(dev))
        return SUCCESS

    def nvmlDeviceGetBrand(self, handle, ref):
        return self._scalar(handle, ref, lambda d: d.model.brand)

    def nvmlDeviceGetArchitecture(self, handle, ref):
        return self._scalar(handle, ref, lambda d: _ARCH[d.model.architecture])

    def nvmlDeviceGetNumGpuCores(self, handle, ref):
        """NOT_SUPPORTED on MIG handles (nvml_facts.md §1.12): use the profile's SM count."""
        return self._scalar(handle, ref, lambda d: d.model.cuda_cores)

    def nvmlDeviceGetMemoryBusWidth(self, handle, ref):
        return self._scalar(handle, ref, lambda d: d.model.memory_bus_width)

    def nvmlDeviceGetBoardId(self, handle, ref):
        return self._scalar(handle, ref, lambda d: int(d.spec.pci_bus_id.split(":")[-2], 16) << 8)

    def nvmlDeviceGetMultiGpuBoard(self, handle, ref):
        return self._scalar(handle, ref, lambda d: 0)

    def nvmlDeviceGetInforomConfigurationChecksum(self, handle, ref):
        return self._scalar(handle, ref, lambda d: 0x1D6B0000 | d.gpu)

    def _text(self, handle, buffer, length, text):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        return write_string(buffer, length, text(dev))

    def nvmlDeviceGetVbiosVersion(self, handle, buffer, length):
        """Format of real VBIOS versions ("96.00.74.00.0D"); the digits are not a real image."""
        return self._text(handle, buffer, length,
                          lambda d: f"{_VBIOS_PREFIX[d.model.architecture]:02d}.00.{d.model.pci_device_id >> 24:02X}.00.01")

    def nvmlDeviceGetBoardPartNumber(self, handle, buffer, length):
        return self._text(handle, buffer, length, lambda d: f"692-2G{d.model.pci_device_id >> 16:04X}-0200-000")

    def nvmlDeviceGetInforomImageVersion(self, handle, buffer, length):
        return self._text(handle, buffer, length, lambda d: f"G{d.model.pci_device_id >> 20:03X}.0200.00.01")

    def nvmlDeviceGetInforomVersion(self, handle, obj, buffer, length):
        versions = {pynvml.NVML_INFOROM_OEM: "2.1", pynvml.NVML_INFOROM_ECC: "7.16"}
        if value(obj) not in versions and value(obj) < pynvml.NVML_INFOROM_COUNT:
            dev = self._gpu_only(handle)
            return dev if not isinstance(dev, Dev) else NOT_SUPPORTED  # Power Management Object: N/A
        if value(obj) not in versions:
            return INVALID_ARGUMENT
        return self._text(handle, buffer, length, lambda d: versions[value(obj)])

    def nvmlDeviceValidateInforom(self, handle):
        dev = self._gpu_only(handle)
        return dev if not isinstance(dev, Dev) else SUCCESS

    def nvmlDeviceGetGspFirmwareVersion(self, handle, buffer):
        """GSP firmware ships with the driver: its version is the driver's (nvidia-smi -q)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.model.architecture == "volta":
            return NOT_SUPPORTED  # no GSP before Turing
        return write_string(buffer, pynvml.NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, self._driver_version)

    def nvmlDeviceGetGspFirmwareMode(self, handle, enabled, default):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        on = 0 if dev.model.architecture == "volta" else 1
        out(enabled, on)
        out(default, on)
        return SUCCESS

    def nvmlDeviceGetHandleBySerial(self, serial, ref):
        if self._uninitialized():
            return UNINITIALIZED
        wanted = (serial.value if hasattr(serial, "value") else serial).decode()
        for gpu in self._visible:
            if f"{1654922000000 + gpu}" == wanted:
                out_handle(ref, encode(KIND_GPU, gpu))
                return SUCCESS
        return NOT_FOUND

    def nvmlDeviceOnSameBoard(self, first, second, ref):
        a, b = self._gpu_only(first), self._gpu_only(second)
        for dev in (a, b):
            if not isinstance(dev, Dev):
                return dev
        out(ref, 1 if a.gpu == b.gpu else 0)
        return SUCCESS

    def nvmlDeviceGetCpuAffinity(self, handle, size, array):
        """Every CPU of this host (one NUMA node assumed)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        words = array._obj if hasattr(array, "_obj") else array
        cpus = os.cpu_count() or 1
        for i in range(value(size)):
            bits = max(0, min(64, cpus - 64 * i))
            words[i] = (1 << bits) - 1
        return SUCCESS

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle, size, array, scope):
        return self.nvmlDeviceGetCpuAffinity(handle, size, array)

    nvmlDeviceGetMemoryAffinity = nvmlDeviceGetCpuAffinityWithinScope

    # --- confidential computing: capable on Hopper and newer, off ---------------------------

    def _cc_capable(self, dev: Dev) -> bool:
        return dev.model.architecture in ("hopper", "blackwell")

    def nvmlDeviceGetConfComputeMemSizeInfo(self, handle, ref):
        """CC off: nothing protected; unprotected is the framebuffer less the driver's reserved part
        (KiB): 83024896 KiB = 81559 - 480 MiB on an H100 on 580.159.04 (bench/real_gpu_smoke.py)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not self._cc_capable(dev):
            return NOT_SUPPORTED
        ref._obj.protectedMemSizeKib = 0
        ref._obj.unprotectedMemSizeKib = dev.model.memory_capacity_bytes // 1024
        return SUCCESS

    def nvmlDeviceGetConfComputeProtectedMemoryUsage(self, handle, ref):
        """nvidia-smi -q on H100: "Conf Compute Protected Memory Usage: Total 0 MiB"."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not self._cc_capable(dev):
            return NOT_SUPPORTED
        ref._obj.total = ref._obj.used = ref._obj.free = 0
        return SUCCESS

    def nvmlSystemGetConfComputeState(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        state = ref._obj
        state.environment = pynvml.NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE
        state.ccFeature = pynvml.NVML_CC_SYSTEM_FEATURE_DISABLED
        state.devToolsMode = pynvml.NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF
        return SUCCESS

    def nvmlSystemGetConfComputeCapabilities(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        capable = all(self._cc_capable(self._gpu_dev(g)) for g in self._visible) and self._visible
        ref._obj.cpuCaps = pynvml.NVML_CC_SYSTEM_CPU_CAPS_NONE
        ref._obj.gpusCaps = (pynvml.NVML_CC_SYSTEM_GPUS_CC_CAPABLE if capable
                             else pynvml.NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE)
        return SUCCESS

    # --- host-level: no S-class units, no HIC, no excluded GPUs ----------------------------

    def _zero_count(self, ref, *_):
        if self._uninitialized():
            return UNINITIALIZED
        out(ref, 0)
        return SUCCESS

    nvmlUnitGetCount = _zero_count
    nvmlSystemGetHicVersion = _zero_count
    nvmlGetExcludedDeviceCount = _zero_count

    def nvmlDeviceQueryDrainState(self, pci_info, ref):
        if self._uninitialized():
            return UNINITIALIZED
        out(ref, pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

