"""Fake NVML: what the board is and how it is set up, per catalog model and variant.

BAR1 (whole GPU and per MIG device), P-states, PCIe link and throughput, persistence and
display modes, the Windows-only driver model, fans, power management limits, brand,
architecture, board and firmware identity, confidential computing, CPU affinity.

Board-level readings answer on the physical GPU handle only; on a MIG device handle they
are NOT_SUPPORTED like power and clocks (nvml_facts.md §9 item 1), except BAR1, which NVML
reports per MIG device (nvidia-smi's MIG table has a BAR1-Usage column per instance).
Values and their sources: exporter/catalog_variants.py and docs/scenarios.md.
"""

from __future__ import annotations

import os

import pynvml

from exporter.catalog import MIB
from exporter.sim.fakelib_base import (
    INVALID_ARGUMENT, KIND_GPU, NOT_FOUND, NOT_SUPPORTED, SUCCESS, UNINITIALIZED, VERSION_MISMATCH,
    Dev, encode, out, out_handle, value, write_string,
)

_ARCH = {"volta": 5, "turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}  # NVML_DEVICE_ARCH_*
_VBIOS_PREFIX = {"volta": 88, "turing": 90, "ampere": 92, "ada": 95, "hopper": 96, "blackwell": 97}
_LINK_SPEED = {3: pynvml.NVML_PCIE_LINK_MAX_SPEED_8000MBPS, 4: pynvml.NVML_PCIE_LINK_MAX_SPEED_16000MBPS,
               5: pynvml.NVML_PCIE_LINK_MAX_SPEED_32000MBPS}
_LANE_MBPS = {3: 8000, 4: 16000, 5: 32000}  # nvmlDeviceGetPcieSpeed: MB/s per lane of that generation
BAR1_IDLE = 1 * MIB  # what an idle GPU maps (NVIDIA/nccl#1453: "Used 1 MiB")
BAR1_PER_PROCESS = 2 * MIB  # a CUDA context's mappings (inferred)
SAMPLING_PERIOD_US = 167000  # encoder/decoder utilization sampling period (1/6 s)


def _fans(dev: Dev) -> int:
    return dev.model.fans


class BoardCalls:
    """Board calls; every method returns an nvmlReturn_t code."""

    # --- BAR1, P-states --------------------------------------------------------------------

    def nvmlDeviceGetBAR1MemoryInfo(self, handle, ref):
        """Bytes. A MIG device gets the share of its memory slices, less 1 MiB, as nvidia-smi
        shows (A100-40GB 3g.20gb: 32767 MiB of 65536)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        model = dev.model
        if dev.is_mig:
            total = model.bar1_mib * MIB * dev.inst.profile.memory_slices // model.memory_slices - MIB
            used = BAR1_PER_PROCESS * len(self.engine.alive(device=(dev.gpu, dev.inst.serial)))
        else:
            total = model.bar1_mib * MIB
            used = BAR1_IDLE + BAR1_PER_PROCESS * len(self.engine.alive(gpu=dev.gpu))
        bar1 = ref._obj
        bar1.bar1Total, bar1.bar1Used, bar1.bar1Free = total, min(used, total), max(0, total - used)
        return SUCCESS

    def nvmlDeviceGetPerformanceState(self, handle, ref):
        """P0 while any process runs, else the board's idle P-state (P0 on A100/H100 class)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, 0 if self.telemetry.busy(dev.gpu, self.now) else dev.model.idle_pstate)
        return SUCCESS

    nvmlDeviceGetPowerState = nvmlDeviceGetPerformanceState

    def nvmlDeviceGetSupportedPerformanceStates(self, handle, array, size):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        states = sorted({0, dev.model.idle_pstate})
        entries = array._obj if hasattr(array, "_obj") else array
        if len(entries) < len(states):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for i in range(len(entries)):
            entries[i] = states[i] if i < len(states) else pynvml.NVML_PSTATE_UNKNOWN
        return SUCCESS

    # --- modes -----------------------------------------------------------------------------

    def nvmlDeviceGetPersistenceMode(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_FEATURE_ENABLED if dev.spec.persistence_mode else pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    def _disabled(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    # Data-center boards: no display engine in use (nvidia-smi "Display Mode/Active: Disabled").
    nvmlDeviceGetDisplayMode = _disabled
    nvmlDeviceGetDisplayActive = _disabled

    def nvmlDeviceGetDriverModel(self, handle, current, pending):
        """Windows only (WDDM/TCC): NOT_SUPPORTED on Linux, nvidia-smi "Driver Model: N/A"."""
        dev = self._dev(handle)
        return dev if not isinstance(dev, Dev) else NOT_SUPPORTED

    nvmlDeviceGetDriverModel_v2 = nvmlDeviceGetDriverModel

    def nvmlDeviceGetVirtualizationMode(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE)  # bare metal
        return SUCCESS

    # --- fans: every catalog board is passively cooled -------------------------------------

    def _no_fan(self, handle, *_):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        return NOT_SUPPORTED if _fans(dev) == 0 else INVALID_ARGUMENT

    nvmlDeviceGetFanSpeed = _no_fan
    nvmlDeviceGetFanSpeed_v2 = _no_fan
    nvmlDeviceGetTargetFanSpeed = _no_fan
    nvmlDeviceGetFanSpeedRPM = _no_fan
    nvmlDeviceGetMinMaxFanSpeed = _no_fan
    nvmlDeviceGetFanControlPolicy_v2 = _no_fan
    nvmlDeviceGetNumFans = _no_fan
    nvmlDeviceGetCoolerInfo = _no_fan

    # --- PCIe ------------------------------------------------------------------------------

    def nvmlDeviceGetPcieThroughput(self, handle, counter, ref):
        """KB/s (1024 bytes) over the last 20 ms, from the scenario's pcie_*_bytes_per_second."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        which = value(counter)
        if which not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            return INVALID_ARGUMENT
        out(ref, round(self.telemetry.pcie_bytes_per_second(dev.gpu, self.now)[which] / 1024))
        return SUCCESS

    def _pcie(self, handle, ref, field: str):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        model = dev.model
        out(ref, {"gen": model.pcie_generation, "width": model.pcie_width,
                  "speed": _LINK_SPEED.get(model.pcie_generation, 0),
                  "mbps": _LANE_MBPS.get(model.pcie_generation, 0), "zero": 0,
                  "bus": pynvml.NVML_BUS_TYPE_PCIE}[field])
        return SUCCESS

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle, ref):
        return self._pcie(handle, ref, "gen")

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration
    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle, ref):
        return self._pcie(handle, ref, "width")

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetPcieLinkMaxSpeed(self, handle, ref):
        return self._pcie(handle, ref, "speed")

    def nvmlDeviceGetPcieSpeed(self, handle, ref):
        return self._pcie(handle, ref, "mbps")

    def nvmlDeviceGetPcieReplayCounter(self, handle, ref):
        return self._pcie(handle, ref, "zero")

    def nvmlDeviceGetBusType(self, handle, ref):
        return self._pcie(handle, ref, "bus")

    def nvmlDeviceGetPciInfoExt(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        info = ref._obj if hasattr(ref, "_obj") else ref
        if info.version != pynvml.nvmlPciInfoExt_v1:
            return VERSION_MISMATCH
        plain = pynvml.nvmlPciInfo_t()
        self.nvmlDeviceGetPciInfo_v3(handle, pynvml.byref(plain))
        info.domain, info.bus, info.device = plain.domain, plain.bus, plain.device
        info.pciDeviceId, info.pciSubSystemId = plain.pciDeviceId, plain.pciSubSystemId
        info.baseClass, info.subClass = 0x03, 0x02  # display controller / 3D controller
        info.busId = plain.busId
        return SUCCESS

    # --- power management ------------------------------------------------------------------

    def nvmlDeviceGetPowerManagementMode(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle, ref):
        """mW: the board's default limit (whatever limit the scenario enforces)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        board = next(v for v in dev.model.variants if v.key == dev.model.variant)
        out(ref, round(1000 * board.power_limit_watts))
        return SUCCESS

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle, low, high):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(low, round(1000 * dev.model.min_power_limit_watts))
        out(high, round(1000 * dev.model.max_power_limit_watts))
        return SUCCESS

    # --- identity of the board and its firmware --------------------------------------------

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
        """CC off: nothing protected, the whole framebuffer unprotected (KiB)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not self._cc_capable(dev):
            return NOT_SUPPORTED
        ref._obj.protectedMemSizeKib = 0
        ref._obj.unprotectedMemSizeKib = dev.model.memory_total_mib * 1024
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

