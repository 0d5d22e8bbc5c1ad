"""The optional ``dcgm`` section of a scenario: DCGM on the simulated host, and its faults.

Parsed by ``parse_dcgm_section`` (called from exporter.sim.scenario) into a frozen DcgmSpec
stored as ``Scenario.dcgm``; a scenario without the section has ``dcgm = None`` (DCGM is then
not installed on the host unless ``--backend dcgm`` asks for it, see exporter/backend/sim.py).
Format: docs/scenarios.md, section "DCGM".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from exporter.sim.scenario_fields import (
    as_bool, as_duration, as_int, as_list, as_str, check_keys, did_you_mean, fail, fmt_time, item, key,
)

# Fault kinds and what each does (docs/scenarios.md):
FAULT_KINDS = {
    # Nsight / CUPTI / another DCGM holds the GPU performance monitors: watching profiling fields
    # fails with -37 and watched profiling values read blank, on GPUs without GPM (pre-Hopper).
    "profiling_lock": "profiling module busy (-37)",
    # The profiling module (datacenter-gpu-manager-4-proprietary) is not loaded: -33.
    "profiling_module_missing": "profiling module not loaded (-33)",
    # The host engine stops answering (nv-hostengine stopped; an embedded engine fails alike):
    # connects and calls fail with -21; when it comes back its groups and watches are gone.
    "hostengine_down": "host engine not reachable (-21)",
    # nv-hostengine of another DCGM version: connects and calls fail with -12 "API version
    # mismatch" (standalone engines only); when it ends the engine has been replaced again.
    "version_mismatch": "API version mismatch (-12)",
}
SECTION_KEYS = ("installed", "version", "profiling_module", "root", "gpu_ids", "unsupported_fields", "faults")
PROFILING_FIELD_IDS = tuple(range(1001, 1009))


@dataclass(frozen=True)
class DcgmFaultSpec:
    kind: str  # a FAULT_KINDS key
    start: float  # virtual seconds
    until: float | None  # None: to the end

    def active(self, t: float) -> bool:
        return self.start <= t and (self.until is None or t < self.until)


@dataclass(frozen=True)
class DcgmSpec:
    installed: bool = True  # False: no DCGM bindings on this host
    version: str = "4.6.0"  # DCGM of the bindings, library and nv-hostengine
    profiling_module: bool = True  # False: the profiling (DCP) module is not installed (-33)
    root: bool = True  # False: an embedded engine runs without root: -29 while any GPU has MIG on
    gpu_ids: tuple[int, ...] | None = None  # DCGM gpuId of each GPU in NVML order (default: same)
    unsupported_fields: tuple[tuple[int, int], ...] = ()  # (GPU index, profiling field id) it lacks
    faults: tuple[DcgmFaultSpec, ...] = ()

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("."))


DEFAULT = DcgmSpec()


def parse_dcgm_section(raw: Any, gpu_count: int, duration: float | None) -> DcgmSpec:
    """Validate the scenario's ``dcgm`` mapping; raises scenario_fields.Invalid with a path."""
    if raw is None:
        return DEFAULT
    data = check_keys(raw, "dcgm", SECTION_KEYS)
    values: dict[str, Any] = {}
    for name in ("installed", "profiling_module", "root"):
        if name in data:
            values[name] = as_bool(data[name], key("dcgm", name))
    if "version" in data:
        version = data["version"]
        text = str(version) if isinstance(version, (int, float, str)) and not isinstance(version, bool) else ""
        if not re.fullmatch(r"[34]\.\d+(\.\d+)?", text):
            fail(key("dcgm", "version"), f"expected a DCGM 3.x or 4.x version like \"4.6.0\", got {version!r}")
        values["version"] = text
    if data.get("gpu_ids") is not None:
        path = key("dcgm", "gpu_ids")
        ids = tuple(as_int(v, item(path, i), minimum=0) for i, v in enumerate(as_list(data["gpu_ids"], path)))
        if len(ids) != gpu_count or len(set(ids)) != len(ids) or max(ids) >= 32:
            fail(path, f"needs {gpu_count} distinct ids below 32 (one per GPU, in NVML index order), got {list(ids)}")
        values["gpu_ids"] = ids
    if data.get("unsupported_fields") is not None:
        values["unsupported_fields"] = _unsupported(data["unsupported_fields"], gpu_count)
    if data.get("faults") is not None:
        values["faults"] = _faults(data["faults"], duration)
    return DcgmSpec(**values)


def _unsupported(raw: Any, gpu_count: int) -> tuple[tuple[int, int], ...]:
    path = key("dcgm", "unsupported_fields")
    out = []
    for i, entry in enumerate(as_list(raw, path)):
        where = item(path, i)
        check_keys(entry, where, ("gpu", "fields"), required=("gpu", "fields"))
        gpu = as_int(entry["gpu"], key(where, "gpu"), minimum=0)
        if gpu >= gpu_count:
            fail(key(where, "gpu"), f"no GPU {gpu} (the scenario has {gpu_count})")
        fields_path = key(where, "fields")
        for j, field in enumerate(as_list(entry["fields"], fields_path)):
            field_id = as_int(field, item(fields_path, j))
            if field_id not in PROFILING_FIELD_IDS:
                fail(item(fields_path, j), f"only the profiling fields 1001-1008 can be made unsupported, got {field_id}")
            out.append((gpu, field_id))
    return tuple(out)


def _faults(raw: Any, duration: float | None) -> tuple[DcgmFaultSpec, ...]:
    path = key("dcgm", "faults")
    out = []
    for i, entry in enumerate(as_list(raw, path)):
        where = item(path, i)
        check_keys(entry, where, ("kind", "at", "until"), required=("kind",))
        kind = as_str(entry["kind"], key(where, "kind"))
        if kind not in FAULT_KINDS:
            fail(key(where, "kind"), f"unknown DCGM fault {kind!r}{did_you_mean(kind, FAULT_KINDS)}; "
                 f"known: {', '.join(FAULT_KINDS)}")
        start = as_duration(entry.get("at", 0), key(where, "at"))
        if duration is not None and start > duration:
            fail(key(where, "at"), f"{fmt_time(start)} is after the scenario duration {fmt_time(duration)}")
        until = None
        if entry.get("until") is not None:
            until = as_duration(entry["until"], key(where, "until"), origin=start)
            if until <= start:
                fail(key(where, "until"), f"until {fmt_time(until)} must be after at {fmt_time(start)}")
        out.append(DcgmFaultSpec(kind, start, until))
    return tuple(out)
