"""One connection to a DCGM host engine and the groups and watches the exporter made on it.

Connect: embedded host engine (``dcgmStartEmbedded``, AUTO mode: DCGM's own thread updates
the watched fields), or a running nv-hostengine over TCP or a unix socket
(``dcgmConnect_v3`` with ``tcp://``/``unix://`` strings on DCGM 4.5+, ``dcgmConnect_v2`` before).

Entities. DCGM gpuIds are matched to NVML indices by UUID (they need not be equal); DCGM's
GPU-instance entities are matched to NVML GPU-instance ids through the MIG hierarchy
(``info.nvmlInstanceId``), so every value lands on the labels the NVML backend uses.

Watches. Device fields on one group of GPU entities; profiling fields on one group per GPU
(the GPU and its GPU instances), so that one GPU's profiling failure (busy -37, not
supported) leaves the others watched. Field and group names carry the exporter's pid:
they must be unique on a host engine that other clients share.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from exporter.backend.dcgm_bindings import Bindings
from exporter.backend.dcgm_caller import FUNCTION_NOT_FOUND, PROFILING_NOT_SUPPORTED, DcgmCaller, DcgmError
from exporter.backend.dcgm_batch import Batch
from exporter.backend.dcgm_values import DEVICE_FIELDS, PROFILING_FIELDS, Decoder

FE_GPU, FE_GPU_I = 1, 4  # dcgm_fields.DCGM_FE_GPU / DCGM_FE_GPU_I
CONNECT_TIMEOUT_MS = 2000
# Samples the host engine keeps per watched field: the exporter reads only the latest.
MAX_KEEP_SAMPLES = 4


@dataclass(frozen=True)
class DcgmAddress:
    """Where nv-hostengine listens: ``kind`` "tcp" (``target`` host[:port]) or "unix" (a path)."""

    kind: str
    target: str

    @property
    def connection_string(self) -> str:
        """dcgmConnect_v3's form: tcp://host[:port] or unix:///path."""
        return f"{self.kind}://{self.target}"

    def __str__(self) -> str:
        return self.connection_string


@dataclass
class ProfilingWatch:
    """The profiling watch of one GPU: its group, fields and GPU-instance entities."""

    group: object
    fields: tuple[int, ...]
    gi_entities: dict[int, int]  # DCGM GPU-instance entity id -> NVML GPU-instance id


