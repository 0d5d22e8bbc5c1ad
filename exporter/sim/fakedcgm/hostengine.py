"""The simulated libdcgm: DCGM's C API answered from a Simulation, for the fake bindings.

``FakeDcgmLib`` plays the role of ``libdcgm.so.4``: ``dcgm_structs._dcgmGetFunctionPointer``
looks its C symbols up by name, the wrappers call them with ctypes arguments (byref outputs,
caller-allocated arrays) and check the returned DCGM_ST_* code. Two kinds of host engine:

- embedded (``dcgmStartEmbedded``): one per start, gone at ``dcgmStopEmbedded``;
- standalone (``dcgmConnect_v2``/``_v3``): the simulated nv-hostengine, reachable at any
  address; every restart (a ``hostengine_down`` or ``version_mismatch`` fault) drops its
  groups and watches and invalidates existing connections (-21).

Updates. Like a host engine in AUTO mode, an engine keeps the latest sample of every
watched field. The simulation has no engine thread: an entity's fields are updated when
they are read and at least half an update period has passed since its last update (or by
``dcgmUpdateAllFields``). Device fields are sampled at that instant; profiling fields are
the mean over the time since the previous update (blank for the first, empty, window).
Scenario faults: exporter/sim/fakedcgm/spec.py; field values: fieldtable.py (written into the
caller's array: valuewriter.py); groups, watches
and values: hostwatch.py.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from exporter.sim.fakedcgm import fieldtable
from exporter.sim.fakedcgm.hostwatch import WatchCalls
from exporter.sim.fakedcgm.spec import DcgmSpec

OK, BADPARAM, NOT_SUPPORTED, VER_MISMATCH, CONNECTION_NOT_VALID, REQUIRES_ROOT = 0, -1, -6, -12, -21, -29
MODULE_NOT_LOADED, PROFILING_NOT_SUPPORTED = -33, -36
FE_GPU, FE_GPU_I, FE_GPU_CI = 1, 4, 5
NO_CI = 0xFFFFFFFF  # nvmlComputeInstanceId of a GPU-instance row (-1 in an unsigned field)


def _value(arg) -> int:
    raw = getattr(arg, "value", arg)
    return int(raw or 0)


def _text(arg) -> str:
    raw = getattr(arg, "value", arg)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass
class _Engine:
    """One host engine's state: groups, field groups, watches and the latest samples."""

    kind: str  # "embedded" | "standalone"
    generation: int
    groups: dict = field(default_factory=dict)  # id -> (name, [(entity group, entity id)], owner)
    field_groups: dict = field(default_factory=dict)  # id -> (name, (field ids), owner)
    watches: dict = field(default_factory=dict)  # (group id, field group id) -> (period s, owner)
    samples: dict = field(default_factory=dict)  # (eg, eid, fid) -> hostwatch.Sample
    updated: dict = field(default_factory=dict)  # (eg, eid) -> virtual time of its last update
    ids: itertools.count = field(default_factory=lambda: itertools.count(101))

    def drop_owned(self, owner: int) -> None:
        """Forget what connection ``owner`` created (it disconnected without persisting)."""
        for table in (self.groups, self.field_groups):
            for key in [k for k, v in table.items() if v[-1] == owner]:
                del table[key]
        self.drop_dangling_watches()

    def drop_dangling_watches(self) -> None:
        for key in [k for k in self.watches if k[0] not in self.groups or k[1] not in self.field_groups]:
            del self.watches[key]


@dataclass(frozen=True)
class _Handle:
    engine: _Engine
    generation: int


