"""Fake NVML: nvmlDeviceGetFieldValues and the NVLink calls, per catalog board.

Each requested field gets its own ``nvmlReturn``: a value (with its value type and the
simulation clock as timestamp), NOT_SUPPORTED where the board has no such thing (NVLink
fields on a T4, retired pages on Ampere and newer), INVALID_ARGUMENT for an NVLink field
whose scope (link index) the board does not have or an id past NVML_FI_MAX. On a MIG device
handle every field is NOT_SUPPORTED (board-level readings come from the parent).

NVLink: the board's link count (catalog ``nvlink_links``), all active on SXM modules and
NVL bridges, present but inactive on PCIe cards (no bridge assumed). Traffic is not
simulated: throughput and error counters read 0.
"""

from __future__ import annotations

import re

import pynvml

from exporter.sim.fakelib_base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, Dev, out, value
from exporter.sim.fakelib_health import has_row_remapper, remapped_rows

UINT, ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
# NVLink per-link data rate (MB/s per direction) by NVML_NVLINK_VERSION_*: NVLink2/3 25 GB/s,
# NVLink4 26.562 GB/s (nvidia-smi nvlink -s on H100) [obs], NVLink5 twice that [inf].
_LINK_MBPS = {3: 25000, 4: 25000, 6: 26562, 7: 53125}
FI = pynvml  # NVML_FI_* constants

_PER_LINK_ZERO = (  # per-link counters that read 0 (scopeId = link index)
    *range(FI.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, FI.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL + 1),
    *range(FI.NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0, FI.NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL + 1),
    *range(FI.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6, FI.NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L11 + 1),
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    FI.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, FI.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
    *range(FI.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0, FI.NVML_FI_DEV_NVLINK_ERROR_DL_CRC + 1),
)
_LINK_SPEED = (*range(FI.NVML_FI_DEV_NVLINK_SPEED_MBPS_L0, FI.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON + 1),
               *range(FI.NVML_FI_DEV_NVLINK_SPEED_MBPS_L6, FI.NVML_FI_DEV_NVLINK_SPEED_MBPS_L11 + 1),
               FI.NVML_FI_DEV_NVLINK_GET_SPEED)
