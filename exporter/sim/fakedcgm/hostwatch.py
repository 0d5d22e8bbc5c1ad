"""The simulated libdcgm, part 2: groups, field groups, watches, updates and latest values.

A mixin of exporter.sim.fakedcgm.hostengine.FakeDcgmLib (which resolves handles, entities
and faults). See that module for the update model.
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.sim.fakedcgm import fieldtable
from exporter.sim.fakedcgm.valuewriter import FP64_BLANK as _FP64_BLANK
from exporter.sim.fakedcgm.valuewriter import INT64_BLANK as _INT64_BLANK
from exporter.sim.fakedcgm.valuewriter import ValueWriter
from exporter.sim.faults import call_matches

OK, BADPARAM, NOT_SUPPORTED, NVML_ERROR, UNKNOWN_FIELD = 0, -1, -6, -8, -13
NO_DATA_STATUS, NOT_WATCHED, GPU_IS_LOST, DUPLICATE_KEY = -14, -16, -18, -26
MODULE_NOT_LOADED, PROFILING_LIBRARY_ERROR, INSTANCE_NOT_FOUND = -33, -37, -45
FE_GPU = 1
# Blank sentinels (dcgmvalue): the type's BLANK plus an offset.
NO_DATA, NOT_FOUND, NOT_SUPPORTED_BLANK = 0, 1, 2
_STR_BLANKS = ("<<<NULL>>>", "<<<NOT_FOUND>>>", "<<<NOT_SUPPORTED>>>")


class Sample(NamedTuple):
    """The latest value of one (entity, field) in an engine's cache (a tuple: an engine makes
    one per watched field and update)."""

    t: float | None  # virtual time it was taken; None: never
    value: object = None  # None: blank
    blank: int = NO_DATA  # which blank sentinel when value is None
    status: int = OK


EMPTY = Sample(None)


def _value(arg) -> int:
    raw = getattr(arg, "value", arg)
    return int(raw or 0)


def _text(arg) -> str:
    raw = getattr(arg, "value", arg)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class WatchCalls:
    """Group, watch and value calls; every method returns a DCGM_ST_* code."""

    # -- groups -----------------------------------------------------------------------------------

    def dcgmGroupCreate(self, handle, group_type, name, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        if _value(group_type) != 1:  # DCGM_GROUP_EMPTY: the only kind the simulation has
            return NOT_SUPPORTED
        group_id = next(engine.ids)
        engine.groups[group_id] = (_text(name), [], _value(handle))
        ref._obj.value = group_id
        return OK

    def dcgmGroupDestroy(self, handle, group_id):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        if engine.groups.pop(_value(group_id), None) is None:
            return BADPARAM
        engine.drop_dangling_watches()
        return OK

    def dcgmGroupAddEntity(self, handle, group_id, eg, eid):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        group = engine.groups.get(_value(group_id))
        if group is None or self._resolve(engine, _value(eg), _value(eid)) is None:
            return BADPARAM
        group[1].append((_value(eg), _value(eid)))
        return OK

    def dcgmFieldGroupCreate(self, handle, count, ids_ref, name, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        field_ids = tuple(int(v) for v in ids_ref._obj[:_value(count)])
        if not field_ids:
            return BADPARAM
        if any(f not in fieldtable.FIELDS for f in field_ids):
            return UNKNOWN_FIELD
        if any(v[0] == _text(name) for v in engine.field_groups.values()):
            return DUPLICATE_KEY  # field group names are unique per host engine
        group_id = next(engine.ids)
        engine.field_groups[group_id] = (_text(name), field_ids, _value(handle))
        ref._obj.value = group_id
        return OK

    def dcgmFieldGroupDestroy(self, handle, group_id):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        if engine.field_groups.pop(_value(group_id), None) is None:
            return BADPARAM
        engine.drop_dangling_watches()
        return OK

    # -- watches ----------------------------------------------------------------------------------

    def dcgmWatchFields(self, handle, group_id, field_group_id, update_us, max_age, max_samples):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        group = engine.groups.get(_value(group_id))
        fields = engine.field_groups.get(_value(field_group_id))
        if group is None or fields is None or _value(update_us) <= 0:
            return BADPARAM
        profiling = [f for f in fields[1] if f in fieldtable.PROFILING]
        gpus = sorted({r[0] for r in (self._resolve(engine, *e) for e in group[1]) if r})
        for gpu in gpus if profiling else ():
            status = self._profiling_watch_status(gpu, profiling)
            if status != OK:
                return status
        engine.watches[(_value(group_id), _value(field_group_id))] = (_value(update_us) / 1e6, _value(handle))
        for entity in group[1]:
            engine.updated.setdefault(entity, self.now)  # the first profiling window starts here
        return OK

    def _profiling_watch_status(self, gpu: int, profiling: list[int]) -> int:
        if not self._gpu_has_gpm(gpu):  # Hopper+ reads these through NVML GPM, no profiling module
            if self._fault("profiling_module_missing"):
                return MODULE_NOT_LOADED
            if self._fault("profiling_lock"):
                return PROFILING_LIBRARY_ERROR
        supported = self._profiling_supported(gpu)
        return OK if all(f in supported for f in profiling) else NOT_SUPPORTED

    def dcgmUnwatchFields(self, handle, group_id, field_group_id):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        engine.watches.pop((_value(group_id), _value(field_group_id)), None)
        return OK

    def dcgmUpdateAllFields(self, handle, wait):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        for entity in sorted({e for group_id, _ in engine.watches for e in engine.groups[group_id][1]}):
            self._update(engine, entity, force=True)
        return OK

    def update_due(self) -> None:
        """What a host engine's own update thread does at this instant (AUTO mode, nv-hostengine):
        sample every watched entity whose update is due. Not a C symbol. The simulation has no
        engine thread: reads sample lazily, at the same instant and by the same rule (_update), so
        calling this before a read gives the same values and only moves the sampling out of the
        read, as a real engine does it apart from its clients' calls (bench/dcgm_pairs.py
        --engine-thread). Engines that cannot run now (down, restarted, swapped) are left alone."""
        engines = {}
        for handle_id in list(self._handles):
            engine = self._engine(handle_id)
            if not isinstance(engine, int):
                engines[id(engine)] = engine
        for engine in engines.values():
            for entity in sorted({e for group_id, _ in engine.watches for e in engine.groups[group_id][1]}):
                self._update(engine, entity, force=False)

    # -- updates ----------------------------------------------------------------------------------

    def _watched(self, engine, entity: tuple[int, int]) -> tuple[set[int], float | None]:
        """Fields watched for ``entity`` and the shortest update period among those watches."""
        fields: set[int] = set()
        period = None
        for (group_id, fg_id), (seconds, _) in engine.watches.items():
            if entity in engine.groups[group_id][1]:
                fields.update(engine.field_groups[fg_id][1])
                period = seconds if period is None else min(period, seconds)
        return fields, period

    def _update(self, engine, entity: tuple[int, int], force: bool, watched=None) -> None:
        """Sample every watched field of ``entity`` if an update is due (see hostengine).
        ``watched``: ``_watched(engine, entity)`` when the caller has it already."""
        fields, period = watched or self._watched(engine, entity)
        resolved = self._resolve(engine, *entity)
        now, last = self.now, engine.updated.get(entity)
        if not fields or resolved is None or not (force or last is None or now - last >= 0.5 * period):
            return
        gpu, inst = resolved
        window = None
        if last is not None and now > last and any(f in fieldtable.PROFILING for f in fields):
            window = fieldtable.profiling_window(self.sim, gpu, inst, last, now)
        # What every field of this update shares: the scenario's NVML faults on this GPU now, and
        # whether DCGM can profile it now (looked up once per update, not once per field).
        faults = [f for f in self.sim.engine.faults if f.active(now) and f.gpu in (None, gpu)]
        gpm = self._gpu_has_gpm(gpu)
        blanked = not gpm and (self._fault("profiling_lock") or self._fault("profiling_module_missing"))
        supported = self._profiling_supported(gpu)
        samples = engine.samples
        for fid in fields:
            key = (*entity, fid)
            samples[key] = self._sample(fid, gpu, inst, window, samples.get(key, EMPTY), faults, gpm, blanked,
                                        supported)
        engine.updated[entity] = now

    def _sample(self, fid: int, gpu: int, inst, window, previous: Sample, faults, gpm: bool, blanked: bool,
                supported) -> Sample:
        fd, now = fieldtable.FIELDS[fid], self.now
        if inst is not None and fd.level == fieldtable.GPU:
            # A GPU-level field asked on a GPU instance is remapped to the parent GPU: the
            # device's value, repeated per instance (DcgmCacheManager.cpp "DCGM_FE_GPU_I or
            # DCGM_FE_GPU_CI - remap to parent GPU", shared/reference/nvml_facts.md).
            inst = None
        if faults:
            failed = self._nvml_fault(fid, faults, gpm)
            if failed is not None:
                return failed
        if fid not in fieldtable.PROFILING:
            value = fd.read(self.sim, gpu, inst, now)
            return Sample(now, value, NOT_SUPPORTED_BLANK if value is None else NO_DATA)
        if fid not in supported:
            return Sample(now, blank=NOT_SUPPORTED_BLANK)
        if blanked:
            return Sample(now)  # DCGM stores blanks while it cannot profile
        if window is None:  # no interval to average over yet
            return previous if previous.t is not None else Sample(now)
        return Sample(now, window[fid])

    def _nvml_fault(self, fid: int, faults: list, gpm: bool) -> Sample | None:
        """A blank with an error status when the NVML call DCGM makes for ``fid`` fails now;
        ``faults``: the scenario's fault windows active now on this GPU (or on every GPU)."""
        now = self.now
        symbol = fieldtable.FIELDS[fid].nvml
        if fid in fieldtable.PROFILING and gpm:
            symbol = "nvmlGpmSampleGet"
        for fault in faults:
            if fault.call == "*" or (symbol is not None and call_matches(fault.call, symbol)):
                if fault.error == "NotSupported":
                    return Sample(now, blank=NOT_SUPPORTED_BLANK)
                if fault.error != "Success":  # "Success" faults only delay NVML, not DCGM's cache
                    return Sample(now, blank=NOT_FOUND, status=GPU_IS_LOST if fault.error == "GpuIsLost" else NVML_ERROR)
        return None

    # -- latest values ----------------------------------------------------------------------------

    def _lookup(self, engine, eg: int, eid: int, fid: int, watched_fields=None) -> Sample:
        if fid not in fieldtable.FIELDS:
            return Sample(None, status=UNKNOWN_FIELD)
        if self._resolve(engine, eg, eid) is None:
            return Sample(None, status=BADPARAM if eg == FE_GPU else INSTANCE_NOT_FOUND)
        if fid not in (self._watched(engine, (eg, eid))[0] if watched_fields is None else watched_fields):
            return Sample(None, status=NOT_WATCHED)
        return engine.samples.get((eg, eid, fid), EMPTY)

    def _fill(self, out, sample: Sample, fid: int) -> None:
        fd = fieldtable.FIELDS.get(fid)
        kind = fd.type if fd else "i"
        out.fieldId, out.fieldType, out.status = fid, ord(kind), sample.status
        out.ts = 0 if sample.t is None else int(round((self.sim.boot_time + sample.t) * 1_000_000))
        if kind == "s":
            out.value.str = _STR_BLANKS[sample.blank] if sample.value is None else str(sample.value)
        elif kind == "d":
            out.value.dbl = _FP64_BLANK + sample.blank if sample.value is None else float(sample.value)
        else:
            out.value.i64 = _INT64_BLANK + sample.blank if sample.value is None else int(sample.value)

    def dcgmEntitiesGetLatestValues(self, handle, pairs, count, field_ids, field_count, flags, values):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        entities = [(pairs[n].entityGroupId, pairs[n].entityId) for n in range(_value(count))]
        fids = [int(field_ids[n]) for n in range(_value(field_count))]
        watched = {entity: self._watched(engine, entity) for entity in dict.fromkeys(entities)}
        for entity, fields in watched.items():
            self._update(engine, entity, force=bool(_value(flags) & 1), watched=fields)  # DCGM_FV_FLAG_LIVE_DATA
        writer = ValueWriter.of(values)
        boot = self.sim.boot_time
        for n, (eg, eid) in enumerate(entities):
            fields = watched[(eg, eid)][0]
            for m, fid in enumerate(fids):
                sample = self._lookup(engine, eg, eid, fid, fields)
                if writer is None or not writer.write(n * len(fids) + m, eg, eid, fid, sample, boot):
                    out = values[n * len(fids) + m]
                    out.version, out.entityGroupId, out.entityId = (2 << 24) | 0, eg, eid
                    self._fill(out, sample, fid)
        return OK

    def dcgmEntityGetLatestValues(self, handle, eg, eid, field_ids, field_count, values):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        entity = (_value(eg), _value(eid))
        self._update(engine, entity, force=False)
        for m in range(_value(field_count)):
            out = values[m]
            out.version = 1 << 24
            self._fill(out, self._lookup(engine, *entity, int(field_ids[m])), int(field_ids[m]))
        return OK

