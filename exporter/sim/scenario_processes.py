"""Scenario loader, part 3: the processes list and the rules that span processes.

See exporter.sim.scenario for the entry points and docs/scenarios.md for the format.
"""

from __future__ import annotations

import re
from typing import Any

from exporter.catalog import MIB
from exporter.sim import scenario_events, scenario_pods
from exporter.sim.model import EventSpec, GpuSpec, MigSpec, ProcessSpec, gpu_model, timeline_value
from exporter.sim.scenario_fields import (
    as_bool, as_bytes, as_duration, as_int, as_ratio, as_str, check_keys, fail, fmt_time, item,
    key, kind, timeline,
)
from exporter.units import parse_mps_pinned_limits

ACTIVITY_KEYS = ("sm_active", "tensor_active", "fp16_active", "fp32_active", "fp64_active",
                 "dram_active", "sm_occupancy", "graphics_active")
PROCESS_KEYS = ("pid", "name", "cmdline", "gpu", "mig", "start", "end", "memory",
                *ACTIVITY_KEYS, "env", "mps_client", "memory_na", "uid", "host_memory", "pod")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def device_capacity(gpu: GpuSpec, mig: MigSpec | None) -> tuple[int, str]:
    """(bytes processes can use, description) of a whole GPU or one of its MIG instances."""
    model = gpu_model(gpu)
    if mig is None:
        return model.memory_capacity_bytes, (
            f"GPU {gpu.index} ({model.memory_total_mib} MiB total - "
            f"{model.memory_reserved_mib} MiB reserved)")
    profile = model.profile(mig.profile)
    return profile.memory_mib * MIB, (
        f"GPU {gpu.index} MIG {mig.profile} at slice {mig.start} ({profile.memory_mib} MiB)")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def parse_processes(
    raw: list,
    gpus: tuple[GpuSpec, ...],
    layouts: scenario_events.LayoutHistory,
    events: tuple[EventSpec, ...],
    duration: float | None,
    presence=None,
) -> tuple[ProcessSpec, ...]:
    """Validated processes, in file order."""
    by_index = {g.index: g for g in gpus}
    processes = tuple(
        _process(p, item("processes", i), by_index, layouts, duration) for i, p in enumerate(raw)
    )
    for i, p in enumerate(processes):
        if presence is not None and not presence.at(p.gpu, p.start):
            fail(key(item("processes", i), "start"), f"GPU {p.gpu} is not on the bus at "
                 f"{fmt_time(p.start)} (present: false, or removed by then)")
    _check_pids(processes)
    scenario_pods.check_pods(processes)
    _check_start_memory(processes, by_index, layouts)
    scenario_events.check_reconfigure_in_use(processes, events)
    return processes


