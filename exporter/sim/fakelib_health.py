"""Fake NVML: memory health, accounting, media engines, application clocks and thermals.

- ECC: counts come from the scenario's cumulative timelines (aggregate); volatile counts
  restart from 0 at each GPU reset. All of them sit in device memory (DRAM); the other
  locations read 0. Ampere and newer retire no pages (row remapping instead: retired pages
  NOT_SUPPORTED); Volta and Turing have no row remapper (the reverse), nor do GDDR boards (L4,
  L40S). Remapped rows, pending and failure come from the scenario's health timelines (0 unset).
  Under MIG with instances, remapped rows are NOT_SUPPORTED (header).
- Violation time (nvmlDeviceGetViolationStatus): the scenario's power/thermal_violation_seconds.
- Accounting is off (nvidia-smi default); its buffer holds 4000 entries [obs].
- Media engines (encoder, decoder, JPEG, OFA): 0 % over a 1/6 s period, NOT_SUPPORTED on
  MIG-enabled GPUs (header). No encoder or FBC sessions.
- Application clocks: the board's default application clock (SM/graphics) and the maximum
  memory clock; supported graphics clocks from max down to 210 MHz in 15 MHz steps.
- Temperature thresholds per board (catalog_variants.py); no acoustic thresholds.
"""

from __future__ import annotations

import pynvml

from exporter.sim.fakelib_base import (
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, SUCCESS, VERSION_MISMATCH, Dev,
    array_length, out, value,
)
from exporter.sim.fakelib_board import SAMPLING_PERIOD_US

_MIN_GRAPHICS_MHZ = 210
_STEP_MHZ = 15
_ACCOUNTING_BUFFER = 4000


def _new_generation(dev: Dev) -> bool:
    """Ampere and newer: row remapping instead of page retirement."""
    return dev.model.architecture not in ("volta", "turing")


def has_row_remapper(dev: Dev) -> bool:
    """Row remapping exists on HBM boards of Ampere and newer (A100, A30, H100, H200, B200), not
    on GDDR boards (L4, L40S) [inf: issue 21; HBM boards are those with a memory max
    operating temperature in the catalog]."""
    return model_has_row_remapper(dev.model)


def model_has_row_remapper(model) -> bool:
    return model.architecture not in ("volta", "turing") and bool(model.temperature_limits_c[3])


def remapped_rows(sim_telemetry, dev: Dev, now: float) -> tuple[int, int, int, int]:
    """(correctable, uncorrectable, pending, failure) of the scenario at ``now``."""
    return (sim_telemetry.counter(dev.gpu, now, "remapped_rows_correctable"),
            sim_telemetry.counter(dev.gpu, now, "remapped_rows_uncorrectable"),
            int(sim_telemetry.flag(dev.gpu, now, "row_remap_pending")),
            int(sim_telemetry.flag(dev.gpu, now, "row_remap_failure")))


VIOLATION_POLICY = {pynvml.NVML_PERF_POLICY_POWER: "power", pynvml.NVML_PERF_POLICY_THERMAL: "thermal"}


class HealthCalls:
    """ECC, accounting, media-engine, clock and thermal calls; each returns an nvmlReturn_t."""

    # --- ECC -------------------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        kind, counter = value(error_type), value(counter_type)
        if kind not in (0, 1) or counter not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            return INVALID_ARGUMENT
        out(ref, self.telemetry.ecc_errors(dev.gpu, self.now, kind == 1, counter == pynvml.NVML_VOLATILE_ECC))
        return SUCCESS

    def nvmlDeviceGetMemoryErrorCounter(self, handle, error_type, counter_type, location, ref):
        if value(location) >= pynvml.NVML_MEMORY_LOCATION_COUNT:
            return INVALID_ARGUMENT
        if value(location) != pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY:
            dev = self._gpu_only(handle)
            if not isinstance(dev, Dev):
                return dev
            out(ref, 0)
            return SUCCESS
        return self.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type, ref)

    def nvmlDeviceGetDetailedEccErrors(self, handle, error_type, counter_type, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        counts = ref._obj
        counts.l1Cache = counts.l2Cache = counts.registerFile = 0
        volatile = value(counter_type) == pynvml.NVML_VOLATILE_ECC
        counts.deviceMemory = self.telemetry.ecc_errors(dev.gpu, self.now, value(error_type) == 1, volatile)
        return SUCCESS

    def nvmlDeviceGetDefaultEccMode(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS

    def nvmlDeviceGetRetiredPages(self, handle, cause, count, addresses, *_):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if _new_generation(dev):
            return NOT_SUPPORTED
        out(count, 0)
        return SUCCESS

    nvmlDeviceGetRetiredPages_v2 = nvmlDeviceGetRetiredPages

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if _new_generation(dev):
            return NOT_SUPPORTED
        out(ref, pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    def nvmlDeviceGetRemappedRows(self, handle, corrected, uncorrected, pending, failure):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not has_row_remapper(dev) or (dev.epoch.mig_enabled and dev.epoch.instances):
            return NOT_SUPPORTED
        for ref, count in zip((corrected, uncorrected, pending, failure), remapped_rows(self.telemetry, dev, self.now)):
            out(ref, count)
        return SUCCESS

    def nvmlDeviceGetRowRemapperHistogram(self, handle, ref):
        """Every bank fully available; Hopper and newer have 2560 banks [obs], Ampere 640 [inf]."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if not has_row_remapper(dev):
            return NOT_SUPPORTED
        values = ref._obj
        values.max = 2560 if dev.model.architecture in ("hopper", "blackwell") else 640
        values.high = values.partial = values.low = values.none = 0
        return SUCCESS

    # --- accounting: off -------------------------------------------------------------------

    def nvmlDeviceGetAccountingMode(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    def nvmlDeviceGetAccountingBufferSize(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, _ACCOUNTING_BUFFER)
        return SUCCESS

    def nvmlDeviceGetAccountingPids(self, handle, count, pids):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(count, 0)
        return SUCCESS

    def nvmlDeviceGetAccountingStats(self, handle, pid, ref):
        dev = self._gpu_only(handle)
        return dev if not isinstance(dev, Dev) else NOT_FOUND

    # --- media engines ---------------------------------------------------------------------

    def _media(self, handle, util, period):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        out(util, 0)
        out(period, SAMPLING_PERIOD_US)
        return SUCCESS

    nvmlDeviceGetEncoderUtilization = _media
    nvmlDeviceGetDecoderUtilization = _media
    nvmlDeviceGetJpgUtilization = _media
    nvmlDeviceGetOfaUtilization = _media

    def nvmlDeviceGetEncoderCapacity(self, handle, query_type, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, 0)  # no NVENC on A100/H100-class boards; no session would fit
        return SUCCESS

    def nvmlDeviceGetEncoderStats(self, handle, count, fps, latency):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        for ref in (count, fps, latency):
            out(ref, 0)
        return SUCCESS

    def _no_sessions(self, handle, count, array):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(count, 0)
        return SUCCESS

    nvmlDeviceGetEncoderSessions = _no_sessions
    nvmlDeviceGetFBCSessions = _no_sessions

    def nvmlDeviceGetFBCStats(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        ref._obj.sessionsCount = ref._obj.averageFPS = ref._obj.averageLatency = 0
        return SUCCESS

    # --- application clocks ----------------------------------------------------------------

    def _app_clocks(self, dev: Dev) -> tuple[int, int, int, int]:
        graphics, _, memory, video = dev.model.max_clocks_mhz
        app = dev.model.default_app_clock_mhz or graphics
        return app, app, memory, video

    def _clock_of(self, handle, clock_type, ref, pick):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        kind = value(clock_type)
        if not 0 <= kind < 4:
            return INVALID_ARGUMENT
        out(ref, pick(dev)[kind])
        return SUCCESS

    def nvmlDeviceGetApplicationsClock(self, handle, clock_type, ref):
        return self._clock_of(handle, clock_type, ref, self._app_clocks)

    nvmlDeviceGetDefaultApplicationsClock = nvmlDeviceGetApplicationsClock

    def nvmlDeviceGetMaxCustomerBoostClock(self, handle, clock_type, ref):
        return self._clock_of(handle, clock_type, ref, lambda d: d.model.max_clocks_mhz)

    def nvmlDeviceGetClock(self, handle, clock_type, clock_id, ref):
        which = value(clock_id)
        if which == pynvml.NVML_CLOCK_ID_CURRENT:
            return self._clock_of(handle, clock_type, ref, lambda d: self.telemetry.clocks_mhz(d.gpu, self.now))
        if which in (pynvml.NVML_CLOCK_ID_APP_CLOCK_TARGET, pynvml.NVML_CLOCK_ID_APP_CLOCK_DEFAULT):
            return self._clock_of(handle, clock_type, ref, self._app_clocks)
        if which == pynvml.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
            return self._clock_of(handle, clock_type, ref, lambda d: d.model.max_clocks_mhz)
        return INVALID_ARGUMENT

    def _fill(self, values: list[int], count, array) -> int:
        room = array_length(array) if array is not None else 0
        if array is None or (room is not None and room < len(values)) or count._obj.value < len(values):
            out(count, len(values))
            return INSUFFICIENT_SIZE if values else SUCCESS
        entries = array._obj if hasattr(array, "_obj") else array
        for i, v in enumerate(values):
            entries[i] = v
        out(count, len(values))
        return SUCCESS

    def nvmlDeviceGetSupportedMemoryClocks(self, handle, count, array):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        return self._fill([dev.model.max_clocks_mhz[2]], count, array)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle, memory_mhz, count, array):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if value(memory_mhz) != dev.model.max_clocks_mhz[2]:
            return NOT_FOUND
        top = dev.model.max_clocks_mhz[0]
        return self._fill(list(range(top, _MIN_GRAPHICS_MHZ - 1, -_STEP_MHZ)), count, array)

    def nvmlDeviceGetMinMaxClockOfPState(self, handle, clock_type, pstate, low, high):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        kind = value(clock_type)
        if not 0 <= kind < 4 or value(pstate) not in (0, dev.model.idle_pstate):
            return INVALID_ARGUMENT
        top = dev.model.max_clocks_mhz[kind]
        out(low, top if kind == pynvml.NVML_CLOCK_MEM else _MIN_GRAPHICS_MHZ)
        out(high, top)
        return SUCCESS

    def nvmlDeviceGetAutoBoostedClocksEnabled(self, handle, enabled, default):
        """Data-center boards: "Auto Boost: N/A"."""
        dev = self._gpu_only(handle)
        return dev if not isinstance(dev, Dev) else NOT_SUPPORTED

    # --- thermals --------------------------------------------------------------------------

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        which = value(threshold)
        if not 0 <= which < pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT:
            return INVALID_ARGUMENT
        shutdown, slowdown, gpu_max, mem_max = dev.model.temperature_limits_c
        limits = {pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: shutdown,
                  pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: slowdown,
                  pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: gpu_max,
                  pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: mem_max}
        if not limits.get(which):
            return NOT_SUPPORTED
        out(ref, limits[which])
        return SUCCESS

    def nvmlDeviceGetMarginTemperature(self, handle, ref):
        """Degrees below the slowdown threshold."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if ref._obj.version != pynvml.nvmlMarginTemperature_v1:
            return VERSION_MISMATCH
        slowdown = dev.model.temperature_limits_c[1]
        ref._obj.marginTemperature = slowdown - round(self.telemetry.temperature_c(dev.gpu, self.now))
        return SUCCESS

    def nvmlDeviceGetViolationStatus(self, handle, policy, ref):
        """ns held down by power or temperature: the scenario's power_violation_seconds /
        thermal_violation_seconds; 0 for the other policies (reference time: the simulation clock)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if value(policy) >= pynvml.NVML_PERF_POLICY_COUNT:
            return INVALID_ARGUMENT
        ref._obj.referenceTime = self.sim.clock_us()
        which = VIOLATION_POLICY.get(value(policy))
        ref._obj.violationTime = self.telemetry.violation_ns(dev.gpu, self.now, which) if which else 0
        return SUCCESS
