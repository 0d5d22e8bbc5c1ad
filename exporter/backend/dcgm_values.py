"""Which DCGM fields the backend watches, and how their values become Snapshot values.

Fields are named by number: DCGM 4.6 renamed the constants, the ids stayed
(shared/reference/dcgm_k8s_facts.md §A5-A7). A value is ``None`` when DCGM has none: a
non-zero status, or a blank sentinel (BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED;
DCGM 4.5 returns blanks where 4.4 returned 0). None is exported as an absent series, never 0.
"""

from __future__ import annotations

import ctypes
from typing import Mapping, NamedTuple

from exporter.backend.dcgm_layout import layout_parts, record_struct
from exporter.snapshot import Activity

# Device fields (GPU entities) -> what they give. Units in DCGM: MHz, degrees C, W, mJ, percent, counts.
DEVICE_FIELDS = {
    100: "clock:sm",
    101: "clock:memory",
    102: "clock:video",
    150: "temperature",
    155: "power",
    156: "energy",
    164: "power_limit",
    203: "utilization",
    204: "memory_utilization",
    310: "ecc_corrected",
    311: "ecc_uncorrected",
    # Health (issue 21); units: °C, count, %, ns, pages, rows, 0/1 flags.
    140: "memory_temperature",
    202: "pcie_replays",
    206: "encoder_utilization",
    207: "decoder_utilization",
    240: "power_violation",
    241: "thermal_violation",
    242: "sync_boost_violation",
    243: "board_limit_violation",
    244: "low_utilization_violation",
    245: "reliability_violation",
    390: "retired_sbe",
    391: "retired_dbe",
    392: "retired_pending",
    393: "remapped_rows_uncorrectable",
    394: "remapped_rows_correctable",
    395: "row_remap_failure",
    396: "row_remap_pending",
}
# DCGM violation field -> DeviceHealth.clock_event_seconds key.
VIOLATION_FIELDS = {240: "power", 241: "thermal", 242: "sync_boost", 243: "board_limit",
                    244: "low_utilization", 245: "reliability"}
# What the NVML GPU reader does not read for a GPU whose device fields DCGM supplies
# (keys of exporter.backend.nvml_device.GpuReader.provided). The graphics clock (DCGM has no
# field for it), clock event reasons (DCGM gives no "supported" mask), memory (NVML counts
# bytes, DCGM MiB), MIG mode, compute mode and XID counts stay with NVML.
DEVICE_PROVIDES = frozenset({"utilization", "power", "power_limit", "energy", "temperature",
                             "clock:sm", "clock:memory", "clock:video", "ecc", "health"})
# Profiling (DCP) fields on GPU and GPU-instance entities -> Activity field. Ratios 0..1.
PROFILING_FIELDS = {
    1001: "graphics_active",
    1002: "sm_active",
    1003: "sm_occupancy",
    1004: "tensor_active",
    1005: "dram_active",
    1006: "fp64_active",
    1007: "fp32_active",
    1008: "fp16_active",
}
PROFILING_PROVIDES = frozenset({"activity", "mig_activity"})
# Field labels in gpushare_exporter_poll_errors_total{call="dcgm:<id>:<what>"}.
FIELD_LABELS = {fid: f"dcgm:{fid}:{what}" for fid, what in {**DEVICE_FIELDS, **PROFILING_FIELDS}.items()}


class Reading(NamedTuple):
    """One field value as read: ``value`` None when blank or failed; ``status`` the DCGM_ST_* code.

    A named tuple: a MIG node's poll makes hundreds, and a tuple is made several times faster
    than a frozen dataclass (Decoder.entity_readings makes them with tuple.__new__)."""

    value: float | int | str | None
    status: int = 0


BLANK = Reading(None)  # a blank value (no status): shared, not made per value
_new_tuple = tuple.__new__


