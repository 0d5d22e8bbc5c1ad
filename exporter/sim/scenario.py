"""Scenario files: YAML -> validated exporter.sim.model.Scenario (format: docs/scenarios.md).

Every refusal is a UserError with ONE line: ``<file>: <path inside>: <problem>``, e.g.
``wan.yaml: gpus[0].mig[1].profile: unknown MIG profile '5g.50gb' for H100-80GB (...)``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from exporter.errors import UserError
from exporter.inputs import SafeInputLoader, load_fast, value_problem
from exporter.sim import scenario_events
from exporter.sim.model import DEFAULT_DRIVER_VERSION, GpuSpec, Scenario
from exporter.sim.scenario_events import mig_layout, model_at
from exporter.sim.scenario_fields import (
    Invalid, as_bool, as_bytes, as_count, as_duration, as_int, as_list, as_number, as_ratio, as_str,
    check_keys, did_you_mean, fail, fmt_time, item, key, kind, timeline,
)
from exporter.sim.scenario_processes import (  # noqa: F401 - re-exported for docs/tests
    ACTIVITY_KEYS, PROCESS_KEYS, device_capacity, parse_processes,
)

TOP_KEYS = ("name", "description", "duration", "driver_version", "cuda_driver_version", "seed",
            "gpus", "processes", "events", "dcgm")
# Health timelines (docs/scenarios.md, "Health"): cumulative counters and 0/1 flags.
HEALTH_KEYS = ("pcie_replays", "remapped_rows_correctable", "remapped_rows_uncorrectable",
               "row_remap_pending", "row_remap_failure", "power_violation_seconds",
               "thermal_violation_seconds")
GPU_KEYS = ("model", "variant", "index", "uuid", "pci_bus_id", "mig", "mps", "power_watts",
            "power_limit_watts", "temperature_celsius", "utilization", "ecc_corrected",
            "ecc_uncorrected", "clock_event_reasons", "compute_mode", "persistence_mode", "present",
            "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second", *HEALTH_KEYS)
COMPUTE_MODES = ("default", "exclusive_process", "prohibited")
# nvmlClocksEventReason* constants by snake_case name: sw_power_cap -> SwPowerCap (0x4).
CLOCK_EVENT_REASONS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
    "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100,
}
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_PCI = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", re.I)


class _StrictLoader(SafeInputLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last), deep
    nesting and alias bombs (exporter.inputs)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor" may override keys
            continue
        name = loader.construct_object(key_node, deep=deep)
        if isinstance(name, (str, int, float, bool)) and name in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {name!r}", key_node.start_mark)
        if isinstance(name, (str, int, float, bool)):
            seen.add(name)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; UserError (one line) on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{source}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{source}: is a directory, not a scenario file") from None
    except UnicodeDecodeError:
        raise UserError(f"{source}: not UTF-8 text") from None
    except OSError as exc:
        raise UserError(_one_line(f"{source}: cannot read: {exc.strerror or exc}")) from None
    try:
        data = load_fast(text, _StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(_one_line(f"{source}: {where}YAML syntax error: {problem}")) from None
    except ValueError as exc:  # a number with thousands of digits
        raise UserError(_one_line(f"{source}: YAML syntax error: {value_problem(exc)}")) from None
    return parse_scenario(data, source)


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate already-parsed YAML ``data``; ``source`` names it in error messages."""
    if not isinstance(data, dict):
        got = "the file is empty" if data is None else f"got {kind(data)}"
        raise UserError(f"{source}: top level must be a mapping with gpus, processes, events ({got})")
    try:
        return _parse(data, source)
    except Invalid as exc:
        raise UserError(_one_line(f"{source}: {exc}")) from None


