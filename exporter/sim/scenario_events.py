"""Scenario loader, part 2: MIG layouts, the events list, and layout history over time.

See exporter.sim.scenario for the entry points and docs/scenarios.md for the format.
"""

from __future__ import annotations

import inspect
import re
from functools import lru_cache
from typing import Any

import pynvml

from exporter.catalog import GpuModel, first_free_start, layout_fits, resolve_model
from exporter.sim import scenario_faults
from exporter.sim.model import EventSpec, GpuSpec, MigSpec, ProcessSpec, gpu_model
from exporter.sim.scenario_fields import (
    as_bool, as_duration, as_int, as_list, as_str, check_keys, did_you_mean, fail, fmt_time,
    item, key, kind,
)

EVENT_KINDS = ("fault", "gpu_lost", "mig_reconfigure", "xid", "mps_restart", *scenario_faults.FAULT_KINDS)
_EVENT_KEYS = {
    "gpu_lost": (("gpu",), ("gpu",)),
    "mig_reconfigure": (("gpu", "mig", "fails_after"), ("gpu", "mig")),
    "xid": (("gpu", "code", "mig"), ("gpu", "code")),
    "mps_restart": (("gpu", "mig"), ("gpu",)),
    **scenario_faults.FAULT_EVENT_KEYS,
}


def model_at(value: Any, path: str) -> GpuModel:
    """The catalog model named by ``value``; fails at ``path`` naming the known ones."""
    try:
        return resolve_model(as_str(value, path))
    except KeyError as exc:
        fail(path, exc.args[0])


def mig_layout(raw: Any, path: str, model: GpuModel) -> tuple[MigSpec, ...]:
    """A mig list resolved to placements: explicit starts first, then first free starts."""
    entries = as_list(raw, path)
    if not model.mig_capable:
        fail(path, f"{model.key} is not MIG-capable (remove mig)")
    parsed: list[tuple[str, int | None, bool]] = []
    forced: dict[int, int] = {}  # device_index -> entry position
    gi_ids: dict[int, int] = {}  # entry position -> forced GPU-instance id
    no_ci: set[int] = set()  # positions of GPU instances created without a compute instance
    for j, entry in enumerate(entries):
        where = item(path, j)
        check_keys(entry, where, ("profile", "start", "mps", "device_index", "compute_instance",
                                  "gpu_instance_id"), required=("profile",))
        if entry.get("gpu_instance_id") is not None:
            gi = as_int(entry["gpu_instance_id"], key(where, "gpu_instance_id"), minimum=0)
            if gi in gi_ids.values():
                fail(key(where, "gpu_instance_id"), f"GPU instance id {gi} is used twice")
            gi_ids[j] = gi
        if not as_bool(entry.get("compute_instance", True), key(where, "compute_instance")):
            no_ci.add(j)
            for other in ("mps", "device_index"):
                if entry.get(other) not in (None, False):
                    fail(key(where, other), "a GPU instance without a compute instance has no MIG "
                         "device (remove it or set compute_instance: true)")
        name = as_str(entry["profile"], key(where, "profile"))
        try:
            profile = model.profile(name)
        except KeyError as exc:
            names = [p.name for p in model.mig_profiles]
            fail(key(where, "profile"), exc.args[0] + did_you_mean(name, names))
        start = None
        if entry.get("start") is not None:
            start = as_int(entry["start"], key(where, "start"), minimum=0)
            if start not in profile.starts:
                fail(key(where, "start"), layout_fits(model, [(name, start)]))
        if entry.get("device_index") is not None:
            index = as_int(entry["device_index"], key(where, "device_index"), minimum=0)
            if index >= model.max_mig_devices:
                fail(key(where, "device_index"), f"must be below {model.max_mig_devices} on {model.key}")
            if index in forced:
                fail(key(where, "device_index"), f"{index} is also used by {item(path, forced[index])}")
            forced[index] = j
        parsed.append((name, start, as_bool(entry.get("mps", False), key(where, "mps"))))
    by_position = {j: index for index, j in forced.items()}
    taken: list[tuple[str, int]] = []
    starts: dict[int, int] = {}
    for explicit in (True, False):  # explicit starts claim their slices before free ones
        for j, (name, start, _) in enumerate(parsed):
            if (start is not None) != explicit:
                continue
            if start is None:
                start = first_free_start(model, taken, name)
                if start is None:
                    placed = ", ".join(f"{n}@{s}" for n, s in taken) or "none"
                    fail(item(path, j), f"no free placement left for {name} (placed so far: {placed})")
            reason = layout_fits(model, [*taken, (name, start)])
            if reason:
                fail(item(path, j), reason)
            taken.append((name, start))
            starts[j] = start
    return tuple(MigSpec(profile=n, start=starts[j], mps=m, device_index=by_position.get(j),
                         compute_instance=j not in no_ci, gpu_instance_id=gi_ids.get(j))
                 for j, (n, _, m) in enumerate(parsed))


