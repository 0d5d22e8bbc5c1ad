"""Static resolution of a scenario: which device each process runs on, MPS servers, events.

Everything here depends only on the scenario (not on kills), so it is computed once when
the engine starts. Errors are UserErrors naming the scenario place.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Mapping

from exporter.backend.procinfo import DeviceRef, mps_memory_limit
from exporter.errors import UserError
from exporter.sim.state import (
    INF, MPS_SERVER_MEMORY, MPS_SERVER_NAME, PINNED_LIMIT_ENV, DeviceKey, FaultWindow, Proc,
    XidEvent,
)
from exporter.units import parse_mps_pinned_limits

if TYPE_CHECKING:
    from exporter.sim.state import EngineView
    from exporter.sim.model import EventSpec

MPS_SERVER_PID_BASE = 100000


def client_environ(env: Mapping[str, str], device_uuid: str) -> dict[str, str]:
    """The environment a simulated process has, as /proc shows it.

    Unless the scenario chose the visible devices itself, the process sees what the NVIDIA
    container runtime gives a containerised client: NVIDIA_VISIBLE_DEVICES = its own device
    (GPU or MIG UUID), so its CUDA ordinal 0 is that device.
    """
    out = dict(env)
    if "CUDA_VISIBLE_DEVICES" not in out and "NVIDIA_VISIBLE_DEVICES" not in out:
        out["NVIDIA_VISIBLE_DEVICES"] = device_uuid
    return out


def build_processes(engine: EngineView, where: str) -> list[Proc]:
    """Scenario processes bound to their devices, plus one MPS server per MPS device epoch.

    Sets ``engine.refused``: MPS clients that start while their device's MPS server is dead
    (after ``mps_server_death``, before an ``mps_restart``), by start time. They never run.
    """
    mps_events = mps_device_events(engine, sorted(engine.scenario.events, key=lambda e: e.at), where)
    procs: list[Proc] = []
    clients: dict[tuple[DeviceKey, float], list[Proc]] = defaultdict(list)
    for ps in engine.scenario.processes:
        place = f"{where}: processes[pid={ps.pid}]"
        if ps.gpu not in engine.gpus:
            raise UserError(f"{place}.gpu: no GPU with index {ps.gpu}")
        ep = engine.epoch(ps.gpu, ps.start)
        if ep.mig_enabled:
            if ps.mig is None or not 0 <= ps.mig < len(ep.instances):
                raise UserError(f"{place}.mig: GPU {ps.gpu} is in MIG mode at {ps.start:g}s with "
                                f"{len(ep.instances)} instance(s); give an index 0..{len(ep.instances) - 1}")
            inst = ep.instances[ps.mig]
            key, gi, device_mps = (ps.gpu, inst.serial), inst.gi, inst.mps
        else:
            if ps.mig is not None:
                raise UserError(f"{place}.mig: GPU {ps.gpu} has MIG disabled at {ps.start:g}s")
            key, gi, device_mps = (ps.gpu, 0), None, engine.gpus[ps.gpu].mps
        client = device_mps if ps.mps_client is None else ps.mps_client
        env = client_environ(ps.env, engine.devices[key].uuid)
        limit = None
        if client and PINNED_LIMIT_ENV in env:
            try:
                parse_mps_pinned_limits(env[PINNED_LIMIT_ENV])  # a malformed value is the scenario's error
            except ValueError as exc:
                raise UserError(f"{place}.env.{PINNED_LIMIT_ENV}: {exc}") from None
            # The same resolution of ordinals and UUIDs the exporter applies to /proc.
            mig_uuid = engine.devices[key].uuid if gi is not None else None
            limit = mps_memory_limit(env, DeviceRef(ps.gpu, engine.gpus[ps.gpu].uuid, mig_uuid, gi, 0))
        # A MIG reconfigure drains the device; a reset or a removal of the GPU ends it too.
        end = min(INF if ps.end is None else ps.end, ep.end, engine.lifecycle.next_cut(ps.gpu, ps.start))
        proc = Proc(ps.pid, ps.name, ps.cmdline, env, key, gi, ps.start, end,
                    ps.memory, dict(ps.activity), client, False, limit,
                    memory_na=ps.memory_na, uid=ps.uid, host_memory=ps.host_memory)
        procs.append(proc)
        if client:
            clients[(key, ep.start)].append(proc)
    engine.refused = {}
    procs.extend(_servers(engine, clients, mps_events))
    taken = {p.pid for p in procs if not p.mps_server}
    for server in procs:
        if server.mps_server and server.pid in taken:
            raise UserError(f"{where}: processes[pid={server.pid}]: pid is reserved for the "
                            f"simulated MPS server of GPU {server.gpu}; pick another pid")
    return procs


def _servers(engine: EngineView, clients, mps_events) -> list[Proc]:
    """MPS servers, one per up-period of each MPS device.

    A server spawns with its device's first client and stays up (like the real one) until
    the device goes away, a reset or removal ends everything on the GPU, or it dies
    (``mps_server_death``). An ``mps_restart`` replaces it at once (new generation, new
    pid); after a death, the control daemon is gone: clients that start are refused
    (``engine.refused``) until an ``mps_restart``, after which the next client spawns one.
    """
    generation: dict[tuple[int, int], int] = defaultdict(int)
    servers = []
    for (key, epoch_start), members in sorted(clients.items()):
        gpu = key[0]
        inst = engine.devices[key].instance
        slot = 0 if inst is None else inst.gi + 1
        epoch_end = engine.epoch(gpu, epoch_start).end
        # (time, order, what, client): at one instant cuts, deaths and restarts come before starts
        steps = [(t, 0, "cut", None) for t in engine.lifecycle.cuts(gpu) if epoch_start <= t < epoch_end]
        steps += [(t, 1 if kind == "mps_server_death" else 2, kind, None)
                  for t, k, kind in mps_events if k == key and epoch_start <= t < epoch_end]
        steps += [(p.start, 3, "start", p) for p in members]
        up_since, daemon = None, True

        def close(t):
            gen = generation[(gpu, slot)]
            generation[(gpu, slot)] += 1
            pid = MPS_SERVER_PID_BASE + 10000 * gen + 100 * gpu + slot
            servers.append(Proc(pid, MPS_SERVER_NAME, MPS_SERVER_NAME, {}, key,
                                None if inst is None else inst.gi, up_since, t,
                                ((up_since, float(MPS_SERVER_MEMORY)),), {}, False, True, None))

        for t, _, what, p in sorted(steps, key=lambda s: (s[0], s[1], s[3].pid if s[3] else 0)):
            if what == "start":
                if not daemon:
                    p.killed_at = p.start  # cannot connect: never runs
                    engine.refused.setdefault(p.start, []).append(p)
                elif up_since is None:
                    up_since = t
            elif what == "mps_restart":
                daemon = True
                if up_since is not None:
                    close(t)
                    up_since = t
            elif up_since is not None:  # cut or death: the server is gone
                close(t)
                up_since = None
                daemon = daemon and what == "cut"
            elif what == "mps_server_death":
                daemon = False
        if up_since is not None:
            close(epoch_end)
    return servers


def mps_device_events(engine: EngineView, events: list[EventSpec], where: str) -> list[tuple[float, DeviceKey, str]]:
    """(time, device, kind) of every mps_restart and mps_server_death; a restart with gi None
    on a MIG GPU restarts all its instances."""
    result = []
    for e in events:
        if e.kind not in ("mps_restart", "mps_server_death"):
            continue
        gpu = _event_gpu(engine, e, where)
        ep = engine.epoch(gpu, e.at)
        if not ep.mig_enabled:
            result.append((e.at, (gpu, 0), e.kind))
        elif e.gi is None:
            result.extend((e.at, (gpu, inst.serial), e.kind) for inst in ep.instances)
        else:
            result.append((e.at, (gpu, _instance(ep, e, where).serial), e.kind))
    return result


def mps_restarts(engine: EngineView, events: list[EventSpec], where: str) -> list[tuple[float, DeviceKey]]:
    """(time, device) of every mps_restart (see mps_device_events for deaths too)."""
    return [(at, key) for at, key, kind in mps_device_events(engine, events, where) if kind == "mps_restart"]


def resolve_events(engine: EngineView, events: list[EventSpec], where: str):
    """(MPS device events, xids, faults) from the scenario events, sorted by time."""
    xids, faults = [], []
    for e in events:
        if e.kind == "xid":
            gpu = _event_gpu(engine, e, where)
            gi = None
            if e.gi is not None:
                gi = _instance(engine.epoch(gpu, e.at), e, where).gi
            xids.append(XidEvent(e.at, gpu, 999 if e.xid is None else e.xid, gi))
        elif e.kind == "gpu_lost":  # lost until the GPU is reset (or for good)
            gpu = _event_gpu(engine, e, where)
            faults.append(FaultWindow("*", gpu, "GpuIsLost", e.at, engine.lifecycle.next_reset(gpu, e.at),
                                      ident=len(faults)))
        elif e.fault is not None:  # fault, nvml_init_failure, driver_mismatch
            f = e.fault
            gpu = f.gpu if f.gpu is not None else e.gpu
            scope = {}
            if f.mig is not None:
                inst = engine.epoch(gpu, e.at).instances[f.mig]
                scope = dict(serial=inst.serial, gi=inst.gi, mig_index=inst.mig_index)
            faults.append(FaultWindow(f.call, gpu, f.error, e.at, f.until, f.delay_seconds,
                                      f.probability, ident=len(faults), **scope))
    return mps_device_events(engine, events, where), xids, faults


def _event_gpu(engine: EngineView, e: EventSpec, where: str) -> int:
    if e.gpu not in engine.gpus:
        raise UserError(f"{where}: events[{e.kind} at {e.at:g}s].gpu: no GPU with index {e.gpu}")
    return e.gpu


def _instance(ep, e: EventSpec, where: str):
    if not ep.mig_enabled or not 0 <= e.gi < len(ep.instances):
        raise UserError(f"{where}: events[{e.kind} at {e.at:g}s].gi: GPU {e.gpu} has no MIG "
                        f"instance at list index {e.gi} then")
    return ep.instances[e.gi]
