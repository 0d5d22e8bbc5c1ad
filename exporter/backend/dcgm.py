"""DCGM backend: pipe activity and device fields from DCGM, the rest from NVML, one Snapshot.

DCGM supplies, per GPU and per MIG GPU instance, the profiling (DCP) fields that give SM,
tensor, FP64/32/16 and DRAM activity on every datacenter GPU since Volta (NVML's GPM has
them only on Hopper and newer), and the device fields it watches anyway (power, energy,
temperature, SM/memory/video clocks, utilization, volatile ECC counts). NVML still reads
identity, MIG mode and inventory, memory, processes, MPS and XID events: the two combine
per GPU: what DCGM supplies this poll is not read through NVML (GpuReader.provided) and goes
into each GpuInfo as its NVML reader builds it (GpuReader.supplied), so no GPU is built twice.

When DCGM cannot supply something (no host engine, -29, -33, -37, version mismatch, a GPU
without profiling metrics), the NVML reader reads it instead where NVML can (GPM on Hopper+),
``gpushare_exporter_source_available{source=...}`` says 0, the reason is logged once and the
source is tried again every few polls (exporter/backend/dcgm_source.py).
"""

from __future__ import annotations

import logging
import time

from exporter.backend.dcgm_bindings import Bindings
from exporter.backend.dcgm_session import DcgmAddress, DcgmSession
from exporter.backend.dcgm_source import DcgmReading, DcgmSource, NvmlView
from exporter.backend.dcgm_values import (
    DEVICE_PROVIDES, PROFILING_FIELDS, PROFILING_PROVIDES, activity_values, device_values,
)
from exporter.backend.nvml_types import Supplied
# The cheap copy of a frozen record, shared with the poller and the simulated backend; the DCGM
# poll copies every GPU, its health, its MIG instances and the Snapshot to put DCGM's values in.
from exporter.frozen import is_plain as _is_plain, replace
from exporter.snapshot import Activity, GpuInfo, Snapshot

log = logging.getLogger(__name__)
_NONE: dict = {}  # no values (read only)
_new_object = object.__new__
_NO_ACTIVITY = Activity()  # the Activity each poll's ones are copied from (see replace)
_PROFILING_ITEMS = tuple(PROFILING_FIELDS.items())


def activity(values) -> Activity:
    """``Activity(**activity_values(values))``, built as replace() copies (a poll makes one per GPU
    and GPU instance: 57 on an 8x A100 all-1g node), same clamping (dcgm_values.activity_values,
    inlined: one pass, no call per value; tests/test_backend_dcgm_supply.py compares them)."""
    if not _is_plain(Activity):
        return Activity(**activity_values(values))
    new = _new_object(Activity)
    attributes = new.__dict__
    attributes.update(_NO_ACTIVITY.__dict__)
    get = values.get
    for fid, pipe in _PROFILING_ITEMS:
        value = get(fid)
        if value is not None:
            value = float(value)
            attributes[pipe] = value if 0.0 < value <= 1.0 else (1.0 if value > 1.0 else 0.0)
    return new


# (device fields from DCGM, activity from DCGM) -> what the GPU's NVML reader leaves out
_PROVIDES = {(device, profiled): frozenset((DEVICE_PROVIDES if device else frozenset())
                                           | (PROFILING_PROVIDES if profiled else frozenset()))
             for device in (False, True) for profiled in (False, True)}


class _InstanceActivity:
    """A GPU's GPU instances' activity from DCGM, where the NVML reader asks GPM for it
    (GpmReader.gpu_instance): DCGM's values of that instance, blank when DCGM has none."""

    __slots__ = ("by_gi",)

    def __init__(self, by_gi: dict):
        self.by_gi = by_gi  # GI id -> Activity, made by _activities before the NVML read

    def gpu_instance(self, ctx, parent, gi: int, key) -> Activity:
        found = self.by_gi.get(gi)
        return _NO_ACTIVITY if found is None else found

    def prune_gpu_instances(self, live_keys) -> None:
        """Nothing to free: no GPM samples are taken for these instances."""


def _supply(device: dict | None, activities: dict | None, gpu_id: int | None) -> Supplied:
    """DCGM's values for one GPU, for its NVML reader to build the GpuInfo with them in place:
    the values DcgmBackend._merge_gpu copies in (tests/test_backend_dcgm_supply.py).
    ``activities``: GI id (None: the GPU) -> Activity, when DCGM gives this GPU's activity."""
    values: dict = {"dcgm_gpu_id": gpu_id}
    clocks = health = instances = None
    if device is not None:
        parts = device_values(device)
        values.update(parts["values"])
        clocks, health = parts["clocks"], parts["health"]
        values["ecc_errors"] = parts["ecc"]
    if activities is not None:
        values["activity"] = activities.get(None, _NO_ACTIVITY)
        instances = _InstanceActivity(activities)
    return Supplied(values, clocks, health, instances)


def _activities(reading: DcgmReading) -> dict[int, dict]:
    """NVML index -> {GI id, None for the GPU: Activity} for each GPU whose activity DCGM gives."""
    out: dict[int, dict] = {index: {} for index in reading.profiled}
    for (index, gi), fields in reading.profiling.items():
        per_gpu = out.get(index)
        if per_gpu is not None:
            per_gpu[gi] = activity(fields)
    return out