def gpu_ref(value: Any, path: str, gpus: dict[int, GpuSpec]) -> GpuSpec:
    """The GPU whose index is ``value``."""
    index = as_int(value, path, minimum=0)
    if index not in gpus:
        fail(path, f"no GPU with index {index} (indices: {', '.join(map(str, sorted(gpus)))})")
    return gpus[index]


class LayoutHistory:
    """Which MIG layout each GPU has at a given time (initial layout, then reconfigures)."""

    def __init__(self, gpus: dict[int, GpuSpec]):
        self._changes: dict[int, list[tuple[float, tuple[MigSpec, ...]]]] = {
            g.index: [(float("-inf"), g.mig)] for g in gpus.values()
        }

    def add(self, gpu: int, at: float, layout: tuple[MigSpec, ...]) -> None:
        self._changes[gpu].append((at, layout))
        self._changes[gpu].sort(key=lambda change: change[0])

    def at(self, gpu: int, t: float) -> tuple[MigSpec, ...] | None:
        """Layout in force at time t (a reconfigure at exactly t already applies)."""
        return [layout for when, layout in self._changes[gpu] if when <= t][-1]


@lru_cache(maxsize=1)
def known_calls() -> frozenset[str]:
    """pynvml function names plus every C symbol pynvml resolves (e.g. ..._v2)."""
    source = inspect.getsource(pynvml)
    symbols = set(re.findall(r'_nvmlGetFunctionPointer\(\s*"(\w+)"\s*\)', source))
    symbols.update(n for n in dir(pynvml) if n.startswith("nvml") and callable(getattr(pynvml, n)))
    return frozenset(symbols)


def parse_events(raw: list, gpus: tuple[GpuSpec, ...], duration: float | None):
    """(events sorted by time, LayoutHistory, PresenceHistory) from the ``events`` list."""
    by_index = {g.index: g for g in gpus}
    history = LayoutHistory(by_index)
    presence = scenario_faults.PresenceHistory(by_index)
    parsed: list[tuple[int, EventSpec]] = []
    for i, entry in enumerate(raw):
        path = item("events", i)
        if not isinstance(entry, dict):
            fail(path, f"must be a mapping like {{at: 5m, xid: {{gpu: 0, code: 79}}}}, got {kind(entry)}")
        check_keys(entry, path, ("at", *EVENT_KINDS), required=("at",))
        kinds = [k for k in EVENT_KINDS if k in entry]
        if len(kinds) != 1:
            fail(path, f"needs exactly one of {', '.join(EVENT_KINDS)} (found {len(kinds)})")
        at = as_duration(entry["at"], key(path, "at"))
        if duration is not None and at > duration:
            fail(key(path, "at"), f"{fmt_time(at)} is after the scenario duration {fmt_time(duration)}")
        parsed.append((i, _event(kinds[0], entry[kinds[0]], key(path, kinds[0]), at, by_index, history)))
    parsed.sort(key=lambda pair: pair[1].at)
    for i, event in parsed:  # instance references need every reconfigure known first
        where = key(item("events", i), event.kind)
        _check_instance_ref(event, where, by_index, history)
        scenario_faults.check_fault_refs(event, where, by_index, history, presence)
    return tuple(event for _, event in parsed), history, presence


