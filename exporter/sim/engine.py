"""Event-driven simulation of GPU memory over virtual time: OOM kills, MPS, MIG reconfigures.

Pure Python, no ctypes: exporter.sim.fakelib turns this state into NVML answers.

Memory model. Every process's memory is a piecewise-linear timeline (bytes); it is alive
on [start, end) unless killed. A device is a whole GPU (capacity = total - reserved) or a
MIG instance (capacity = its profile's memory). Between two breakpoints (any timeline point,
start, end or event) every demand is linear, so the first instant the sum on a device
exceeds its capacity is solved exactly. At that instant the process that "just grew" is
killed: it jumped up at that instant (a start or a step), else the largest slope; ties go to
the latest start, then the highest pid. The result does not depend on how ``advance_to`` is
stepped: all state is a function of the scenario and the instants already passed.

MPS. A device with ``mps`` (or with a process that says ``mps_client: true``) gets an
``nvidia-cuda-mps-server`` process using 60 MiB from its first client's start until the
device goes away: like the real server, it stays up once spawned. Its pid is
100000 + 10000*generation + 100*gpu + slot (slot 0 = whole GPU, GI id + 1 for a MIG
instance); scenarios must not use those pids. An ``mps_restart`` event starts a new
generation (new pid) and kills every client that was already running (the fault is
reported to all clients); those kills are listed in ``mps_fault_events``, not counted as
OOM. A client whose CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for its device (resolved from its
environment as the exporter resolves it: setup.client_environ, procinfo.mps_memory_limit) is
exceeded is killed at that instant ("mps_pinned_limit"); that is an allocation failure and
counts as an OOM kill.
"""

from __future__ import annotations

import bisect
from collections import Counter

from exporter.catalog import MIB, GpuModel
from exporter.errors import UserError
from exporter.sim.mig_layout import Epoch, LayoutBuilder, epoch_at
from exporter.sim.model import Scenario, gpu_model
from exporter.sim.piecewise import left_value, slope_after, timeline_value, value_slope
from exporter.sim.setup import build_processes, resolve_events
from exporter.sim.state import INF, Device, DeviceKey, Lifecycle, OomEvent, Proc
from exporter.sim.telemetry import Telemetry