class FakeDcgmLib:
    """Drop-in for the loaded libdcgm: ``lib.<C symbol>(*ctypes args)`` -> DCGM_ST_* code.

    Every call is counted in ``call_counts`` and runs under the simulation's lock. A symbol
    the simulated DCGM version lacks raises AttributeError, as a missing C symbol would.
    """

    def __init__(self, sim, spec: DcgmSpec):
        self.sim = sim
        self.spec = spec
        self.call_counts: Counter = Counter()
        self._impl = HostEngine(sim, spec)
        self._symbols: dict = {}

    def __getattr__(self, name: str):
        if not name.startswith("dcgm") or not callable(getattr(HostEngine, name, None)) or (
                name == "dcgmConnect_v3" and self.spec.version_tuple < (4, 5)):  # added in DCGM 4.5
            raise AttributeError(f"simulated libdcgm {self.spec.version} has no symbol {name!r}")
        symbol = self._symbols.get(name)
        if symbol is None:
            method = getattr(self._impl, name)
            lib = self

            def symbol(*args):
                return lib.invoke(name, method, args)
            symbol.__name__ = name
            self._symbols[name] = symbol
        return symbol

    def invoke(self, name: str, method, args: tuple):
        """One call of C symbol ``name``: everything the library does for it. The bindings cache
        the symbols (dcgm_structs), so a wrapper around every call of the library (bench/
        dcgm_bench.py's host-engine timer) replaces this method, not the look-up."""
        with self.sim._lock:
            self.call_counts[name] += 1
            return method(*args)

    def update_due(self) -> None:
        """The host engine's update thread at this instant (hostwatch.WatchCalls.update_due); a
        simulator hook, not a C symbol, so it is not counted as a call."""
        with self.sim._lock:
            self._impl.update_due()