class Decoder:
    """c_dcgmFieldValue_v1/v2 -> Reading, with the bindings' blank sentinels (read once).

    A value is blank when it is at or above its type's BLANK sentinel (dcgmvalue's
    DCGM_*_IS_BLANK test); the comparisons are inlined because a poll decodes one value per
    (entity, field), hundreds on a MIG node.
    """

    def __init__(self, bindings):
        fields, value = bindings.fields, bindings.value
        self.double = ord(fields.DCGM_FT_DOUBLE)
        self.ints = (ord(fields.DCGM_FT_INT64), ord(fields.DCGM_FT_TIMESTAMP))
        self.string = ord(fields.DCGM_FT_STRING)
        self.fp64_blank = value.DCGM_FP64_BLANK
        self.int64_blank = value.DCGM_INT64_BLANK
        self.str_is_blank = value.DCGM_STR_IS_BLANK
        self._layouts: dict[type, tuple | None] = {}

    def __call__(self, fv) -> Reading:
        status = fv.status
        if status != 0:
            return Reading(None, int(status))
        kind = fv.fieldType
        kind = ord(kind) if isinstance(kind, str) else kind
        if kind == self.double:
            number = fv.value.dbl
            return Reading(None if number >= self.fp64_blank else float(number))
        if kind in self.ints:
            number = fv.value.i64
            return Reading(None if number >= self.int64_blank else int(number))
        if kind == self.string:
            text = fv.value.str
            return Reading(None if self.str_is_blank(text) else str(text))
        return Reading(None)


    def entity_readings(self, values) -> dict[tuple[int, int], dict[int, Reading]]:
        """(entityGroupId, entityId) -> {fieldId: Reading} for the values of one
        dcgmEntitiesGetLatestValues call (same Readings as calling the decoder on each).

        The bindings' structures decode every attribute read in Python (C strings to str) and
        make an object per element read; numbers need neither, so a ctypes array of plain
        ctypes fields is read with struct, straight from its buffer (one C call per value and
        kind). Strings, errors and anything else take the bindings' own path, value by value.
        """
        out: dict[tuple[int, int], dict[int, Reading]] = {}
        layout = self._layout(values._type_) if isinstance(values, ctypes.Array) else None
        if layout is None:
            for fv in values:  # the order of the returned values is not guaranteed
                _put(out, (fv.entityGroupId, fv.entityId), fv.fieldId, self(fv))
            return out
        numbers, doubles = layout
        double, ints, fp64_blank, int64_blank = self.double, self.ints, self.fp64_blank, self.int64_blank
        for n, ((group, entity, fid, kind, status, number), (dbl,)) in enumerate(
                zip(numbers.iter_unpack(values), doubles.iter_unpack(values))):
            if status == 0 and kind == double:
                reading = BLANK if dbl >= fp64_blank else _new_tuple(Reading, (float(dbl), 0))
            elif status == 0 and kind in ints:
                reading = BLANK if number >= int64_blank else _new_tuple(Reading, (int(number), 0))
            else:  # errors, strings: the bindings' own path
                reading = self(values[n])
            per_entity = out.get((group, entity))
            if per_entity is None:
                per_entity = out[(group, entity)] = {}
            per_entity[fid] = reading
        return out

    def _layout(self, cls):
        """(numbers, doubles): structs reading (entityGroupId, entityId, fieldId, fieldType,
        status, value.i64) and (value.dbl,) from each element of an array of ``cls``, laid out
        by its ctypes fields; None unless every one is a plain ctypes field of a size struct knows."""
        cached = self._layouts.get(cls, False)
        if cached is not False:
            return cached
        parts = layout_parts(cls)
        layout = None
        if parts is not None:
            numbers = record_struct(parts["meta"] + [parts["i64"]], ctypes.sizeof(cls), 1)
            doubles = record_struct([parts["dbl"]], ctypes.sizeof(cls), 1)
            if numbers is not None and doubles is not None:
                layout = (numbers, doubles)
        self._layouts[cls] = layout
        return layout


