"""Cheap copies of the frozen record dataclasses (no imports beyond the standard library).

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, and
``dataclasses.replace`` runs that ``__init__`` after walking the fields: ~12 k instructions for
a 7-field record. The records the poll copies each time (a Snapshot given its simulation info,
the poller's PollStats, the DCGM backend's GPUs) are copied here by their ``__dict__`` instead
(docs/performance.md, "The poll, eighth pass").
"""

from __future__ import annotations

import dataclasses

_PLAIN: dict[type, bool] = {}  # dataclass -> copied without its __init__ (see replace)


def is_plain(cls) -> bool:
    """A dataclass whose __init__ only sets its fields: no __post_init__, no __slots__, every field in
    __init__ and no ClassVar or InitVar pseudo-field. Such a record built or copied by filling its
    ``__dict__`` is the object __init__ gives (replace here; nvml_types.frozen_maker and
    foresight.result.positional_maker build them so)."""
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = (dataclasses.is_dataclass(cls) and not hasattr(cls, "__post_init__")
                               and not hasattr(cls, "__slots__")
                               and len(dataclasses.fields(cls)) == len(cls.__dataclass_fields__)
                               and all(f.init for f in dataclasses.fields(cls)))
    return plain


def replace(obj, **changes):
    """``dataclasses.replace`` for the Snapshot's and the poller's frozen dataclasses, several
    times cheaper.

    For a dataclass whose __init__ only sets its fields (no __post_init__, every field in
    __init__, the fields and nothing else in __dict__) copying the attributes gives the same
    object; any other class or object, or a name that is not a field, goes through
    dataclasses.replace (and its checks).
    """
    cls = type(obj)
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = is_plain(cls)
    known = cls.__dataclass_fields__.keys() if plain else ()
    # __init__ set every field and a frozen instance loses none: anything more is e.g. a cached attribute
    if not plain or not changes.keys() <= known or len(obj.__dict__) != len(known):
        return dataclasses.replace(obj, **changes)
    new = object.__new__(cls)
    attributes = new.__dict__
    attributes.update(obj.__dict__)
    attributes.update(changes)
    return new


__all__ = ["is_plain", "replace"]