class Engine:
    """All simulated state; ``now`` only moves forward through ``advance_to``."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.now = 0.0
        self._alive_cache = None  # see _alive_now()
        where = scenario.source or scenario.name
        self.gpus = {g.index: g for g in scenario.gpus}
        self.models: dict[int, GpuModel] = {}
        for g in scenario.gpus:
            try:
                self.models[g.index] = gpu_model(g)
            except KeyError as exc:
                raise UserError(f"{where}: gpus[{g.index}].model: {exc.args[0]}") from None
        builder = LayoutBuilder(where)
        by_time = sorted(scenario.events, key=lambda e: e.at)
        self.epochs: dict[int, list[Epoch]] = {
            i: builder.epochs(g, self.models[i], [
                e for e in by_time if e.gpu == i and (
                    e.kind == "mig_reconfigure" or (e.kind == "gpu_reset" and e.mig is not None))])
            for i, g in self.gpus.items()}
        self.lifecycle = Lifecycle(scenario, by_time)
        self.devices: dict[DeviceKey, Device] = {}
        for i, epochs in self.epochs.items():
            for ep in epochs:
                for inst in ep.instances:
                    self.devices[(i, inst.serial)] = Device(
                        (i, inst.serial), inst, inst.profile.memory_mib * MIB, inst.uuid)
            self.devices[(i, 0)] = Device((i, 0), None, self.models[i].memory_capacity_bytes,
                                          self.gpus[i].uuid)
        self.procs: list[Proc] = build_processes(self, where)
        # The process list is fixed once built (kills only set killed_at), and alive() is asked
        # dozens of times per simulated NVML call: index it by pid, GPU and device once.
        self._by_pid = sorted(self.procs, key=lambda p: p.pid)
        self._pinned = [p for p in self._by_pid if p.pinned_limit is not None]
        self._by_gpu: dict[int, list[Proc]] = {}
        self._by_device: dict[DeviceKey, list[Proc]] = {}
        for p in self._by_pid:
            self._by_gpu.setdefault(p.gpu, []).append(p)
            self._by_device.setdefault(p.device, []).append(p)
        self.mps_events, self.xids, self.faults = resolve_events(self, by_time, where)
        self._alive_cache = None
        self._breaks = sorted({t for t in self._all_instants() if t != INF and t != -INF})
        self.now = 0.0
        self._settled_at: float | None = None
        self.energy_j: dict[int, float] = {i: 0.0 for i in self.gpus}
        self.oom_events: list[OomEvent] = []
        self.mps_fault_events: list[OomEvent] = []
        self.oom_kills: Counter = Counter()
        self.telemetry = Telemetry(self)
        self.advance_to(0.0)

    # --- queries -----------------------------------------------------------------------

    @property
    def restarts(self) -> list[tuple[float, DeviceKey]]:
        """(time, device) of every MPS server restart (mps_events holds deaths too)."""
        return [(at, key) for at, key, kind in self.mps_events if kind == "mps_restart"]

    def epoch(self, gpu: int, t: float | None = None) -> Epoch:
        return epoch_at(self.epochs[gpu], self.now if t is None else t)

    def alive(self, t: float | None = None, gpu: int | None = None,
              device: DeviceKey | None = None) -> list[Proc]:
        """Processes alive at t (default now), optionally on one GPU or device, by pid."""
        t = self.now if t is None else t
        if t != self.now:  # another instant (a GPM average's midpoints, a telemetry read back in time)
            pool = self._by_device.get(device, ()) if device is not None else (
                self._by_gpu.get(gpu, ()) if gpu is not None else self._by_pid)
            return [p for p in pool if p.alive(t) and (gpu is None or p.gpu == gpu)]
        cache = self._alive_now()
        if device is None:
            return list(cache[1] if gpu is None else cache[2].get(gpu, ()))
        if gpu is None:
            return list(cache[2].get(device, ()))
        return [p for p in cache[2].get(device, ()) if p.gpu == gpu]

    def _alive_now(self) -> tuple:
        """(now, processes alive now by pid, the same by device and by GPU, device loads).

        The instant ``now`` is asked about dozens of times (each step of advance_to, each simulated
        NVML call): its alive processes are kept, grouped by device (a tuple key) and by GPU (an int
        key) in pid order as the pools are, until a kill or a step changes them. One tuple, replaced
        whole, so a reader never sees the lists of another instant."""
        cache = self._alive_cache
        t = self.now
        if cache is None or cache[0] != t:
            # Proc.alive(t), spelled out: this runs over every process at every step
            everyone = [p for p in self._by_pid if p.start <= t < p.end and (p.killed_at is None or t < p.killed_at)]
            groups: dict = {}
            for p in everyone:
                groups.setdefault(p.device, []).append(p)
                groups.setdefault(p.device[0], []).append(p)
            cache = (t, everyone, groups, {})
            self._alive_cache = cache
        return cache

    # --- time --------------------------------------------------------------------------

    def advance_to(self, t: float) -> None:
        """Move virtual time to t, applying every kill and energy increment on the way."""
        if t < self.now:
            raise ValueError(f"time cannot go back: at {self.now:g}s, asked for {t:g}s")
        while True:
            if self._settled_at != self.now:
                self._settle(self.now)
                self._settled_at = self.now
            if self.now >= t:
                return
            i = bisect.bisect_right(self._breaks, self.now)
            next_break = self._breaks[i] if i < len(self._breaks) else INF
            horizon = min(next_break, t)
            hit = self._next_crossing(self.now, next_break, t)
            end = hit[0] if hit else horizon
            for gpu in self.gpus:
                self.energy_j[gpu] += self.telemetry.energy_between(gpu, self.now, end)
            self.now = end
            if hit:
                self._kill_at_crossing(hit)
                self._settled_at = None  # look again: another device may be full too

    def _settle(self, now: float) -> None:
        """Apply everything that happens exactly at ``now``: resets, MPS restarts and deaths,
        limits, full devices."""
        for gpu in self.lifecycle.resets_at(now):
            self.energy_j[gpu] = 0.0  # the energy counter counts from the (re)load of the GPU
        for at, key, kind in self.mps_events:
            if at == now:
                for p in self.alive(now, device=key):
                    if p.mps_client and p.start < now:
                        self._kill(p, now, kind, int(p.memory_at(now)), 0)
        for p in self.refused.get(now, ()):
            self.mps_fault_events.append(OomEvent(now, p.gpu, p.gi, p.pid, p.name, 0, 0, "mps_unavailable"))
        for p in [p for p in self._pinned if p.alive(now)]:
            if p.memory_at(now) > p.pinned_limit:
                self._kill(p, now, "mps_pinned_limit", int(p.memory_at(now)), p.pinned_limit)
        for key in self._busy_devices():
            capacity = self.devices[key].capacity
            while True:
                procs, total, _ = self._load(now, key)
                killable = [p for p in procs if not p.mps_server]
                if total <= capacity or not killable:
                    break
                self._kill(max(killable, key=lambda p: self._growth(p, now)), now, "oom",
                           int(total), capacity)

    def _next_crossing(self, now: float, next_break: float, target: float):
        """Earliest (time, order, key, kind, subject) in [now, min(next_break, target)]
        where a device or a pinned client goes over its limit; None if there is none.
        A crossing exactly at next_break is left to that instant (state changes there)."""
        best = None
        for p in [p for p in self._pinned if p.alive(now)]:
            slope = slope_after(p.memory, now)
            if slope > 0:
                tc = max(now, now + (p.pinned_limit - p.memory_at(now)) / slope)
                best = _earlier(best, (tc, 0, p.pid, "pinned", p), next_break, target)
        for key in self._busy_devices():
            _, total, slope = self._load(now, key)
            if slope > 0:
                tc = max(now, now + (self.devices[key].capacity - total) / slope)
                best = _earlier(best, (tc, 1, key, "oom", key), next_break, target)
        return best

    def _busy_devices(self) -> list[DeviceKey]:
        """The devices with a process alive now, in order (``sorted({p.device for p in self.alive()})``)."""
        return sorted(key for key in self._alive_now()[2] if type(key) is tuple)

    def _load(self, now: float, key: DeviceKey) -> tuple[list[Proc], float, float]:
        """(processes alive on device ``key`` at ``now``, their memory, its slope just after now).

        Asked by _settle and _next_crossing at every step: kept with the alive list of ``now``
        (a kill drops both). The sums run over the same processes in the same order as
        ``sum(p.memory_at(now) ...)`` would, so the floats are the same."""
        loads = self._alive_now()[3] if now == self.now else {}
        load = loads.get(key)
        if load is None:
            procs = self.alive(now, device=key)
            points = [value_slope(p.memory, now) for p in procs]
            load = loads[key] = (procs, sum([v for v, _ in points]), sum([s for _, s in points]))
        return load

    def _kill_at_crossing(self, hit) -> None:
        tc, _, _, kind, subject = hit
        if kind == "pinned":
            self._kill(subject, tc, "mps_pinned_limit", subject.pinned_limit, subject.pinned_limit)
            return
        procs = self.alive(tc, device=subject)
        killable = [p for p in procs if not p.mps_server]
        if killable:
            capacity = self.devices[subject].capacity
            total = max(capacity, int(sum(p.memory_at(tc) for p in procs)))
            self._kill(max(killable, key=lambda p: self._growth(p, tc)), tc, "oom", total, capacity)

    @staticmethod
    def _growth(p: Proc, t: float) -> tuple:
        """Who 'just grew' at t: a start or a step up first, then slope, start, pid."""
        jumped = p.start == t or timeline_value(p.memory, t) > left_value(p.memory, t)
        return (jumped, slope_after(p.memory, t), p.start, p.pid)

    def _kill(self, p: Proc, t: float, reason: str, demand: int, capacity: int) -> None:
        p.killed_at = t
        self._alive_cache = None
        event = OomEvent(t, p.gpu, p.gi, p.pid, p.name, demand, capacity, reason)
        if reason in ("mps_restart", "mps_server_death"):
            self.mps_fault_events.append(event)
            return
        self.oom_events.append(event)
        self.oom_kills[(p.gpu, "" if p.gi is None else str(p.gi))] += 1

    def _all_instants(self):
        for p in self.procs:
            yield p.start
            yield p.end
            yield from (t for t, _ in p.memory)
            for timeline in p.activity.values():
                yield from (t for t, _ in timeline)
        for e in self.scenario.events:
            yield e.at
            if e.fault is not None and e.fault.until is not None:
                yield e.fault.until
        for g in self.scenario.gpus:
            for timeline in (g.power_watts, g.utilization):
                yield from (t for t, _ in timeline or ())


def _earlier(best, candidate, next_break: float, target: float):
    tc = candidate[0]
    if tc >= next_break or tc > target:
        return best
    return candidate if best is None or candidate[:3] < best[:3] else best