class DcgmBackend:
    """``Backend`` "dcgm": an NvmlBackend plus a DcgmSource (see the module docstring)."""

    name = "dcgm"

    def __init__(self, nvml, bindings: Bindings, address: DcgmAddress | None, interval: float,
                 session: DcgmSession | None = None, reason: str = "", update_interval: float | None = None):
        """``nvml``: an NvmlBackend, opened here unless already open; ``session``: already connected;
        ``update_interval``: the sampling period asked of DCGM (None: ``interval``)."""
        self.nvml = nvml
        self.source = DcgmSource(bindings, address, interval, session, update_interval)
        self.reason = reason
        self._open = False
        self._gpu_ids: dict[int, int] = {}  # NVML index -> DCGM gpuId, from the last mapping
        self._gpu_ids_of: dict | None = None  # the session's gpu_index that _gpu_ids was made of

    def open(self) -> None:
        if not getattr(self.nvml, "_open", False):
            self.nvml.open()
        self._open = True
        log.info("backend dcgm: %s", self.reason or "DCGM for activity and device fields, NVML for the rest")

    def poll(self) -> Snapshot:
        if not self._open:
            raise RuntimeError("DcgmBackend.poll() called before open()")
        started = time.monotonic()
        reading = self.source.read()
        gpu_ids = self._current_gpu_ids()
        device, activities = reading.device, _activities(reading)
        for reader in self.nvml.readers:  # DCGM's values go into each GpuInfo as it is built
            index = reader.index
            values, gpu_activity = device.get(index), activities.get(index)
            reader.provided = _PROVIDES[values is not None, gpu_activity is not None]
            reader.supplied = _supply(values, gpu_activity, gpu_ids.get(index))
        snapshot = self.nvml.poll()
        self.source.observe(NvmlView(
            uuids={g.uuid: g.index for g in snapshot.gpus if g.uuid},
            layout={g.index: frozenset((i.gi, i.profile_id, i.mig_uuid) for i in g.mig_instances)
                    for g in snapshot.gpus if g.up}))
        return self._merge(snapshot, reading, time.monotonic() - started)

    def _current_gpu_ids(self) -> dict[int, int]:
        """NVML index -> DCGM gpuId of the session's mapping (the last one while the host engine
        is away), made again only when the session maps anew (discover() makes a new dict)."""
        session = self.source.session
        if session is not None and session.gpu_index and session.gpu_index is not self._gpu_ids_of:
            self._gpu_ids = {index: gpu_id for gpu_id, index in session.gpu_index.items()}
            self._gpu_ids_of = session.gpu_index
        return self._gpu_ids

    def _merge(self, snapshot: Snapshot, reading: DcgmReading, duration: float) -> Snapshot:
        gpu_ids = self._current_gpu_ids()  # the mapping may have changed since the readers were given theirs
        filled = {reader.index: reader.filled for reader in self.nvml.readers}
        gpus = []
        for gpu in snapshot.gpus:
            gpu_id = gpu_ids.get(gpu.index)
            if filled.get(gpu.index) is not gpu:  # down, timed out, or read before DCGM's values were given
                gpus.append(self._merge_gpu(gpu, reading, gpu_id))
            else:  # built with DCGM's values in place (exporter.backend.nvml_types.Supplied)
                gpus.append(gpu if gpu.dcgm_gpu_id == gpu_id else replace(gpu, dcgm_gpu_id=gpu_id))
        gpus = tuple(gpus)
        section_ok = snapshot.section_ok  # NVML's Snapshot is dropped: its mappings are only copied to change
        if reading.value_errors:
            section_ok = dict(section_ok)
            for section, _, _ in reading.value_errors:
                section_ok[section] = False
        call_errors = snapshot.call_errors
        if self.source.errors:
            call_errors = dict(call_errors)
            call_errors.update(self.source.errors)
        return replace(
            snapshot, backend=self.name, gpus=gpus, section_ok=section_ok, call_errors=call_errors,
            poll_duration_seconds=duration, sources={**snapshot.sources, **reading.sources},
            backend_reason=self.reason)

    @staticmethod
    def _merge_gpu(gpu: GpuInfo, reading: DcgmReading, gpu_id: int | None) -> GpuInfo:
        """``gpu`` with DCGM's values, as a copy: for a GPU not built with them in place (see
        _supply, which gives the same values)."""
        changes: dict = {"dcgm_gpu_id": gpu_id}  # one replace per GPU: a poll makes few copies
        if not gpu.up:
            return replace(gpu, **changes)
        device = reading.device.get(gpu.index)
        if device is not None:
            parts = device_values(device)
            changes.update(parts["values"])
            changes["clocks_hertz"] = {**gpu.clocks_hertz, **parts["clocks"]}
            changes["ecc_errors"] = parts["ecc"]
            changes["health"] = replace(gpu.health, **parts["health"])
        if gpu.index in reading.profiled:
            profiling = reading.profiling
            changes["activity"] = activity(profiling.get((gpu.index, None), _NONE))
            changes["mig_instances"] = tuple(replace(inst, activity=activity(profiling.get((gpu.index, inst.gi), _NONE)))
                                             for inst in gpu.mig_instances)
        return replace(gpu, **changes)

    @property
    def calls_last_poll(self) -> int:
        """NVML calls of the last poll (DCGM calls: ``dcgm_calls_last_poll``)."""
        return self.nvml.calls_last_poll

    @property
    def dcgm_calls_last_poll(self) -> int:
        return self.source.caller.calls_this_poll

    def close(self) -> None:
        self.source.close()
        self.nvml.close()
        self._open = False
