"""The simulated libdcgm, part 3: numeric field values written into the caller's array as C writes them.

Used by exporter.sim.fakedcgm.hostwatch (dcgmEntitiesGetLatestValues). ``sample`` is a
hostwatch.Sample: (t, value, blank, status).
"""

from __future__ import annotations

import struct
from ctypes import Structure, Union, sizeof
from typing import ClassVar

from exporter.sim.fakedcgm import fieldtable

# Blank sentinels (dcgmvalue): the type's BLANK plus an offset (hostwatch: NO_DATA, NOT_FOUND, NOT_SUPPORTED).
INT64_BLANK, FP64_BLANK = 0x7FFFFFFFFFFFFFF0, 140737488355328.0


class ValueWriter:
    """Writes numeric dcgmFieldValue_v2 records straight into the caller's array, as libdcgm's C
    code does (the ctypes attribute path through the fake bindings' structure class costs about
    seven Python calls per value). The layout comes from the array's own ctypes fields; the
    bytes written are those the attribute path writes (version, entity, field id, type, status,
    timestamp, the union's 8 numeric bytes; ``unused`` and the rest of the union untouched).
    Strings, and values a struct format cannot hold as ctypes would (ctypes wraps an out-of-range
    integer; struct refuses it), take the attribute path (``write`` returns False)."""

    _HEAD = struct.Struct("IIIHhi")  # version, entityGroupId, entityId, fieldId, fieldType, status
    _INT = struct.Struct("qq")  # ts, value.i64
    _DBL = struct.Struct("qd")  # ts, value.dbl
    _layouts: ClassVar[dict] = {}  # element type -> (size, offset of ts) or None when it is not the expected layout

    def __init__(self, values, size: int, ts_at: int):
        self.buffer = memoryview(values).cast("B")
        self.size, self.ts_at = size, ts_at

    @classmethod
    def of(cls, values):
        kind = getattr(values, "_type_", None)
        if kind is None:
            return None
        layout = cls._layouts.get(kind, False)
        if layout is False:
            layout = cls._layouts[kind] = cls._layout(kind)
        return None if layout is None else cls(values, *layout)

    @classmethod
    def _layout(cls, kind):
        """(element size, ts offset) when ``kind`` is dcgmFieldValue_v2's C layout, else None."""
        try:
            fields = [name for name, *_ in kind._fields_]
            offsets = [getattr(kind, name).offset for name in fields]
            union = dict(kind._fields_)["value"]
        except (AttributeError, TypeError, KeyError):
            return None
        expected = ["version", "entityGroupId", "entityId", "fieldId", "fieldType", "status", "unused", "ts", "value"]
        if (fields != expected or offsets[:6] != [0, 4, 8, 12, 14, 16] or offsets[8] != offsets[7] + 8
                or not issubclass(kind, Structure) or not issubclass(union, Union)
                or union.i64.offset != 0 or union.dbl.offset != 0):
            return None
        return sizeof(kind), offsets[7]

    def write(self, index: int, eg: int, eid: int, fid: int, sample, boot: float) -> bool:
        fd = fieldtable.FIELDS.get(fid)
        kind = fd.type if fd else "i"
        if kind == "s":
            return False
        ts = 0 if sample.t is None else int(round((boot + sample.t) * 1_000_000))
        base = index * self.size
        try:
            if kind == "d":
                body = self._DBL, (FP64_BLANK + sample.blank if sample.value is None else float(sample.value))
            else:
                body = self._INT, (INT64_BLANK + sample.blank if sample.value is None else int(sample.value))
            # both packs checked before either writes (a refused value leaves the record to the slow path)
            head = self._HEAD.pack((2 << 24) | 0, eg, eid, fid, ord(kind), sample.status)
            tail = body[0].pack(ts, body[1])
        except struct.error:
            return False
        buffer = self.buffer
        buffer[base:base + 20] = head
        buffer[base + self.ts_at:base + self.ts_at + 16] = tail
        return True