class HostEngine(WatchCalls):
    """The C API's implementation: handles, engines, discovery (values: hostwatch.WatchCalls)."""

    def __init__(self, sim, spec: DcgmSpec):
        self.sim = sim
        self.spec = spec
        self._handles: dict[int, _Handle] = {}
        self._handle_ids = itertools.count(0x1000)
        self._standalone: _Engine | None = None
        self._unsupported = frozenset(spec.unsupported_fields)
        self._gpm: dict[int, bool] = {}  # GPU index -> its model has GPM (_gpu_has_gpm)
        self._supported: dict[int, tuple[int, ...]] = {}  # GPU index -> _profiling_supported
        self._rows = None  # (epochs, hierarchy rows, (entity group, id) -> (gpu, instance))
        order = spec.gpu_ids or tuple(sorted(sim.engine.gpus))
        self._gpu_of_id = dict(zip(order, sorted(sim.engine.gpus)))
        self._id_of_gpu = {gpu: gid for gid, gpu in self._gpu_of_id.items()}

    # -- time, faults, engines ----------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.sim.engine.now

    def _fault(self, kind: str) -> bool:
        if kind == "profiling_module_missing" and not self.spec.profiling_module:
            return True
        return any(f.kind == kind and f.active(self.now) for f in self.spec.faults)

    def _generation(self, kind: str = "standalone") -> int:
        """Restarts of a host engine of ``kind`` so far: each down window starts one; an engine
        swap (version_mismatch: its start and its end) restarts nv-hostengine only, never an
        engine embedded in the exporter (docs/scenarios.md)."""
        swaps = ("version_mismatch",) if kind == "standalone" else ()
        marks = [f.start for f in self.spec.faults if f.kind == "hostengine_down" or f.kind in swaps]
        marks += [f.until for f in self.spec.faults if f.kind in swaps and f.until is not None]
        return sum(1 for t in marks if t <= self.now)

    def _engine(self, handle_arg) -> _Engine | int:
        """The engine behind a handle, or the status its calls fail with now."""
        handle = self._handles.get(_value(handle_arg))
        if handle is None:
            return BADPARAM
        if self._fault("hostengine_down"):
            return CONNECTION_NOT_VALID
        if handle.engine.kind == "standalone" and self._fault("version_mismatch"):
            return VER_MISMATCH
        if handle.generation != self._generation(handle.engine.kind):
            return CONNECTION_NOT_VALID  # the engine restarted: this connection is gone
        return handle.engine

    def _new_handle(self, engine: _Engine, ref) -> int:
        handle_id = next(self._handle_ids)
        self._handles[handle_id] = _Handle(engine, engine.generation)
        ref._obj.value = handle_id
        return OK

    def _mig_gpus(self) -> list[int]:
        return [gpu for gpu in self.sim.engine.gpus if self.sim.engine.epoch(gpu).mig_enabled]

    # -- lifetime and connections -----------------------------------------------------------

    def dcgmInit(self, ref):
        return OK

    def dcgmShutdown(self):
        return OK

    def dcgmStartEmbedded(self, op_mode, ref):
        if _value(op_mode) not in (1, 2):
            return BADPARAM
        if self._fault("hostengine_down"):
            return CONNECTION_NOT_VALID
        if not self.spec.root and self._mig_gpus():
            return REQUIRES_ROOT  # the cache manager cannot read MIG state without root
        return self._new_handle(_Engine("embedded", self._generation("embedded")), ref)

    def dcgmStopEmbedded(self, handle):
        return OK if self._handles.pop(_value(handle), None) is not None else BADPARAM

    def _connect(self, ref):
        if self._fault("hostengine_down"):
            return CONNECTION_NOT_VALID
        if self._fault("version_mismatch"):
            return VER_MISMATCH
        generation = self._generation()
        if self._standalone is None or self._standalone.generation != generation:
            self._standalone = _Engine("standalone", generation)  # (re)started: no groups, no watches
        return self._new_handle(self._standalone, ref)

    def dcgmConnect_v2(self, address, params, ref):
        if not _text(address) or params._obj.version >> 24 != 2:
            return BADPARAM
        return self._connect(ref)

    def dcgmConnect_v3(self, connection, params, ref):
        if not _text(connection).startswith(("tcp://", "unix://", "vsock://")) or params._obj.version >> 24 != 1:
            return BADPARAM
        return self._connect(ref)

    def dcgmDisconnect(self, handle):
        entry = self._handles.pop(_value(handle), None)
        if entry is None:
            return BADPARAM
        entry.engine.drop_owned(_value(handle))  # persistAfterDisconnect=0
        return OK

    def dcgmVersionInfo(self, ref):
        ref._obj.rawBuildInfoString = f"version:{self.spec.version};arch:x86_64;buildtype:Release;simulated:1"
        return OK

    # -- discovery ------------------------------------------------------------------------------

    def _gpu_ids(self, handle, ids, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        for n, gpu_id in enumerate(sorted(self._gpu_of_id)):
            ids[n] = gpu_id
        ref._obj.value = len(self._gpu_of_id)
        return OK

    def dcgmGetAllSupportedDevices(self, handle, ids, ref):
        return self._gpu_ids(handle, ids, ref)

    def dcgmGetAllDevices(self, handle, ids, ref):
        return self._gpu_ids(handle, ids, ref)

    def dcgmGetDeviceAttributes(self, handle, gpu_id, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        gpu = self._gpu_of_id.get(_value(gpu_id))
        if gpu is None:
            return BADPARAM
        spec, model, attributes = self.sim.engine.gpus[gpu], self.sim.engine.models[gpu], ref._obj
        ids = attributes.identifiers
        ids.uuid, ids.pciBusId = spec.uuid, spec.pci_bus_id
        ids.deviceName = spec.product_name or model.nvml_name
        ids.driverVersion = self.sim.engine.scenario.driver_version
        ids.pciDeviceId = model.pci_device_id
        attributes.powerLimits.enforcedPowerLimit = int(model.power_limit_watts)
        return OK

    def _hierarchy_rows(self, engine: _Engine):
        """(entity group, entity id, parent group, parent id, gpu, instance) rows, GIs and CIs."""
        if engine.kind == "embedded" and not self.spec.root:
            return []  # a non-root engine could not read MIG state (and did not start with it on)
        epochs = tuple(self.sim.engine.epoch(gpu) for gpu in sorted(self.sim.engine.gpus))
        if self._rows is None or self._rows[0] != epochs:  # the layout changes only at reconfigures
            rows = self._build_rows()
            self._rows = (epochs, rows, {(r[0], r[1]): (r[4], r[5]) for r in rows})
        return self._rows[1]

    def _build_rows(self):
        rows = []
        for gpu in sorted(self.sim.engine.gpus):
            epoch = self.sim.engine.epoch(gpu)
            if not epoch.mig_enabled:
                continue
            gpu_id = self._id_of_gpu[gpu]
            max_gpcs = self.sim.engine.models[gpu].max_mig_devices or 8
            # DCGM numbers a GPU's instances in profile order, then instance order.
            ordered = sorted(epoch.instances, key=lambda i: (i.profile.enum_index, i.gi))
            for k, inst in enumerate(ordered):
                gi_entity = gpu_id * max_gpcs + k
                rows.append((FE_GPU_I, gi_entity, FE_GPU, gpu_id, gpu, inst))
                rows.append((FE_GPU_CI, gpu_id * max_gpcs + k, FE_GPU_I, gi_entity, gpu, inst))
        return rows

    def dcgmGetGpuInstanceHierarchy(self, handle, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        out = ref._obj
        if out.version >> 24 != 2:
            return VER_MISMATCH
        rows = self._hierarchy_rows(engine)
        for n, (eg, eid, pg, pid, gpu, inst) in enumerate(rows):
            entry = out.entityList[n]
            entry.entity.entityGroupId, entry.entity.entityId = eg, eid
            entry.parent.entityGroupId, entry.parent.entityId = pg, pid
            info = entry.info
            info.gpuUuid = self.sim.engine.gpus[gpu].uuid
            info.nvmlGpuIndex, info.nvmlInstanceId = gpu, inst.gi
            info.nvmlComputeInstanceId = NO_CI if eg == FE_GPU_I else inst.ci
            info.nvmlMigProfileId, info.nvmlProfileSlices = inst.profile.profile_id, inst.profile.slice_count
        out.count = len(rows)
        return OK

    def _resolve(self, engine: _Engine, eg: int, eid: int):
        """(gpu, instance or None) of an entity, or None when it does not exist (now)."""
        if eg == FE_GPU:
            gpu = self._gpu_of_id.get(eid)
            return None if gpu is None else (gpu, None)
        if eg in (FE_GPU_I, FE_GPU_CI) and self._hierarchy_rows(engine):
            return self._rows[2].get((eg, eid))
        return None

    def _gpu_has_gpm(self, gpu: int) -> bool:
        has = self._gpm.get(gpu)
        if has is None:  # a GPU's model is fixed for the simulation's life
            has = self._gpm[gpu] = self.sim.engine.models[gpu].gpm_supported
        return has

    def _profiling_supported(self, gpu: int) -> tuple[int, ...]:
        """fieldtable.profiling_supported for ``gpu``: its model and the scenario's unsupported
        fields are fixed for the simulation's life, so it is worked out once per GPU."""
        supported = self._supported.get(gpu)
        if supported is None:
            supported = self._supported[gpu] = fieldtable.profiling_supported(self.sim, gpu, self._unsupported)
        return supported

    def dcgmProfGetSupportedMetricGroups(self, handle, ref):
        engine = self._engine(handle)
        if isinstance(engine, int):
            return engine
        msg = ref._obj
        gpu = self._gpu_of_id.get(msg.gpuId)
        if gpu is None:
            return BADPARAM
        if self._fault("profiling_module_missing"):
            return MODULE_NOT_LOADED  # the request is served by the profiling module
        supported = self._profiling_supported(gpu)
        if not supported:
            return PROFILING_NOT_SUPPORTED
        group = msg.metricGroups[0]
        group.majorId, group.minorId, group.numFieldIds = 0, 0, len(supported)
        for n, field_id in enumerate(supported):
            group.fieldIds[n] = field_id
        msg.numMetricGroups = 1
        return OK