def _event(kind_: str, body: Any, path: str, at: float, gpus, history) -> EventSpec:
    allowed, required = _EVENT_KEYS[kind_]
    check_keys(body, path, allowed, required)
    gpu = gpu_ref(body["gpu"], key(path, "gpu"), gpus) if body.get("gpu") is not None else None
    if kind_ == "fault":
        fault = scenario_faults.parse_fault(body, path, at, gpu, known_calls())
        return EventSpec(at=at, kind=kind_, gpu=gpu and gpu.index, fault=fault)
    if kind_ in scenario_faults.FAULT_KINDS:
        return scenario_faults.parse_fault_event(kind_, body, path, at, gpu, history, mig_layout)
    if kind_ == "mig_reconfigure":
        if gpu.mig is None:
            fail(key(path, "gpu"), f"GPU {gpu.index} has MIG disabled; mig_reconfigure only "
                 "changes the instances of a MIG-enabled GPU")
        layout = mig_layout(body["mig"], key(path, "mig"), gpu_model(gpu))
        requested = None
        if body.get("fails_after") is not None:  # created in list order, failed at that entry
            made = as_int(body["fails_after"], key(path, "fails_after"), minimum=0)
            if made >= len(layout):
                fail(key(path, "fails_after"), f"{made} >= the {len(layout)} instance(s) asked for: "
                     "that repartition did not fail (remove fails_after)")
            layout, requested = layout[:made], layout
        history.add(gpu.index, at, layout)
        return EventSpec(at=at, kind=kind_, gpu=gpu.index, mig=layout, requested=requested)
    gi = as_int(body["mig"], key(path, "mig"), minimum=0) if body.get("mig") is not None else None
    if kind_ == "xid":
        code = as_int(body["code"], key(path, "code"), minimum=1)
        return EventSpec(at=at, kind=kind_, gpu=gpu.index, xid=code, gi=gi)
    return EventSpec(at=at, kind=kind_, gpu=gpu.index, gi=gi)  # gpu_lost, mps_restart


def _check_instance_ref(event: EventSpec, path: str, gpus, history: LayoutHistory) -> None:
    """xid/mps_restart/mps_server_death ``mig`` indices refer to the layout at the event time."""
    if event.kind not in ("xid", "mps_restart", "mps_server_death"):
        return
    gpu = gpus[event.gpu]
    layout = history.at(gpu.index, event.at)
    if event.gi is not None:
        if layout is None:
            fail(key(path, "mig"), f"GPU {gpu.index} has MIG disabled (remove mig)")
        if event.gi >= len(layout):
            fail(key(path, "mig"), f"GPU {gpu.index} has {len(layout)} MIG instance(s) at "
                 f"{fmt_time(event.at)}; mig is an index into its mig list")
    if event.kind == "xid":
        return
    if layout is not None and event.gi is None:
        fail(path, f"GPU {gpu.index} has MIG enabled: set mig to the instance whose MPS server "
             f"{'restarts' if event.kind == 'mps_restart' else 'dies'}")
    runs_mps = layout[event.gi].mps if layout is not None else gpu.mps
    if not runs_mps:
        fail(path, "no MPS server runs on that device (mps: true is not set there)")


def check_reconfigure_in_use(processes: tuple[ProcessSpec, ...], events: tuple[EventSpec, ...]) -> None:
    """NVML refuses to destroy a GPU instance with processes on it: they must end by then."""
    for event in events:  # (a gpu_reset ends the processes instead: no such rule)
        if event.kind != "mig_reconfigure":
            continue
        for j, p in enumerate(processes):
            if p.gpu == event.gpu and p.start < event.at and (p.end is None or p.end > event.at):
                fail(item("processes", j), f"still running on GPU {p.gpu} when it is reconfigured "
                     f"at {fmt_time(event.at)}; set end <= {fmt_time(event.at)} (NVML refuses to "
                     "destroy an instance in use)")
