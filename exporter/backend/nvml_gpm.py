"""GPM (GPU Performance Monitoring, Hopper+) activity ratios (no pynvml import).

GPM metrics are computed between two samples. Per GPU and per GPU instance we keep two
samples and alternate them: each poll fills the older one and computes the metrics from
the previous poll's sample to the new one, so the value covers exactly one poll interval.
The first poll has no previous sample and yields no activity.
"""

from __future__ import annotations

from exporter.backend.nvml_types import PollContext, field_of, frozen_maker, ok
from exporter.snapshot import Activity

# NVML_GPM_METRIC_* id -> Activity field. All are percentages 0..100 in NVML.
GPM_METRICS = (
    (2, "sm_active"),  # SM_UTIL
    (3, "sm_occupancy"),  # SM_OCCUPANCY
    (5, "tensor_active"),  # ANY_TENSOR_UTIL
    (11, "fp64_active"),  # FP64_UTIL
    (12, "fp32_active"),  # FP32_UTIL
    (13, "fp16_active"),  # FP16_UTIL
    (10, "dram_active"),  # DRAM_BW_UTIL
    (1, "graphics_active"),  # GRAPHICS_UTIL
)
# One Activity per GPU and GPU instance each poll (21 on the mixed 8-GPU node), every field
# given in field order: built without __init__'s eight object.__setattr__ calls.
_activity = frozen_maker(Activity)
_set = object.__setattr__  # a ctypes field write without pynvml's Python-level hook


class _Pair:
    """Two GPM samples used alternately; ``primed`` once ``prev`` holds a real sample."""

    def __init__(self, a, b):
        self.prev, self.spare, self.primed = a, b, False


class GpmReader:
    """GPM state of one physical GPU: support flag and sample pairs, kept between polls."""

    def __init__(self, caller):
        self.caller = caller
        self.supported: bool | None = None  # None: not asked yet (or the question failed)
        self._pairs: dict[object, _Pair] = {}
        self._request = None  # one c_nvmlGpmMetricsGet_t reused for every computation

    def gpu(self, ctx: PollContext, handle) -> Activity | None:
        """Activity of the whole GPU since the previous poll; None when unavailable."""
        if not self._supported(ctx, handle):
            return None
        return self._sample(ctx, "gpu", "gpu", "nvmlGpmSampleGet", handle)

    def gpu_instance(self, ctx: PollContext, parent, gi: int, key) -> Activity | None:
        """Activity of GPU instance ``gi``; ``key`` must change when the instance is recreated."""
        if not self._supported(ctx, parent):
            return None
        return self._sample(ctx, "mig", ("gi", key), "nvmlGpmMigSampleGet", parent, gi)

    def prune_gpu_instances(self, live_keys: set) -> None:
        """Free the samples of GPU instances that no longer exist."""
        for key in [k for k in self._pairs if k != "gpu" and k[1] not in live_keys]:
            self._free(self._pairs.pop(key))

    def close(self) -> None:
        for pair in self._pairs.values():
            self._free(pair)
        self._pairs.clear()

    # -- steps --------------------------------------------------------------------------

    def _supported(self, ctx: PollContext, handle) -> bool:
        if self.supported is None:
            answer = ctx.raw("gpu", "nvmlGpmQueryDeviceSupport", handle)
            if answer is None:
                return False  # the question failed: ask again next poll
            self.supported = ok(answer) and bool(answer.isSupportedDevice)
        return self.supported

    def _sample(self, ctx: PollContext, section: str, key, fn: str, *args) -> Activity | None:
        pair = self._pairs.get(key)
        if pair is None:
            a = ctx.get(section, "nvmlGpmSampleAlloc")
            b = ctx.get(section, "nvmlGpmSampleAlloc") if ok(a) else None
            if not ok(b):
                if ok(a):
                    self.caller.call("nvmlGpmSampleFree", a)
                return None
            pair = self._pairs[key] = _Pair(a, b)
        if not ok(ctx.get(section, fn, *args, pair.spare)):
            return None  # keep the previous sample: next poll measures a longer interval
        activity = self._metrics(ctx, section, pair.prev, pair.spare) if pair.primed else None
        pair.prev, pair.spare, pair.primed = pair.spare, pair.prev, True
        return activity

    def _metrics(self, ctx: PollContext, section: str, first, second) -> Activity | None:
        nv = self.caller.nv
        req = self._request
        if req is None:
            # The metric ids, count and version never change: set them once. NVML writes every
            # requested metric's nvmlReturn and value on success, so those need no reset.
            req = self._request = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(GPM_METRICS)
            for i, (metric_id, _) in enumerate(GPM_METRICS):
                req.metrics[i].metricId = metric_id
        # Through ctypes' own field descriptors: pynvml's struct hook (str -> bytes) has nothing to
        # do for a sample handle, and 21 metrics calls a poll set two each.
        _set(req, "sample1", first)
        _set(req, "sample2", second)
        if not ok(ctx.get(section, "nvmlGpmMetricsGet", req)):
            return None
        values = {}
        metrics = field_of(req, "metrics")  # numeric fields only: read without pynvml's hooks
        for i, (_, field) in enumerate(GPM_METRICS):
            metric = metrics[i]
            if field_of(metric, "nvmlReturn") == 0:  # per-metric status: non-zero means no value
                # Clamped: NVML can report slightly over 100% on MIG instances (DCGM#152).
                # min(1.0, max(0.0, v)) as those builtins decide it (NaN and -0.0 give 0.0), without
                # their two calls on each of the 168 metrics a poll of the mixed node reads.
                ratio = field_of(metric, "value") / 100.0
                ratio = ratio if ratio > 0.0 else 0.0
                values[field] = ratio if ratio < 1.0 else 1.0
        return _activity(**values)

    def _free(self, pair: _Pair) -> None:
        for sample in (pair.prev, pair.spare):
            try:
                self.caller.call("nvmlGpmSampleFree", sample)
            except Exception:  # freeing on a lost GPU must not break close()
                pass
