"""Snapshot <-> JSON, as printed by `exporter snapshot` and served at /api/v1/snapshot.

Command lines are redacted (exporter.redact) on the way out, whatever produced the snapshot."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from exporter.redact import redact_cmdline


def to_jsonable(value: Any) -> Any:
    """dataclasses.asdict, except that any Mapping is followed and tuple keys become 'a/b' strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(out.get("cmdline"), str):  # the backend redacted it already; this guards other sources
            out["cmdline"] = redact_cmdline(out["cmdline"])
        return out
    if isinstance(value, Mapping):
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def _key(key: Any) -> str:
    if isinstance(key, tuple):
        return "/".join("" if part is None else str(part) for part in key)
    return str(key)


def dumps(snapshot: Any, indent: int | None = None) -> str:
    """JSON text of a Snapshot (or any dataclass tree)."""
    return json.dumps(to_jsonable(snapshot), indent=indent)
