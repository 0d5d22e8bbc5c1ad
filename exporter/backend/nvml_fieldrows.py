"""The entries of an ``nvmlDeviceGetFieldValues`` answer read in one step (``struct``), not
field by field through ctypes.

Why: the health reader reads five fields of each of a GPU's ~46 entries every poll (an 18-link
board: 36 of them NVLink counters); each read through ctypes builds a Python object, the value
union one more. ``struct.iter_unpack`` over the array's bytes gives the same numbers, in C
(docs/performance.md, "The last milliseconds").

The layout is taken from the entry's own ctypes class (pynvml's ``c_nvmlFieldValue_t``): the
field names, each field's ctypes type code and offset are checked against what ``struct``
would lay out; anything else (another pynvml, a platform where they differ) gets None and the
caller reads the entries through ctypes as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

_NAMES = ("fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value")
_INTS = set("bBhHiIlLqQ")
_UNSET = object()
_readers: dict[type, "tuple[struct.Struct, dict[int, Callable]] | None"] = {}  # array class -> reader

Row = tuple[int, int, int, int, int, int, "int | float"]


def field_rows(answer, value_members: dict[int, str]) -> tuple[Iterable[Row], dict[int, Callable]] | None:
    """(rows, conversions): a (fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn,
    raw value) tuple per entry of ``answer``, the raw value read as the ``ullVal`` member, and
    valueType -> the function that turns a raw value into what ``getattr(entry.value, member)``
    reads for the union member ``value_members`` names for that type (types not in it are
    read as ``ullVal``: the raw value); None when the array's layout is not one this reads
    (read the entries through ctypes then).

    ``value_members`` must be the same dict object from call to call (the conversions are
    kept per array class, made from the first one seen)."""
    kind = type(answer)
    reader = _readers.get(kind, _UNSET)
    if reader is _UNSET:
        reader = _readers[kind] = _reader(kind, value_members)
    if reader is None:
        return None
    layout, converts = reader
    return layout.iter_unpack(bytes(answer)), converts


def _reader(kind: type, value_members: dict[int, str]):
    """(Struct of one entry, valueType -> conversion of the raw ``ullVal``), or None."""
    entry = getattr(kind, "_type_", None)
    fields = getattr(entry, "_fields_", None)
    if not isinstance(fields, (list, tuple)) or tuple(name for name, *_ in fields) != _NAMES:
        return None
    union = fields[-1][1]
    members = {name: typ for name, typ, *_ in getattr(union, "_fields_", ())}
    codes = [getattr(typ, "_type_", None) for _, typ, *_ in fields[:-1]] + [getattr(members.get("ullVal"), "_type_", None)]
    if not all(isinstance(code, str) and code in _INTS for code in codes):
        return None
    for index, (name, *_rest) in enumerate(fields):  # each offset where struct puts it (native alignment)
        if getattr(entry, name).offset != struct.calcsize("@" + "".join(codes[: index + 1])) - struct.calcsize(codes[index]):
            return None
    layout = struct.Struct("@" + "".join(codes))
    import ctypes  # noqa: PLC0415 - only here, once per array class

    if layout.size != ctypes.sizeof(entry) or ctypes.sizeof(union) != struct.calcsize(codes[-1]):
        return None
    raw = struct.Struct("@" + codes[-1])
    converts = {}
    for value_type, member in value_members.items():
        code = getattr(members.get(member), "_type_", None)
        if member == "ullVal":
            continue
        if not isinstance(code, str) or code not in _INTS | {"d", "f"} or struct.calcsize(code) > raw.size:
            return None
        # the member's bytes are the union's first ones: the raw value packed back and read as it
        converts[value_type] = lambda value, read=struct.Struct("@" + code).unpack_from, pack=raw.pack: read(pack(value))[0]
    return layout, converts
