"""Fake NVML: event sets (XID errors) and GPM (GPU Performance Monitoring) samples.

Events: a set receives the scenario's XID events of the GPUs registered on it (parent
handles only) that happen at or after the virtual time of registration. ``EventSetWait``
returns the oldest undelivered one, else TIMEOUT at once: it never sleeps, so callers should
drain the set with a zero timeout once per poll rather than block in a loop.

GPM (Hopper and newer): a sample records (device, virtual time); ``nvmlGpmMetricsGet``
returns the device's mean activity between its two samples, in percent. On older GPUs
``nvmlGpmQueryDeviceSupport`` answers isSupportedDevice=0 and sampling is NOT_SUPPORTED.
"""

from __future__ import annotations

import ctypes

import pynvml

from exporter.sim.fakelib_base import (
    INVALID_ARGUMENT, KIND_EVENT_SET, KIND_GPM_SAMPLE, NO_ID, NOT_FOUND, NOT_SUPPORTED, SUCCESS,
    TIMEOUT, UNINITIALIZED, VERSION_MISMATCH, Dev, decode, encode, out, out_handle, value,
)

SUPPORTED_EVENTS = (pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
                    | pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeXidCriticalError
                    | pynvml.nvmlEventTypeClock)

# GPM metric id -> activity pipe (percent of it); ids with no simulated source read 0.
_GPM_PIPES = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "graphics_active",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: None,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: None,
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL: None,
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: None,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",
    pynvml.NVML_GPM_METRIC_FP64_UTIL: "fp64_active",
    pynvml.NVML_GPM_METRIC_FP32_UTIL: "fp32_active",
    pynvml.NVML_GPM_METRIC_FP16_UTIL: "fp16_active",
}


class EventGpmCalls:
    """Event and GPM calls; every method returns an nvmlReturn_t code."""

    def _object(self, handle, kind: int, table: dict):
        h = decode(handle)
        if h is None or h[0] != kind or h[2] not in table:
            return None
        return h[2]

    # --- events --------------------------------------------------------------------------

    def nvmlEventSetCreate(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        set_id = next(self._ids)
        self._event_sets[set_id] = {"gpus": {}, "delivered": set()}
        out_handle(ref, encode(KIND_EVENT_SET, 0, set_id))
        return SUCCESS

    def nvmlEventSetFree(self, event_set):
        set_id = self._object(event_set, KIND_EVENT_SET, self._event_sets)
        if set_id is None:
            return INVALID_ARGUMENT
        del self._event_sets[set_id]
        return SUCCESS

    def nvmlDeviceGetSupportedEventTypes(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, SUPPORTED_EVENTS)
        return SUCCESS

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        """Registers the supported types; NOT_SUPPORTED if some asked for are not (the set
        stays usable). MIG device handles cannot register (header)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.is_mig:
            return NOT_SUPPORTED
        set_id = self._object(event_set, KIND_EVENT_SET, self._event_sets)
        if set_id is None:
            return INVALID_ARGUMENT
        wanted = value(event_types)
        registered = self._event_sets[set_id]["gpus"]
        old_mask, since = registered.get(dev.gpu, (0, self.now))
        registered[dev.gpu] = (old_mask | (wanted & SUPPORTED_EVENTS), since)
        return NOT_SUPPORTED if wanted & ~SUPPORTED_EVENTS else SUCCESS

    def nvmlEventSetWait_v2(self, event_set, ref, timeout_ms):
        set_id = self._object(event_set, KIND_EVENT_SET, self._event_sets)
        if set_id is None:
            return INVALID_ARGUMENT
        state = self._event_sets[set_id]
        for n, xid in enumerate(self.engine.xids):
            mask, since = state["gpus"].get(xid.gpu, (0, 0.0))
            if (n in state["delivered"] or not mask & pynvml.nvmlEventTypeXidCriticalError
                    or not since <= xid.at <= self.now):
                continue
            state["delivered"].add(n)
            data = ref._obj
            data.device = ctypes.cast(self._gpu_dev(xid.gpu).handle, pynvml.c_nvmlDevice_t)
            data.eventType = pynvml.nvmlEventTypeXidCriticalError
            data.eventData = xid.xid
            data.gpuInstanceId = NO_ID if xid.gi is None else xid.gi
            data.computeInstanceId = NO_ID if xid.gi is None else 0
            return SUCCESS
        return TIMEOUT

    # --- GPM -----------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if ref._obj.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return VERSION_MISMATCH
        ref._obj.isSupportedDevice = 1 if dev.model.gpm_supported else 0
        return SUCCESS

    def nvmlGpmSampleAlloc(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        sample_id = next(self._ids)
        self._gpm_samples[sample_id] = None
        out_handle(ref, encode(KIND_GPM_SAMPLE, 0, sample_id))
        return SUCCESS

    def nvmlGpmSampleFree(self, sample):
        sample_id = self._object(sample, KIND_GPM_SAMPLE, self._gpm_samples)
        if sample_id is None:
            return INVALID_ARGUMENT
        del self._gpm_samples[sample_id]
        return SUCCESS

    def _record(self, dev: Dev, key, sample) -> int:
        if not dev.model.gpm_supported:
            return NOT_SUPPORTED
        sample_id = self._object(sample, KIND_GPM_SAMPLE, self._gpm_samples)
        if sample_id is None:
            return INVALID_ARGUMENT
        self._gpm_samples[sample_id] = (dev.gpu, key, self.now)
        return SUCCESS

    def nvmlGpmSampleGet(self, handle, sample):
        """Sample a GPU (GPU-level activity) or a MIG device (its instance)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return self._record(dev, (dev.gpu, dev.inst.serial) if dev.is_mig else None, sample)

    def nvmlGpmMigSampleGet(self, handle, gi_id, sample):
        """Sample GPU instance ``gi_id`` through its parent GPU handle."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.is_mig:
            return INVALID_ARGUMENT
        if not dev.model.gpm_supported:
            return NOT_SUPPORTED
        inst = next((i for i in dev.epoch.instances if i.gi == value(gi_id)), None)
        if inst is None:
            return NOT_FOUND
        return self._record(dev, (dev.gpu, inst.serial), sample)

    def nvmlGpmMetricsGet(self, ref):
        """Percent per metric averaged between sample1 and sample2; per-metric nvmlReturn."""
        mg = ref._obj
        if mg.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return VERSION_MISMATCH
        if mg.numMetrics > pynvml.NVML_GPM_METRIC_MAX:
            return INVALID_ARGUMENT
        first = self._gpm_samples.get(self._object(mg.sample1, KIND_GPM_SAMPLE, self._gpm_samples))
        second = self._gpm_samples.get(self._object(mg.sample2, KIND_GPM_SAMPLE, self._gpm_samples))
        if first is None or second is None or first[:2] != second[:2]:
            return INVALID_ARGUMENT
        gpu, key = first[:2]
        mean = self.telemetry.mean_activity(key, gpu, first[2], second[2])
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            if metric.metricId not in _GPM_PIPES:
                metric.nvmlReturn, metric.value = NOT_SUPPORTED, 0.0
                continue
            pipe = _GPM_PIPES[metric.metricId]
            metric.nvmlReturn = SUCCESS
            metric.value = 100.0 * mean[pipe] if pipe else 0.0
        return SUCCESS