def _process(raw: Any, path: str, gpus, layouts, duration: float | None) -> ProcessSpec:
    check_keys(raw, path, PROCESS_KEYS, required=("pid", "gpu", "memory"))
    pid = as_int(raw["pid"], key(path, "pid"), minimum=1)
    if "name" not in raw and "cmdline" not in raw:
        fail(path, "needs a name or a cmdline")
    cmdline = as_str(raw.get("cmdline", raw.get("name")), key(path, "cmdline"))
    if "name" in raw:
        name = as_str(raw["name"], key(path, "name"))
    else:  # what the process table shows: the executable's base name
        name = cmdline.split()[0].rsplit("/", 1)[-1]
    gpu = scenario_events.gpu_ref(raw["gpu"], key(path, "gpu"), gpus)
    start = as_duration(raw.get("start", 0), key(path, "start"))
    if duration is not None and start > duration:
        fail(key(path, "start"), f"{fmt_time(start)} is after the scenario duration {fmt_time(duration)}")
    end = None
    if raw.get("end") is not None:
        end = as_duration(raw["end"], key(path, "end"), origin=start)
        if end <= start:
            fail(key(path, "end"), f"end {fmt_time(end)} must be after start {fmt_time(start)}")
    layout = layouts.at(gpu.index, start)
    mig_index, mig = None, None
    if raw.get("mig") is not None:
        mig_index = as_int(raw["mig"], key(path, "mig"), minimum=0)
        if layout is None:
            fail(key(path, "mig"), f"GPU {gpu.index} has MIG disabled (remove mig)")
        if mig_index >= len(layout):
            fail(key(path, "mig"), f"GPU {gpu.index} has {len(layout)} MIG instance(s) at "
                 f"{fmt_time(start)}; mig is an index into its mig list")
        mig = layout[mig_index]
        if not mig.compute_instance:
            fail(key(path, "mig"), f"MIG instance {mig_index} of GPU {gpu.index} has no compute "
                 "instance: no process can run on it")
    elif layout is not None:
        fail(path, f"GPU {gpu.index} has MIG enabled: set mig to the index of an instance in its "
             f"mig list ({len(layout)} at {fmt_time(start)})")
    memory = timeline(raw["memory"], key(path, "memory"), as_bytes, origin=start)
    activity = {k: timeline(raw[k], key(path, k), as_ratio, origin=start)
                for k in ACTIVITY_KEYS if raw.get(k) is not None}
    env = _env(raw.get("env") or {}, key(path, "env"))
    pod = scenario_pods.parse_pod(raw["pod"], key(path, "pod")) if raw.get("pod") is not None else None
    if pod is not None:
        env.setdefault("HOSTNAME", pod.name)  # what every container runtime sets
    serves = mig.mps if mig is not None else gpu.mps
    mps_client = serves
    if raw.get("mps_client") is not None:
        mps_client = as_bool(raw["mps_client"], key(path, "mps_client"))
        if mps_client and not serves:
            fail(key(path, "mps_client"), "its device runs no MPS server (set mps: true on the "
                 "GPU or on its mig entry)")
    capacity, what = device_capacity(gpu, mig)
    at_start = timeline_value(memory, start)
    if at_start > capacity:
        fail(key(path, "memory"), f"{_gib(at_start)} at its start ({fmt_time(start)}) exceeds "
             f"the {_gib(capacity)} of {what}")
    extra = {}
    if raw.get("memory_na") is not None:
        extra["memory_na"] = as_bool(raw["memory_na"], key(path, "memory_na"))
    if raw.get("uid") is not None:
        extra["uid"] = as_int(raw["uid"], key(path, "uid"), minimum=0)
    if raw.get("host_memory") is not None:
        extra["host_memory"] = int(as_bytes(raw["host_memory"], key(path, "host_memory")))
    return ProcessSpec(pid=pid, name=name, cmdline=cmdline, gpu=gpu.index, mig=mig_index,
                       start=start, end=end, memory=memory, activity=activity, env=env,
                       mps_client=mps_client, pod=pod, **extra)


def _env(raw: Any, path: str) -> dict[str, str]:
    """Environment as strings; the MPS variables the simulator reads are checked too."""
    if not isinstance(raw, dict):
        fail(path, f"must be a mapping of variable names to values, got {kind(raw)}")
    env = {}
    for name, value in raw.items():
        where = key(path, str(name))
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            fail(where, "not a valid environment variable name")
        if isinstance(value, (dict, list)) or value is None:
            fail(where, f"value must be a string or number, got {kind(value)}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if name == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":
            try:
                parse_mps_pinned_limits(text)
            except ValueError as exc:
                fail(where, str(exc))
        if name == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE":
            try:
                percent = float(text)
            except ValueError:
                fail(where, f"{text!r} is not a number (percent of SMs, 1..100)")
            if not 0 < percent <= 100:
                fail(where, f"{text} is outside 1..100 (percent of SMs)")
        env[name] = text
    return env


def _check_pids(processes: tuple[ProcessSpec, ...]) -> None:
    """A pid may repeat only when the lifetimes [start, end) do not overlap (pid reuse)."""
    inf = float("inf")
    earlier: dict[int, list[int]] = {}  # pid -> indices so far: the same first clash as comparing every pair
    for j, b in enumerate(processes):
        for i in earlier.get(b.pid, ()):
            a = processes[i]
            if a.start < (b.end or inf) and b.start < (a.end or inf):
                fail(key(item("processes", j), "pid"), f"pid {a.pid} is already used by "
                     f"processes[{i}] during an overlapping lifetime")
        earlier.setdefault(b.pid, []).append(j)


def _check_start_memory(processes: tuple[ProcessSpec, ...], gpus, layouts) -> None:
    """Processes present at t=0 on one device must fit in it together (the state at rest)."""
    members: dict[tuple[int, int | None], list[int]] = {}
    for j, p in enumerate(processes):
        if p.start != 0:
            continue
        group = members.setdefault((p.gpu, p.mig), [])
        group.append(j)
        layout = layouts.at(p.gpu, 0.0)
        capacity, what = device_capacity(gpus[p.gpu], layout[p.mig] if p.mig is not None else None)
        total = sum(timeline_value(processes[k].memory, 0.0) for k in group)
        if total > capacity:
            names = ", ".join(f"processes[{k}]" for k in group)
            fail(key(item("processes", j), "memory"), f"processes starting at 0s on the same "
                 f"device ({names}) need {_gib(total)} together, above the {_gib(capacity)} of {what}")