def _parse(data: dict, source: str) -> Scenario:
    # Top-level keys starting with "x-" are ignored: a place for YAML anchors (&job) to reuse.
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    check_keys(data, "", TOP_KEYS, required=("gpus",))
    name = as_str(data["name"], "name") if "name" in data else Path(source).stem
    if "description" in data:
        as_str(data["description"], "description")
    duration = None
    if data.get("duration") is not None:
        duration = as_duration(data["duration"], "duration")
        if duration <= 0:
            fail("duration", "must be > 0")
    extra = {}
    if "driver_version" in data:
        value = data["driver_version"]
        if not isinstance(value, str) or not re.fullmatch(r"\d+(\.\d+)+", value):
            fail("driver_version", f"must be a quoted version string like \"580.95.05\", got {value!r}")
        extra["driver_version"] = value
    if "cuda_driver_version" in data:
        extra["cuda_driver_version"] = as_int(data["cuda_driver_version"], "cuda_driver_version", 1000)
    if "seed" in data:
        extra["seed"] = as_int(data["seed"], "seed", 0)
    gpus = _gpus(data["gpus"], name, extra.get("driver_version", DEFAULT_DRIVER_VERSION))
    raw_events = as_list(data.get("events") or [], "events")
    events, layouts, presence = scenario_events.parse_events(raw_events, gpus, duration)
    raw_procs = as_list(data.get("processes") or [], "processes")
    processes = parse_processes(raw_procs, gpus, layouts, events, duration, presence)
    if "dcgm" in data:  # optional: DCGM on the simulated host (exporter/sim/fakedcgm/spec.py)
        from exporter.sim.fakedcgm.spec import parse_dcgm_section  # only a scenario with DCGM loads it

        extra["dcgm"] = parse_dcgm_section(data["dcgm"], len(gpus), duration)
    return Scenario(name=name, source=source, duration=duration, gpus=gpus,
                    processes=processes, events=events, **extra)


# --- GPUs -------------------------------------------------------------------------------