_ZERO_COUNTERS = (*range(FI.NVML_FI_DEV_PERF_POLICY_POWER, FI.NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS + 1),
                  FI.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER,
                  FI.NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER,
                  *range(FI.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, FI.NVML_FI_DEV_PCIE_COUNT_LANE_ERROR + 1),
                  FI.NVML_FI_DEV_RESET_STATUS, FI.NVML_FI_DEV_DRAIN_AND_RESET_STATUS,
                  FI.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
_ECC_LOCATIONS = range(FI.NVML_FI_DEV_ECC_SBE_VOL_L1, FI.NVML_FI_DEV_ECC_DBE_AGG_CBU + 1)
# (uncorrected, volatile) of the totals and of the device-memory counters
_ECC_DRAM = {FI.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (False, True), FI.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (True, True),
             FI.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (False, False), FI.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (True, False),
             FI.NVML_FI_DEV_ECC_SBE_VOL_DEV: (False, True), FI.NVML_FI_DEV_ECC_DBE_VOL_DEV: (True, True),
             FI.NVML_FI_DEV_ECC_SBE_AGG_DEV: (False, False), FI.NVML_FI_DEV_ECC_DBE_AGG_DEV: (True, False)}


# Fields whose name carries the link ("..._L3"): field id -> link index; others use scopeId.
_FIELD_LINK = {getattr(pynvml, n): int(m.group(1)) for n in dir(pynvml)
               if (m := re.fullmatch(r"NVML_FI_DEV_NVLINK_\w+_L(\d+)", n))}


def link_speed_mbps(dev: Dev) -> int:
    return _LINK_MBPS.get(dev.model.nvlink_version, 0)


class FieldCalls:
    """Field-value and NVLink calls; every method returns an nvmlReturn_t code."""

    def nvmlDeviceGetFieldValues(self, handle, count, values):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        entries = values._obj if hasattr(values, "_obj") else values
        stamp = self.sim.clock_us()
        for i in range(value(count)):
            entry = entries[i]
            answer = NOT_SUPPORTED if dev.is_mig else self._field(dev, entry.fieldId, entry.scopeId)
            entry.timestamp, entry.latencyUsec = stamp, 0
            if isinstance(answer, int):
                entry.nvmlReturn = answer
                continue
            kind, v = answer
            entry.nvmlReturn, entry.valueType = SUCCESS, kind
            if kind == UINT:
                entry.value.uiVal = int(v)
            else:
                entry.value.ullVal = int(v)
        return SUCCESS

    def _field(self, dev: Dev, field: int, scope: int):
        """(value type, value) of one field, or an error code."""
        model, gpu, now = dev.model, dev.gpu, self.now
        telemetry = self.telemetry
        if field >= pynvml.NVML_FI_MAX:
            return INVALID_ARGUMENT
        if field in (FI.NVML_FI_DEV_ECC_CURRENT, FI.NVML_FI_DEV_ECC_PENDING):
            return UINT, 1
        if field in _ECC_DRAM:
            uncorrected, volatile = _ECC_DRAM[field]
            return ULL, telemetry.ecc_errors(gpu, now, uncorrected, volatile)
        if field in _ECC_LOCATIONS:
            return ULL, 0
        if field in (FI.NVML_FI_DEV_RETIRED_SBE, FI.NVML_FI_DEV_RETIRED_DBE, FI.NVML_FI_DEV_RETIRED_PENDING,
                     FI.NVML_FI_DEV_RETIRED_PENDING_SBE, FI.NVML_FI_DEV_RETIRED_PENDING_DBE):
            return NOT_SUPPORTED if model.architecture not in ("volta", "turing") else (ULL, 0)
        if FI.NVML_FI_DEV_REMAPPED_COR <= field <= FI.NVML_FI_DEV_REMAPPED_FAILURE:
            if not has_row_remapper(dev) or (dev.epoch.mig_enabled and dev.epoch.instances):
                return NOT_SUPPORTED
            return UINT, remapped_rows(telemetry, dev, now)[field - FI.NVML_FI_DEV_REMAPPED_COR]
        if field == FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return ULL, telemetry.counter(gpu, now, "pcie_replays")
        if field in (FI.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, FI.NVML_FI_DEV_PCIE_COUNT_RX_BYTES):
            # bytes since driver load ("Value can be wrapped", nvml.h): the integral of the
            # same timelines nvmlDeviceGetPcieThroughput samples
            return ULL, telemetry.pcie_bytes(gpu, now)[field - FI.NVML_FI_DEV_PCIE_COUNT_TX_BYTES]
        if field in (FI.NVML_FI_DEV_PERF_POLICY_POWER, FI.NVML_FI_DEV_PERF_POLICY_THERMAL):
            # the same ns as nvmlDeviceGetViolationStatus [inf]
            return ULL, telemetry.violation_ns(gpu, now, "power" if field == FI.NVML_FI_DEV_PERF_POLICY_POWER
                                               else "thermal")
        if field == FI.NVML_FI_DEV_MEMORY_TEMP:  # HBM boards report it (memory max limit known)
            if not model.temperature_limits_c[3]:
                return NOT_SUPPORTED
            return UINT, round(telemetry.temperature_c(gpu, now)) + 8
        if field in (FI.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, FI.NVML_FI_DEV_ENERGY):
            return ULL, int(self.engine.energy_j[gpu] * 1000)
        power = self._power_field(dev, field, scope)
        if power is not None:
            return power
        if field in _ZERO_COUNTERS:
            return (ULL, 0) if field < FI.NVML_FI_DEV_RESET_STATUS else (UINT, 0)
        if field == FI.NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED:
            return (UINT, 1 if model.architecture in ("hopper", "blackwell") else 0) if model.mig_capable else NOT_SUPPORTED
        return self._nvlink_field(dev, field, scope)

    def _power_field(self, dev: Dev, field: int, scope: int):
        watts = {FI.NVML_FI_DEV_POWER_AVERAGE: lambda: self.telemetry.power_w(dev.gpu, self.now),
                 FI.NVML_FI_DEV_POWER_INSTANT: lambda: self.telemetry.power_w(dev.gpu, self.now),
                 FI.NVML_FI_DEV_POWER_MIN_LIMIT: lambda: dev.model.min_power_limit_watts,
                 FI.NVML_FI_DEV_POWER_MAX_LIMIT: lambda: dev.model.max_power_limit_watts,
                 FI.NVML_FI_DEV_POWER_DEFAULT_LIMIT: lambda: next(
                     v.power_limit_watts for v in dev.model.variants if v.key == dev.model.variant),
                 FI.NVML_FI_DEV_POWER_CURRENT_LIMIT: lambda: dev.model.power_limit_watts,
                 FI.NVML_FI_DEV_POWER_REQUESTED_LIMIT: lambda: dev.model.power_limit_watts}.get(field)
        if watts is None:
            return None
        if scope != 0:  # 0: the GPU; 1: the module (Grace Hopper only)
            return NOT_SUPPORTED
        return UINT, round(1000 * watts())

    def _nvlink_field(self, dev: Dev, field: int, scope: int):
        links = dev.model.nvlink_links
        per_link = field in _PER_LINK_ZERO or field in _LINK_SPEED or field in (
            FI.NVML_FI_DEV_NVLINK_GET_STATE, FI.NVML_FI_DEV_NVLINK_GET_VERSION)
        if field == FI.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return (UINT, links) if links else NOT_SUPPORTED
        if field == FI.NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT:
            return (UINT, links if _on_nvswitch(dev) else 0) if links else NOT_SUPPORTED
        if not per_link or not links:
            return NOT_SUPPORTED
        link = _FIELD_LINK.get(field, scope)
        is_total = field in (FI.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON, FI.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
                             FI.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, FI.NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL,
                             FI.NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL, FI.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL)
        if not is_total and not 0 <= link < links:
            return INVALID_ARGUMENT
        if field in _LINK_SPEED:
            return UINT, link_speed_mbps(dev) if dev.model.nvlink_active else 0
        if field == FI.NVML_FI_DEV_NVLINK_GET_STATE:
            return UINT, int(dev.model.nvlink_active)
        if field == FI.NVML_FI_DEV_NVLINK_GET_VERSION:
            return UINT, dev.model.nvlink_version
        return ULL, 0

    # --- NVLink calls ----------------------------------------------------------------------

    def _link(self, handle, link) -> Dev | int:
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.model.nvlink_links:
            return NOT_SUPPORTED
        if not 0 <= value(link) < dev.model.nvlink_links:
            return INVALID_ARGUMENT
        return dev

    def nvmlDeviceGetNvLinkState(self, handle, link, ref):
        dev = self._link(handle, link)
        if not isinstance(dev, Dev):
            return dev
        out(ref, int(dev.model.nvlink_active))
        return SUCCESS

    def nvmlDeviceGetNvLinkVersion(self, handle, link, ref):
        dev = self._link(handle, link)
        if not isinstance(dev, Dev):
            return dev
        out(ref, dev.model.nvlink_version)
        return SUCCESS

    def nvmlDeviceGetNvLinkCapability(self, handle, link, capability, ref):
        dev = self._link(handle, link)
        if not isinstance(dev, Dev):
            return dev
        cap = value(capability)
        if not 0 <= cap < pynvml.NVML_NVLINK_CAP_COUNT:
            return INVALID_ARGUMENT
        yes = {pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED, pynvml.NVML_NVLINK_CAP_P2P_ATOMICS,
               pynvml.NVML_NVLINK_CAP_VALID}
        out(ref, int(cap in yes and dev.model.nvlink_active))
        return SUCCESS

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link, ref):
        dev = self._link(handle, link)
        if not isinstance(dev, Dev):
            return dev
        if not dev.model.nvlink_active:
            return NOT_SUPPORTED
        out(ref, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if _on_nvswitch(dev) else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
        return SUCCESS

    def nvmlDeviceGetNvLinkErrorCounter(self, handle, link, counter, ref):
        dev = self._link(handle, link)
        if not isinstance(dev, Dev):
            return dev
        if not 0 <= value(counter) < pynvml.NVML_NVLINK_ERROR_COUNT:
            return INVALID_ARGUMENT
        out(ref, 0)
        return SUCCESS


def _on_nvswitch(dev: Dev) -> bool:
    """HGX A100/H100/H200/B200 baseboards wire every SXM module's links to NVSwitches;
    V100 SXM2 (DGX-1 hybrid cube mesh) and NVL bridges link GPU to GPU."""
    return dev.model.form_factor == "SXM" and dev.model.architecture != "volta"
