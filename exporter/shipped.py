"""Scenarios and docs shipped inside the package: ``--simulate NAME`` works from any directory,
and the landing page links the docs the exporter serves at ``/docs/<name>.md``.

``exporter/scenarios`` and ``exporter/docs`` hold the same files as ``examples/scenarios`` and
``docs`` in a checkout (the package directories link there; wheels and sdists carry copies). A ``--simulate`` value is a
path when that file exists, else the name of a shipped scenario, with or without ``.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path

from exporter.errors import UserError

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
DOC_DIR = Path(__file__).resolve().parent / "docs"


def shipped_docs() -> dict[str, Path]:
    """File name (``metrics.md``) -> path of every shipped doc."""
    if not DOC_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(DOC_DIR.glob("*.md"))}


def shipped_scenarios() -> list[str]:
    """Names of the shipped scenarios, sorted."""
    if not SCENARIO_DIR.is_dir():
        return []
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def resolve_scenario(value: str, flag: str = "--simulate") -> str:
    """The scenario file ``value`` names: an existing path, else a shipped scenario; else UserError."""
    if os.path.isfile(value):
        return value
    if os.path.isdir(value):
        raise UserError(f"{flag} {value}: is a directory, not a scenario file")
    name = value[:-len(".yaml")] if value.endswith(".yaml") else value
    candidate = SCENARIO_DIR / f"{name}.yaml"
    if os.sep not in name and candidate.is_file():
        return str(candidate)
    names = ", ".join(shipped_scenarios()) or "none installed"
    raise UserError(f"{flag} {value}: no such file, nor a shipped scenario (shipped: {names})")
