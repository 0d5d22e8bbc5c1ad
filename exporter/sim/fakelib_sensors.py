"""Fake NVML: sensor readings of a physical GPU: utilization, power, energy, temperature,
clocks, clock event reasons and ECC counters (values from exporter.sim.telemetry).

Power, energy, temperature, clocks and clock reasons answer only on the physical GPU handle;
on a MIG device handle they return NOT_SUPPORTED (nvml_facts.md §9 item 1 leaves this open;
DCGM maps them to the parent), so the exporter reads them once per GPU.
"""

from __future__ import annotations

import pynvml

from exporter.sim.fakelib_base import (
    INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, VERSION_MISMATCH, Dev, out, value,
)

_CLOCK_TYPES = 4  # graphics, SM, memory, video
_SUPPORTED_REASONS = pynvml.nvmlClocksEventReasonAll


class SensorCalls:
    """Sensor calls; every method returns an nvmlReturn_t code."""

    # --- utilization, power, thermal -----------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle, ref):
        """Percent; NOT_SUPPORTED on MIG-enabled GPUs, parent and MIG handles alike."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        gpu_ratio, memory_ratio = self.telemetry.utilization(dev.gpu, self.now)
        ref._obj.gpu, ref._obj.memory = round(100 * gpu_ratio), round(100 * memory_ratio)
        return SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle, ref):
        """Milliwatts."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, round(1000 * self.telemetry.power_w(dev.gpu, self.now)))
        return SUCCESS

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, ref):
        """Milliwatts."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, round(1000 * dev.model.power_limit_watts))
        return SUCCESS

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, ref):
        """Millijoules since the simulation started (exact integral of power)."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, int(self.engine.energy_j[dev.gpu] * 1000))
        return SUCCESS

    def nvmlDeviceGetTemperature(self, handle, sensor, ref):
        """Degrees Celsius; only NVML_TEMPERATURE_GPU (0) exists."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        if value(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        out(ref, round(self.telemetry.temperature_c(dev.gpu, self.now)))
        return SUCCESS

    def nvmlDeviceGetTemperatureV(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        temp = ref._obj
        if temp.version != pynvml.nvmlTemperature_v1:
            return VERSION_MISMATCH
        if temp.sensorType != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        temp.temperature = round(self.telemetry.temperature_c(dev.gpu, self.now))
        return SUCCESS

    # --- clocks --------------------------------------------------------------------------

    def _clock(self, handle, clock_type, ref, maximum: bool):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        kind = value(clock_type)
        if not 0 <= kind < _CLOCK_TYPES:
            return INVALID_ARGUMENT
        clocks = dev.model.max_clocks_mhz if maximum else self.telemetry.clocks_mhz(dev.gpu, self.now)
        out(ref, clocks[kind])
        return SUCCESS

    def nvmlDeviceGetClockInfo(self, handle, clock_type, ref):
        """MHz now."""
        return self._clock(handle, clock_type, ref, maximum=False)

    def nvmlDeviceGetMaxClockInfo(self, handle, clock_type, ref):
        """MHz maximum."""
        return self._clock(handle, clock_type, ref, maximum=True)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, ref):
        """Bitmask of nvmlClocksEventReason* flags."""
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        mask = 0
        for name in self.telemetry.clock_reasons(dev.gpu, self.now):
            mask |= getattr(pynvml, "nvmlClocksEventReason" + name, 0)
        out(ref, mask)
        return SUCCESS

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle, ref):
        dev = self._gpu_only(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, _SUPPORTED_REASONS)
        return SUCCESS

    nvmlDeviceGetSupportedClocksThrottleReasons = nvmlDeviceGetSupportedClocksEventReasons

    # --- ECC mode (counters: exporter.sim.fakelib_health) ----------------------------------

    def nvmlDeviceGetEccMode(self, handle, current, pending):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(current, pynvml.NVML_FEATURE_ENABLED)
        out(pending, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS
