"""One dcgmEntitiesGetLatestValues read set: its C arrays, made once, and a decode plan for them.

A poll reads two sets (the GPUs' device fields; the GPUs and GPU instances' profiling fields),
the same entities and fields every poll until the watches change. What is the same every poll
is worked out once per set and kept here (issue 22, item 3: on a one-GPU MIG node this fixed
per-poll work was most of the DCGM backend's cost):

- the arrays passed to libdcgm (entity pairs, field ids, the ~4 KiB-per-value result array);
- the record layout: one ``struct`` reads (entityGroupId, entityId, fieldId, fieldType, status)
  of every record of the result in one C call; a poll compares that tuple with the one the
  plan was made for (same entities, fields, order and types, every status 0) and, when equal,
  reads every value with a second ``struct`` made for those types, sets blanks to None and
  splits the values per entity with ``dict(zip(...))``: no per-value Reading, attribute
  read or branch on the type;
- anything else (a status, a string field, another order, bindings whose structure is not
  plain ctypes fields) goes the general way, value by value (Decoder.entity_readings), and
  gives the same values and statuses.

The result of both ways is ``(values, statuses)``: (entityGroupId, entityId) -> {fieldId:
value or None}, and the same for the non-zero DCGM_ST_* statuses only (usually empty).
"""

from __future__ import annotations

import ctypes
import struct
from typing import NamedTuple

from exporter.backend.dcgm_layout import layout_parts, record_struct
from exporter.backend.dcgm_values import Decoder

PLANS_KEPT = 4  # fast plans per set: one per layout seen (a status that comes and goes adds one)


class _Fast(NamedTuple):
    """How to read the values of one record layout (see the module docstring)."""

    values: struct.Struct  # every record's value, as the number type its fieldType says
    blanks: tuple  # per record: the type's BLANK sentinel (at or above it: no value)
    spans: tuple  # ((entityGroupId, entityId), field ids, first record, end record) per entity


class Batch:
    """The arrays and the decode plan of one read set (``entities`` x ``fields``)."""

    def __init__(self, structs, decoder: Decoder, entities: list[tuple[int, int]], fields: tuple[int, ...]):
        self.entities = len(entities)
        self.fields = len(fields)
        self.pairs = (structs.c_dcgmGroupEntityPair_t * len(entities))()
        for pair, (entity_group, entity_id) in zip(self.pairs, entities):
            pair.entityGroupId, pair.entityId = entity_group, entity_id
        self.field_ids = (ctypes.c_uint16 * len(fields))(*fields)
        self.values = (structs.c_dcgmFieldValue_v2 * (len(entities) * len(fields)))()
        self.c_entities, self.c_fields = ctypes.c_uint(len(entities)), ctypes.c_uint(len(fields))
        self._decoder = decoder
        self._parts = layout_parts(structs.c_dcgmFieldValue_v2)  # None: not plain ctypes fields
        count = len(entities) * len(fields)
        self._meta = None if self._parts is None else record_struct(
            self._parts["meta"], ctypes.sizeof(structs.c_dcgmFieldValue_v2), count)
        self._fast: dict[tuple, _Fast | None] = {}

    def decode(self) -> tuple[dict, dict]:
        """(values, statuses) of the last read into ``self.values`` (module docstring)."""
        values = self.values
        fast = None
        if self._meta is not None:
            meta = self._meta.unpack_from(values)
            fast = self._fast.get(meta, False)
            if fast is False:
                fast = self._plan(meta)
        if fast is None:
            return self._general(values)
        numbers = fast.values.unpack_from(values)
        numbers = [None if number >= blank else number for number, blank in zip(numbers, fast.blanks)]
        return {entity: dict(zip(fids, numbers[start:end])) for entity, fids, start, end in fast.spans}, {}

    def _plan(self, meta: tuple) -> _Fast | None:
        """The fast plan for records laid out as ``meta`` says; None where only the general way fits."""
        if len(self._fast) >= PLANS_KEPT:
            self._fast.clear()
        decoder, parts = self._decoder, self._parts
        size = ctypes.sizeof(type(self.values)._type_)
        kinds, blanks, spans = [], [], []
        fast = None
        for n in range(0, len(meta), 5):
            group, entity, fid, kind, status = meta[n:n + 5]
            if status != 0:
                break
            if kind == decoder.double:
                kinds.append(parts["dbl"])
                blanks.append(decoder.fp64_blank)
            elif kind in decoder.ints:
                kinds.append(parts["i64"])
                blanks.append(decoder.int64_blank)
            else:
                break  # a string or another kind: the bindings' own decoding
            record = n // 5
            if spans and spans[-1][0] == (group, entity):
                spans[-1][1].append(fid)
                spans[-1][3] = record + 1
            elif any(span[0] == (group, entity) for span in spans):
                break  # an entity's records not side by side: dict(zip()) per span would drop some
            else:
                spans.append([(group, entity), [fid], record, record + 1])
        else:
            values = record_struct([[kind] for kind in kinds], size, len(kinds), per_record=True)
            if values is not None:
                fast = _Fast(values, tuple(blanks), tuple((e, tuple(f), a, b) for e, f, a, b in spans))
        self._fast[meta] = fast
        return fast

    def _general(self, values) -> tuple[dict, dict]:
        readings = self._decoder.entity_readings(values)
        statuses = {}
        for entity, per_field in readings.items():
            failed = {fid: r.status for fid, r in per_field.items() if r.status != 0}
            if failed:
                statuses[entity] = failed
        return {entity: {fid: r.value for fid, r in per_field.items()} for entity, per_field in readings.items()}, statuses