def default_uuid(scenario_name: str, index: int) -> str:
    """Deterministic GPU UUID derived from the scenario name and the GPU index."""
    h = hashlib.sha256(f"{scenario_name}/gpu{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def default_pci_bus_id(index: int) -> str:
    """00000000:18:00.0 for GPU 0, then buses 1A, 1C, ... (two apart, as on HGX boards)."""
    return f"00000000:{0x18 + 2 * index:02X}:00.0"


def _gpus(raw: Any, scenario_name: str, driver_version: str) -> tuple[GpuSpec, ...]:
    entries = as_list(raw, "gpus")
    if not entries:
        fail("gpus", "needs at least one GPU")
    gpus: list[GpuSpec] = []
    seen: dict[tuple[str, Any], int] = {}
    for i, entry in enumerate(entries):
        path = item("gpus", i)
        gpu = _gpu(entry, path, i, scenario_name, driver_version)
        for field in ("index", "uuid", "pci_bus_id"):
            value = getattr(gpu, field)
            value_key = (field, value.upper() if isinstance(value, str) else value)
            if value_key in seen:
                fail(key(path, field), f"duplicate {field} {value!r} (also gpus[{seen[value_key]}])")
            seen[value_key] = i
        gpus.append(gpu)
    gpus.sort(key=lambda g: g.index)
    for position, gpu in enumerate(gpus):
        if gpu.index != position:
            fail("gpus", f"GPU indices must be 0..{len(gpus) - 1} (NVML numbers GPUs densely); "
                 f"index {position} is missing")
    return tuple(gpus)


def _board(raw: dict, path: str, driver_version: str):
    """The catalog model of this GPU as the board it names, with its power limit checked and
    the MIG profiles of the scenario's driver branch."""
    model = model_at(raw["model"], key(path, "model")).for_driver(driver_version)
    if raw.get("variant") is not None:
        wanted = as_str(raw["variant"], key(path, "variant"))
        try:
            model = model.with_variant(wanted)
        except KeyError as exc:
            fail(key(path, "variant"), exc.args[0] + did_you_mean(wanted, [v.key for v in model.variants]))
    limit = None
    if raw.get("power_limit_watts") is not None:
        limit = as_number(raw["power_limit_watts"], key(path, "power_limit_watts"))
        low, high = model.min_power_limit_watts, model.max_power_limit_watts
        if not low <= limit <= high:
            fail(key(path, "power_limit_watts"), f"{limit:g} W is outside the {low:g}..{high:g} W "
                 f"range of {model.nvml_name} (nvidia-smi -pl refuses it)")
    return model, limit


def _gpu(raw: Any, path: str, position: int, scenario_name: str, driver_version: str) -> GpuSpec:
    check_keys(raw, path, GPU_KEYS, required=("model",))
    model, power_limit = _board(raw, path, driver_version)
    index = as_int(raw.get("index", position), key(path, "index"), minimum=0)
    uuid = raw.get("uuid", default_uuid(scenario_name, index))
    if not isinstance(uuid, str) or not _UUID.match(uuid):
        fail(key(path, "uuid"), f"{uuid!r} is not a GPU UUID like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
    pci = raw.get("pci_bus_id", default_pci_bus_id(index))
    if not isinstance(pci, str) or not _PCI.match(pci):
        fail(key(path, "pci_bus_id"), f"{pci!r} is not a PCI bus id like 00000000:18:00.0")
    mig = None
    if raw.get("mig") is not None:
        mig = mig_layout(raw["mig"], key(path, "mig"), model)
    mps = as_bool(raw.get("mps", False), key(path, "mps"))
    if mps and mig is not None:
        fail(key(path, "mps"), "MPS on a MIG-enabled GPU runs per instance: set mps: true on "
             "the mig entries instead")
    series = {}
    readers = {"power_watts": lambda v, p: as_number(v, p, 0), "temperature_celsius": as_number,
               "utilization": as_ratio, "ecc_corrected": as_count, "ecc_uncorrected": as_count,
               "pcie_tx_bytes_per_second": as_bytes, "pcie_rx_bytes_per_second": as_bytes,
               "pcie_replays": as_count, "remapped_rows_correctable": as_count,
               "remapped_rows_uncorrectable": as_count, "row_remap_pending": _as_flag,
               "row_remap_failure": _as_flag, "power_violation_seconds": lambda v, p: as_number(v, p, 0),
               "thermal_violation_seconds": lambda v, p: as_number(v, p, 0)}
    cumulative = ("ecc", "pcie_replays", "remapped_rows", "power_violation", "thermal_violation")
    for field, reader in readers.items():
        if raw.get(field) is not None:
            series[field] = timeline(raw[field], key(path, field), reader,
                                     non_decreasing_values=field.startswith(cumulative))
    if raw.get("compute_mode") is not None:
        mode = as_str(raw["compute_mode"], key(path, "compute_mode"))
        if mode not in COMPUTE_MODES:
            fail(key(path, "compute_mode"), f"unknown compute mode {mode!r}"
                 f"{did_you_mean(mode, COMPUTE_MODES)}; use one of {', '.join(COMPUTE_MODES)}")
        series["compute_mode"] = mode
    reasons = _clock_reasons(raw.get("clock_event_reasons") or [], key(path, "clock_event_reasons"))
    for flag in ("persistence_mode", "present"):
        if raw.get(flag) is not None:
            series[flag] = as_bool(raw[flag], key(path, flag))
    # A scenario that names a board other than the model's default ("NVIDIA A100-PCIE-40GB",
    # or variant: PCIe) gets that board's NVML name, PCI id, power limits and clocks.
    default = model.variants[0].key
    product = model.nvml_name if model.variant != default else None
    return GpuSpec(index=index, model=model.key, uuid=uuid, pci_bus_id=pci.upper(), mig=mig,
                   mps=mps, clock_event_reasons=reasons, product_name=product,
                   variant=None if model.variant == default else model.variant,
                   power_limit_watts=power_limit, driver_version=driver_version, **series)


def _as_flag(value: Any, path: str) -> float:
    """A 0/1 flag of a health timeline (true/false accepted)."""
    if isinstance(value, bool):
        return float(value)
    if value not in (0, 1):
        fail(path, f"must be 0 or 1 (or true/false), got {value!r}")
    return float(value)


def _clock_reasons(raw: Any, path: str) -> tuple[tuple[float, tuple[str, ...]], ...]:
    steps: list[tuple[float, tuple[str, ...]]] = []
    for i, point in enumerate(as_list(raw, path)):
        where = item(path, i)
        if not isinstance(point, list) or len(point) != 2 or not isinstance(point[1], list):
            fail(where, f"must be [time, [reason, ...]], got {point!r}")
        t = as_duration(point[0], item(where, 0))
        if steps and t < steps[-1][0]:
            fail(item(where, 0), f"time {fmt_time(t)} is before the previous {fmt_time(steps[-1][0])}")
        for j, name in enumerate(point[1]):
            if name not in CLOCK_EVENT_REASONS:
                fail(item(item(where, 1), j), f"unknown clock event reason {name!r}"
                     f"{did_you_mean(name, CLOCK_EVENT_REASONS)}; known: {', '.join(CLOCK_EVENT_REASONS)}")
        steps.append((t, tuple(point[1])))
    return tuple(steps)
