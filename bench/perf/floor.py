"""The floor of a poll: the minimum NVML calls (perf/minimum.py) made through pynvml with the
arguments an exporter really passes, so each call reaches the driver and does its work.

Identity an exporter keeps from poll to poll is prepared once, outside the timed round: handles,
the field-id list (the same fields exporter/backend/nvml_health.py asks for, NVLink pairs
included), two GPM sample buffers per GPU and per GPU instance, one XID event set. A call the
plan cannot form is listed in ``Floor.unformed``, never silently timed as a cheap error: an
earlier floor passed a handle alone to nvmlDeviceGetFieldValues, nvmlGpmSampleGet,
nvmlGpmMetricsGet and nvmlEventSetWait_v2, which failed in pynvml or at the driver's argument
check, and so left out their real cost (about 3.7 ms of a real H100's 4.9 ms poll).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perf.minimum import minimum_calls

# Calls whose extra arguments are constants: name -> (pynvml constant names or values).
_CONSTANT_ARGS = {
    "nvmlDeviceGetTemperature": ("NVML_TEMPERATURE_GPU",),
    "nvmlDeviceGetClockInfo": ("NVML_CLOCK_SM",),
    "nvmlDeviceGetTotalEccErrors": ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    "nvmlDeviceGetProcessUtilization": (0,),
    "nvmlDeviceGetRetiredPages": ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",),
}
_VIOLATIONS = ("NVML_FI_DEV_PERF_POLICY_POWER", "NVML_FI_DEV_PERF_POLICY_THERMAL", "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST",
               "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT", "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION",
               "NVML_FI_DEV_PERF_POLICY_RELIABILITY")


@dataclass
class Floor:
    calls: list = field(default_factory=list)  # zero-argument callables, one per minimum call
    unformed: list[str] = field(default_factory=list)  # minimum calls the plan could not make
    _cleanup: list = field(default_factory=list)

    def run(self, nv) -> None:
        for call in self.calls:
            try:
                call()
            except nv.NVMLError:  # an answer too (Timeout from the XID drain, NotSupported)
                pass

    def close(self) -> None:
        for undo in reversed(self._cleanup):
            try:
                undo()
            except Exception:  # noqa: BLE001 - best effort: the session is ending anyway
                pass


def _constant(nv, value):
    return getattr(nv, value) if isinstance(value, str) else value


def _field_ids(nv, gpu) -> list:
    ids = [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, nv.NVML_FI_DEV_MEMORY_TEMP,
           nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER, *(getattr(nv, n) for n in _VIOLATIONS if hasattr(nv, n))]
    links = len(gpu.health.nvlinks)
    if links:
        ids.append(nv.NVML_FI_DEV_NVLINK_LINK_COUNT)
        for link in range(links):
            ids += [(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link), (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)]
    return ids


def _gpm(nv, floor: Floor, handle, gi=None):
    """(sample call, metrics call) for one GPU or GPU instance, alternating two buffers."""
    from exporter.backend.nvml_gpm import GPM_METRICS

    buffers = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
    floor._cleanup += [lambda b=b: nv.nvmlGpmSampleFree(b) for b in buffers]
    turn = [0]
    try:  # the first buffer filled before the timed rounds, as an exporter's previous poll did
        if gi is None:
            nv.nvmlGpmSampleGet(handle, buffers[0])
        else:
            nv.nvmlGpmMigSampleGet(handle, gi, buffers[0])
    except nv.NVMLError:
        pass  # e.g. a GPU in MIG mode answers NotSupported for itself: the call still costs that
    request = nv.c_nvmlGpmMetricsGet_t()
    request.version = nv.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    for i, (metric_id, _) in enumerate(GPM_METRICS):
        request.metrics[i].metricId = metric_id

    def sample():
        turn[0] ^= 1
        if gi is None:
            return nv.nvmlGpmSampleGet(handle, buffers[turn[0]])
        return nv.nvmlGpmMigSampleGet(handle, gi, buffers[turn[0]])

    def metrics():
        request.sample1, request.sample2 = buffers[turn[0] ^ 1], buffers[turn[0]]
        return nv.nvmlGpmMetricsGet(request)

    return sample, metrics


def floor_plan(nv, snapshot) -> Floor:
    """The floor of ``snapshot``'s poll, prepared (nvmlInit done by the caller)."""
    floor = Floor()
    need = minimum_calls(snapshot)
    gpus = [g for g in snapshot.gpus if g.up]
    handles = {g.index: nv.nvmlDeviceGetHandleByIndex(g.index) for g in gpus}
    gpm_calls: dict[str, list] = {"nvmlGpmSampleGet": [], "nvmlGpmMigSampleGet": [], "nvmlGpmMetricsGet": []}
    events = None
    for gpu in gpus:
        h = handles[gpu.index]
        if gpu.activity is not None:
            s, m = _gpm(nv, floor, h)
            gpm_calls["nvmlGpmSampleGet"].append(s)
            gpm_calls["nvmlGpmMetricsGet"].append(m)
        for gi in sorted({i.gi for i in gpu.mig_instances if i.activity is not None}):
            s, m = _gpm(nv, floor, h, gi)
            gpm_calls["nvmlGpmMigSampleGet"].append(s)
            gpm_calls["nvmlGpmMetricsGet"].append(m)
    for name, count in sorted(need.items()):
        if name in gpm_calls:
            made = gpm_calls[name][:count]
        elif name == "nvmlDeviceGetFieldValues":
            made = [lambda h=handles[g.index], ids=_field_ids(nv, g): nv.nvmlDeviceGetFieldValues(h, ids)
                    for g in gpus][:count]
        elif name == "nvmlEventSetWait_v2":
            if events is None:
                events = nv.nvmlEventSetCreate()
                floor._cleanup.append(lambda e=events: nv.nvmlEventSetFree(e))
                for h in handles.values():
                    try:
                        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
                    except nv.NVMLError:
                        pass
            made = [lambda events=events: nv.nvmlEventSetWait_v2(events, 0)] * count
        elif (fn := getattr(nv, name, None)) is not None:
            extra = tuple(_constant(nv, a) for a in _CONSTANT_ARGS.get(name, ()))
            ordered = [handles[g.index] for g in gpus]
            made = [lambda fn=fn, h=ordered[i % len(ordered)], extra=extra: fn(h, *extra) for i in range(count)]
        else:
            made = []
        formed = [call for call in made if _forms(nv, call)]
        floor.calls += formed
        if len(formed) < count:
            floor.unformed.append(f"{name} x{count - len(formed)}")
    return floor


def _forms(nv, call) -> bool:
    """Whether ``call`` reaches the driver: an NVML answer, even an error, does; a Python-side
    argument error does not."""
    try:
        call()
    except nv.NVMLError:
        pass
    except (TypeError, AttributeError, ValueError):
        return False
    return True
