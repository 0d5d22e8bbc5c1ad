"""Fake NVML: how the board is set up and what it reports, per catalog model and variant.

BAR1 (whole GPU and per MIG device), P-states, PCIe link and throughput, persistence and
display modes, the Windows-only driver model, fans, power management limits. (Identity,
firmware, confidential computing and host-level calls: exporter.sim.fakelib_identity.)

Board-level readings answer on the physical GPU handle only; on a MIG device handle they
are NOT_SUPPORTED like power and clocks (nvml_facts.md §9 item 1), except BAR1, which NVML
reports per MIG device (nvidia-smi's MIG table has a BAR1-Usage column per instance).
Values and their sources: exporter/catalog_variants.py and docs/scenarios.md.
"""

from __future__ import annotations

import pynvml

from exporter.catalog import MIB
from exporter.sim.fakelib_base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, VERSION_MISMATCH, Dev, out, value

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
        """Bytes. A MIG device gets its memory slices' share of the BAR1 aperture of the driver
        branch, less 1 MiB, as nvidia-smi shows (A100-40GB 4g.20gb: 32767 MiB before R580,
        12211 MiB on 580.126.09; exporter.catalog.GpuModel.mig_bar1_total_mib)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        model = dev.model
        if dev.is_mig:
            total = model.mig_bar1_total_mib(dev.inst.profile) * MIB
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

    def nvmlDeviceGetNumFans(self, handle, ref):
        """How many fans: 0 on a passively cooled board, answered (an H100 SXM on 580.159.04 says
        0; its fan speed calls are NOT_SUPPORTED, nvidia-smi "Fan Speed: N/A")."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, _fans(dev))
        return SUCCESS

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
        """Cumulative replays: the scenario's pcie_replays (0 unset)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, self.telemetry.counter(dev.gpu, self.now, "pcie_replays"))
        return SUCCESS

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