def _put(out: dict, entity: tuple[int, int], fid: int, reading: Reading) -> None:
    per_entity = out.get(entity)
    if per_entity is None:
        per_entity = out[entity] = {}
    per_entity[fid] = reading


def decode(bindings, fv) -> Reading:
    """One value (see Decoder; use a Decoder for many)."""
    return Decoder(bindings)(fv)


def device_values(values: Mapping[int, object | None]) -> dict:
    """GpuInfo keyword values from device field values (absent ones stay None)."""
    get = values.get  # one look-up per field: a poll does this for every GPU
    utilization, memory_utilization, power, limit = get(203), get(204), get(155), get(164)
    energy, temperature = get(156), get(150)
    out = {
        "utilization_ratio": None if utilization is None else utilization * 0.01,
        "memory_utilization_ratio": None if memory_utilization is None else memory_utilization * 0.01,
        "power_watts": None if power is None else power * 1.0,
        "power_limit_watts": None if limit is None else limit * 1.0,
        "energy_joules": None if energy is None else energy * 1e-3,  # mJ -> J
        "temperature_celsius": None if temperature is None else float(temperature * 1.0),
    }
    clocks = {}
    for fid, name in ((100, "sm"), (101, "memory"), (102, "video")):
        mhz = get(fid)
        if mhz is not None:
            clocks[name] = mhz * 1e6
    ecc = {}
    for fid, name in ((310, "corrected"), (311, "uncorrected")):
        count = get(fid)
        if count is not None:
            ecc[name] = int(count)
    return {"values": out, "clocks": clocks, "ecc": ecc, "health": health_values(values)}


def health_values(values: Mapping[int, object | None]) -> dict:
    """DeviceHealth keyword values from DCGM's health fields (what the NVML reader then skips:
    exporter.backend.nvml_health). Absent values stay None / out of the mappings."""

    get = values.get  # the mapping's own method: ~24 look-ups per GPU and poll
    out: dict = {}
    if get(140) is not None:
        out["memory_temperature_celsius"] = float(get(140))
    if get(202) is not None:
        out["pcie_replay_errors"] = int(get(202))
    for fid, key in ((206, "encoder_utilization_ratio"), (207, "decoder_utilization_ratio")):
        if get(fid) is not None:
            out[key] = get(fid) / 100.0
    out["clock_event_seconds"] = {key: get(fid) / 1e9 for fid, key in VIOLATION_FIELDS.items()
                                  if get(fid) is not None}  # ns -> s
    out["retired_pages"] = {key: int(get(fid)) for fid, key in ((390, "single_bit_ecc"), (391, "double_bit_ecc"))
                            if get(fid) is not None}
    if out["retired_pages"] and get(392) is not None:
        out["retired_pages_pending"] = bool(get(392))
    out["remapped_rows"] = {key: int(get(fid)) for fid, key in ((394, "correctable"), (393, "uncorrectable"))
                            if get(fid) is not None}
    if get(396) is not None:
        out["row_remap_pending"] = bool(get(396))
    if get(395) is not None:
        out["row_remap_failure"] = bool(get(395))
    return out


def activity(values: Mapping[int, object | None]) -> Activity:
    """Activity from profiling field values; ratios clamped to 0..1 (DCGM can overshoot a little)."""
    return Activity(**activity_values(values))


_PROFILING_ITEMS = tuple(PROFILING_FIELDS.items())


def activity_values(values: Mapping[int, object | None]) -> dict:
    """Activity keyword values from profiling field values, clamped to 0..1 (absent: left out).

    What min(1.0, max(0.0, v)) gives, without its two calls: v itself for 0 < v <= 1, 1.0
    above (+inf too), 0.0 for the rest (0.0, -0.0, negatives and NaN, which max(0.0, v)
    turns into its first argument, 0.0)."""
    out = {}
    for fid, pipe in _PROFILING_ITEMS:
        value = values.get(fid)
        if value is not None:
            value = float(value)
            out[pipe] = value if 0.0 < value <= 1.0 else (1.0 if value > 1.0 else 0.0)
    return out