class DcgmSession:
    """Connected handle plus what was created on it; ``close()`` undoes both."""

    def __init__(self, bindings: Bindings, caller: DcgmCaller, address: DcgmAddress | None, interval: float,
                 update_interval: float | None = None):
        """``interval``: seconds between polls; ``update_interval``: the sampling period asked of
        the host engine for every watch (None: ``interval``; exporter.backend.choose.DcgmOptions)."""
        self.b = bindings
        self.caller = caller
        self.address = address
        self.interval = interval
        self.update_interval = interval if update_interval is None else update_interval
        self.handle = None
        self.version = ""
        self.gpu_index: dict[int, int] = {}  # DCGM gpuId -> NVML index
        self.gi_entities: dict[int, dict[int, int]] = {}  # NVML index -> {GI entity id: NVML GI id}
        self.device_group = None
        self.profiling: dict[int, ProfilingWatch] = {}  # NVML index -> its watch
        self._field_groups: dict[tuple[int, ...], object] = {}
        self._seq = itertools.count(1)
        self._decode = Decoder(bindings)
        self._batches: dict[tuple, Batch] = {}  # (entities, fields) -> its C arrays and decode plan
        self._reads = None  # what read_device/read_profiling read, worked out once per watch set

    @property
    def where(self) -> str:
        """'the embedded host engine' or 'nv-hostengine at tcp://...', for messages."""
        return "the embedded host engine" if self.address is None else f"nv-hostengine at {self.address}"

    # -- connection ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Load libdcgm and start or reach the host engine; DcgmError on failure."""
        structs = self.b.structs
        self.caller.run("_dcgmInit", structs._dcgmInit)
        self.caller.call("dcgmInit")
        if self.address is None:
            self.handle = self.caller.call("dcgmStartEmbedded", structs.DCGM_OPERATION_MODE_AUTO)
        else:
            self.handle = self._connect_remote()
        try:
            raw = self.caller.call("dcgmVersionInfo").rawBuildInfoString
            self.version = next((p[8:] for p in str(raw).split(";") if p.startswith("version:")), "")
        except DcgmError:
            self.version = ""  # old bindings: not worth failing over

    def _connect_remote(self):
        structs = self.b.structs
        if hasattr(self.b.agent, "dcgmConnect_v3") and hasattr(structs, "c_dcgmConnectV3Params_v1"):
            params = structs.c_dcgmConnectV3Params_v1()
            params.persistAfterDisconnect, params.timeoutMs = 0, CONNECT_TIMEOUT_MS
            try:
                return self.caller.call("dcgmConnect_v3", self.address.connection_string, params)
            except DcgmError as exc:
                if exc.code != FUNCTION_NOT_FOUND:
                    raise  # else: 4.5+ bindings on an older libdcgm: the v2 call below
        params = structs.c_dcgmConnectV2Params_v2()
        params.persistAfterDisconnect, params.timeoutMs = 0, CONNECT_TIMEOUT_MS
        params.addressIsUnixSocket = 1 if self.address.kind == "unix" else 0
        return self.caller.call("dcgmConnect_v2", self.address.target, params)

    def close_watches(self) -> None:
        """Destroy our groups (their watches go with them) and field groups; never raises."""
        if self.handle is None:
            return
        for watch in self.profiling.values():
            self._quietly("dcgmGroupDestroy", self.handle, watch.group)
        if self.device_group is not None:
            self._quietly("dcgmGroupDestroy", self.handle, self.device_group)
        for group in self._field_groups.values():
            self._quietly("dcgmFieldGroupDestroy", self.handle, group)
        self.profiling.clear()
        self._field_groups.clear()
        self._batches.clear()
        self._reads = None
        self.device_group = None

    def close(self) -> None:
        """Remove our groups and watches, then stop/disconnect; never raises (the engine may be gone)."""
        if self.handle is None:
            return
        self.close_watches()
        self._quietly("dcgmStopEmbedded" if self.address is None else "dcgmDisconnect", self.handle)
        self.handle = None

    def _quietly(self, fn: str, *args) -> None:
        try:
            self.caller.call(fn, *args)
        except DcgmError:
            pass

    # -- entities -------------------------------------------------------------------------------

    def discover(self, nvml_uuids: dict[str, int]) -> None:
        """Map DCGM gpuIds and GPU-instance entities to NVML indices and GPU-instance ids."""
        gpu_index = {}
        for gpu_id in self.caller.call("dcgmGetAllSupportedDevices", self.handle):
            uuid = self.caller.call("dcgmGetDeviceAttributes", self.handle, gpu_id).identifiers.uuid
            if uuid in nvml_uuids:
                gpu_index[int(gpu_id)] = nvml_uuids[uuid]
        self.gpu_index = gpu_index
        self.gi_entities = {index: {} for index in gpu_index.values()}
        self._reads = None
        try:
            hierarchy = self.caller.call("dcgmGetGpuInstanceHierarchy", self.handle)
        except DcgmError as exc:
            if exc.code != FUNCTION_NOT_FOUND:
                raise
            return  # DCGM without MIG support: GPU entities only
        for n in range(int(hierarchy.count)):
            row = hierarchy.entityList[n]
            if row.entity.entityGroupId != FE_GPU_I or row.parent.entityGroupId != FE_GPU:
                continue
            index = gpu_index.get(int(row.parent.entityId))
            if index is not None:
                self.gi_entities[index][int(row.entity.entityId)] = int(row.info.nvmlInstanceId)

    def gpu_id(self, index: int) -> int | None:
        for gpu_id, i in self.gpu_index.items():
            if i == index:
                return gpu_id
        return None

    # -- watches -------------------------------------------------------------------------------

    def _name(self, what: str) -> str:
        return f"gpushare-{os.getpid()}-{next(self._seq)}-{what}"

    def _field_group(self, fields: tuple[int, ...]):
        group = self._field_groups.get(fields)
        if group is None:
            group = self._field_groups[fields] = self.caller.call(
                "dcgmFieldGroupCreate", self.handle, list(fields), self._name("fields"))
        return group

    def _group(self, entities: list[tuple[int, int]], what: str):
        group = self.caller.call("dcgmGroupCreate", self.handle, self.b.structs.DCGM_GROUP_EMPTY, self._name(what))
        for entity_group, entity_id in entities:
            self.caller.call("dcgmGroupAddEntity", self.handle, group, entity_group, entity_id)
        return group

    def _watch(self, group, fields: tuple[int, ...]) -> None:
        period = max(0.1, self.update_interval)
        self.caller.call("dcgmWatchFields", self.handle, group, self._field_group(fields),
                         int(period * 1e6), max(10.0, 4 * period), MAX_KEEP_SAMPLES)

    def watch_device(self) -> None:
        """Watch the device fields on every mapped GPU (once per connection)."""
        if self.device_group is None and self.gpu_index:
            group = self._group([(FE_GPU, gid) for gid in sorted(self.gpu_index)], "gpus")
            self._watch(group, tuple(DEVICE_FIELDS))
            self.device_group = group
            self._reads = None

    def supported_profiling(self, index: int) -> tuple[int, ...]:
        """The profiling fields the exporter exports that GPU ``index`` has (DcgmError if unknown)."""
        groups = self.caller.call("dcgmProfGetSupportedMetricGroups", self.handle, self.gpu_id(index))
        ids = {int(groups.metricGroups[g].fieldIds[f]) for g in range(int(groups.numMetricGroups))
               for f in range(int(groups.metricGroups[g].numFieldIds))}
        return tuple(fid for fid in PROFILING_FIELDS if fid in ids)

    def watch_profiling(self, index: int, fields: tuple[int, ...]) -> None:
        """Watch ``fields`` on GPU ``index`` and its GPU instances (replacing an older watch)."""
        self.unwatch_profiling(index)
        if not fields:
            raise DcgmError("dcgmProfGetSupportedMetricGroups", PROFILING_NOT_SUPPORTED, "ProfilingNotSupported",
                            "no profiling metric the exporter uses")
        gis = dict(self.gi_entities.get(index, {}))
        entities = [(FE_GPU, self.gpu_id(index))] + [(FE_GPU_I, e) for e in sorted(gis)]
        group = self._group(entities, f"gpu{index}-profiling")
        try:
            self._watch(group, fields)
        except DcgmError:
            self._quietly("dcgmGroupDestroy", self.handle, group)
            raise
        self.profiling[index] = ProfilingWatch(group, fields, gis)
        self._reads = None

    def unwatch_profiling(self, index: int) -> None:
        old = self.profiling.pop(index, None)
        self._reads = None
        if old is not None:
            self._quietly("dcgmGroupDestroy", self.handle, old.group)

    def update_all(self) -> None:
        """Have the engine sample every watched field now (the first update otherwise waits a period)."""
        self.caller.call("dcgmUpdateAllFields", self.handle, 1)

    # -- reading -------------------------------------------------------------------------------

    def _batch(self, entities: list[tuple[int, int]], fields: tuple[int, ...]) -> Batch:
        """The C arrays and decode plan of one read set, made once per watch set (close_watches() drops them)."""
        key = (tuple(entities), fields)
        batch = self._batches.get(key)
        if batch is None:
            if len(self._batches) >= 8:  # watch sets retried over and over: keep memory bounded
                self._batches.clear()
            batch = self._batches[key] = Batch(self.b.structs, self._decode, entities, fields)
        return batch

    def _latest_values(self, entities: list[tuple[int, int]], fields: tuple[int, ...]) -> tuple[dict, dict]:
        """(values, statuses) of one read: (group, entity) -> {field: value or None}, and
        {field: DCGM_ST_*} for the values that failed (dcgm_batch.Batch.decode)."""
        return self._read_batch(self._batch(entities, fields))

    def _read_batch(self, batch: Batch) -> tuple[dict, dict]:
        self.caller.run("dcgmEntitiesGetLatestValues", self._get_latest, batch)
        return batch.decode()

    def _get_latest(self, batch: Batch):
        """What dcgm_agent.dcgmEntitiesGetLatestValues does (the symbol from _dcgmGetFunctionPointer,
        arguments as it passes them, _dcgmCheckReturn), on arrays made once instead of per call.

        Reusing the values array is safe: on success libdcgm writes every element (it fails
        unless it has entities x fields values; NVIDIA/DCGM dcgmlib/src/DcgmApi.cpp,
        tsapiEntitiesGetLatestValues), and the elements are decoded before the next call."""
        structs = self.b.structs
        fn = structs._dcgmGetFunctionPointer("dcgmEntitiesGetLatestValues")
        ret = fn(self.handle, batch.pairs, batch.c_entities, batch.field_ids, batch.c_fields, 0, batch.values)
        structs._dcgmCheckReturn(ret)
        return batch.values

    def _read_sets(self):
        """(device, profiling) read sets, each (entities, fields, [(DCGM entity, key in the result)]);
        worked out when the watches or the entity mapping change, not every poll."""
        reads = self._reads
        if reads is not None and reads[0] is self.gpu_index:
            return reads[1], reads[2]
        device = None
        if self.device_group is not None:
            device = ([(FE_GPU, gid) for gid in sorted(self.gpu_index)], tuple(DEVICE_FIELDS),
                      [((FE_GPU, gid), index) for gid, index in self.gpu_index.items()])
        by_fields: dict[tuple[int, ...], list[int]] = {}
        for index, watch in self.profiling.items():
            by_fields.setdefault(watch.fields, []).append(index)
        profiling = []
        for fields, indices in sorted(by_fields.items()):
            entities = []
            for index in sorted(indices):
                entities.append((FE_GPU, self.gpu_id(index)))
                entities += [(FE_GPU_I, e) for e in sorted(self.profiling[index].gi_entities)]
            keys = []
            for index in indices:
                keys.append(((FE_GPU, self.gpu_id(index)), (index, None)))
                keys += [((FE_GPU_I, entity), (index, gi)) for entity, gi in self.profiling[index].gi_entities.items()]
            profiling.append((entities, fields, keys))
        self._reads = (self.gpu_index, device, profiling)
        return device, profiling

    def _read(self, read_set, values: dict, statuses: dict) -> None:
        entities, fields, keys = read_set
        raw, failed = self._read_batch(self._batch(entities, fields))
        for entity, key in keys:
            values[key] = raw.get(entity, {})
            if failed and entity in failed:
                statuses[key] = failed[entity]

    def read_device(self) -> tuple[dict[int, dict], dict[int, dict[int, int]]]:
        """(values, statuses): NVML index -> {field id: value or None} for every watched GPU, and
        {field id: DCGM_ST_*} for the fields that failed."""
        values: dict = {}
        statuses: dict = {}
        device = self._read_sets()[0]
        if device is not None:
            self._read(device, values, statuses)
        return values, statuses

    def read_profiling(self) -> tuple[dict[tuple[int, int | None], dict], dict]:
        """(values, statuses) keyed (NVML index, GI id or None for the GPU), for watched GPUs."""
        values: dict = {}
        statuses: dict = {}
        for read_set in self._read_sets()[1]:
            self._read(read_set, values, statuses)
        return values, statuses
