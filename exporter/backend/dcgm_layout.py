"""Where a c_dcgmFieldValue's members lie, and structs that read them straight from a ctypes array.

The bindings' structures decode every attribute read in Python; numbers need no decoding, so
the DCGM backend reads them with ``struct`` from the array's buffer, laid out by the
structure's own ctypes fields (exporter/backend/dcgm_values.Decoder, dcgm_batch.Batch).
Anything that is not a plain ctypes field of a size struct knows gives None here, and the
callers then take the bindings' attribute path.
"""

from __future__ import annotations

import struct


def layout_parts(cls) -> dict | None:
    """(offset, size, ctypes type) of a c_dcgmFieldValue's members: "meta" (entityGroupId,
    entityId, fieldId, fieldType, status, in that order), "i64" and "dbl" (value.i64,
    value.dbl); None unless every one is a plain ctypes field."""
    meta = [_field(cls, name) for name in ("entityGroupId", "entityId", "fieldId", "fieldType", "status")]
    value = _field(cls, "value")
    if None in meta or value is None:
        return None
    i64, dbl = _field(value[2], "i64"), _field(value[2], "dbl")
    if i64 is None or dbl is None:
        return None
    return {"meta": meta, "i64": (value[0] + i64[0], i64[1], i64[2]), "dbl": (value[0] + dbl[0], dbl[1], dbl[2])}


def record_struct(parts: list, size: int, count: int, per_record: bool = False) -> struct.Struct | None:
    """A struct reading ``parts`` ((offset, size, ctypes type) within a record) out of each of
    ``count`` records of ``size`` bytes side by side (a ctypes array), in record order; with
    ``per_record``, ``parts`` holds one such list per record. None where _struct says so."""
    flat = []
    for n in range(count):
        for offset, width, ctype in (parts[n] if per_record else parts):
            flat.append((n * size + offset, width, ctype))
    return _struct(flat, count * size)


def _field(cls, name: str):
    """(offset, size, ctypes type) of plain ctypes field ``name`` of structure/union ``cls``;
    None when it has none (or a property, or a bit field, stands in its place)."""
    types = {}
    for klass in reversed(getattr(cls, "__mro__", ())):
        types.update(field[:2] for field in vars(klass).get("_fields_", ()) if len(field) == 2)
    for klass in getattr(cls, "__mro__", ()):
        descriptor = vars(klass).get(name)
        if descriptor is not None:
            if name in types and hasattr(descriptor, "offset") and hasattr(descriptor, "size"):
                return descriptor.offset, descriptor.size, types[name]
            return None
    return None


_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


def _struct(parts: list[tuple[int, int, type]], size: int) -> struct.Struct | None:
    """A struct reading ``parts`` ((offset, size, ctypes type)) in their order out of a record of
    ``size`` bytes, native byte order; None for a type it cannot read as a number, or parts out
    of offset order (the values would come out in another order than asked)."""
    fmt, position = "=", 0
    for offset, width, ctype in parts:
        code = getattr(ctype, "_type_", None)
        if code == "d" and width == 8:
            pass
        elif isinstance(code, str) and code in "bBhHiIlLqQ" and width in _CODES:
            code = _CODES[width] if code.islower() else _CODES[width].upper()
        else:
            return None  # a char fieldType, a nested structure, a bit field: not read this way
        if offset < position:
            return None
        fmt += (f"{offset - position}x" if offset > position else "") + code
        position = offset + width
    if position > size:
        return None
    return struct.Struct(fmt + (f"{size - position}x" if size > position else ""))
