"""`--state-dir DIR` (or an `exporter profiles export` JSON file): learned workload profiles.

Profiles are keyed ``<workload key>@<N>GiB`` (exporter/foresight/profiles.py, store.py): one
per workload and size of the device it ran on. For planning, a workload's learned peak is the
largest over its device sizes (the safe side: a job that sizes itself to its device used at
most that much anywhere); its timeline is that of its newest fully observed run.

A learned peak raises an observed workload's size, never lowers it: the window may not hold
the run that reached it. Matching is by workload key, or by the key's label (<= 48 characters)
for workloads read from Prometheus. Alone (no observed input), every profiled workload is
planned with one instance at a time, and the report says so.

The store is opened read-only: a running exporter's state directory is not touched.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

from exporter.errors import UserError
from exporter.foresight.profiles import WorkloadProfile
from exporter.foresight.store import DB_NAME, import_json, profile_from_dict
from exporter.foresight.workload import workload_label
from exporter.recommend.demand import Basis, Demand, Workload

_DEVICE_SUFFIX = re.compile(r"^(?P<key>.+)@\d+GiB$")


def load_profiles(path: str) -> list[WorkloadProfile]:
    """Profiles of a state directory (read-only) or of a JSON export file."""
    p = Path(path)
    if p.is_file():
        try:
            return import_json(p.read_text(encoding="utf-8"), path)
        except UnicodeDecodeError:
            raise UserError(f"--state-dir {path}: not UTF-8 text (expected `exporter profiles export` JSON)") from None
    if not p.is_dir():
        raise UserError(f"--state-dir {path}: no such directory or file")
    db_path = p / DB_NAME
    if not db_path.is_file():
        raise UserError(f"--state-dir {path}: no learned profiles here (no {DB_NAME})")
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0)
        try:
            rows = db.execute("SELECT key, data FROM profiles ORDER BY key").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise UserError(f"--state-dir {path}: cannot read {DB_NAME}: {exc}") from None
    profiles = []
    for key, data in rows:
        try:
            profiles.append(profile_from_dict(json.loads(data), f"{db_path}: {key!r}"))
        except (ValueError, UserError):
            continue  # the exporter drops such a row too
    return profiles


def by_workload(profiles: list[WorkloadProfile]) -> dict[str, tuple[int, tuple | None, int]]:
    """workload key -> (largest learned peak, newest usable run's timeline, runs)."""
    out: dict[str, tuple[int, tuple | None, int, float]] = {}
    for p in profiles:
        match = _DEVICE_SUFFIX.match(p.key)
        key = match.group("key") if match else p.key
        peak, timeline, runs, newest = out.get(key, (0, None, 0, -1.0))
        if p.usable and p.updated_at > newest:
            timeline, newest = p.scaled_timeline(), p.updated_at
        out[key] = (max(peak, p.peak_bytes), timeline, runs + p.runs, newest)
    return {k: v[:3] for k, v in out.items()}


def apply_profiles(demand: Demand, profiles: list[WorkloadProfile], margin: float, path: str) -> Demand:
    """``demand`` with learned peaks and timelines applied; profiled workloads alone if it has none."""
    learned = by_workload(profiles)
    if not learned:
        return replace(demand, notes=(*demand.notes, f"--state-dir {path}: no learned profile"))
    if not demand.workloads:
        workloads = tuple(
            Workload(name=key, peak_memory_bytes=peak, margin_ratio=margin, count=1, timeline=timeline or None,
                     sized_by=f"learned profile ({runs} run{'s' if runs != 1 else ''})")
            for key, (peak, timeline, runs) in sorted(learned.items()) if peak > 0)
        return replace(demand, workloads=workloads,
                       sources=(*demand.sources, f"learned profiles {path} ({len(workloads)} workloads)"),
                       notes=(*demand.notes, "learned profiles alone do not say how many instances run at once: "
                                             "each workload is planned with one"))
    labels = {workload_label(k): k for k in learned}
    out, raised = [], 0
    for w in demand.workloads:
        base = w.name.rsplit(" [", 1)[0] if w.name.endswith("]") else w.name
        key = base if base in learned else labels.get(base)
        if key is None:
            out.append(w)
            continue
        peak, timeline, runs = learned[key]
        changes: dict = {}
        if peak > w.peak_memory_bytes:
            changes.update(peak_memory_bytes=peak, sized_by=f"{w.sized_by}, raised to its learned profile")
            raised += 1
        if w.timeline is None and timeline:
            changes["timeline"] = timeline
        out.append(replace(w, **changes) if changes else w)
    basis = replace(demand.basis, learned_profiles=demand.basis.learned_profiles + raised) \
        if isinstance(demand.basis, Basis) else demand.basis
    return replace(demand, workloads=tuple(out), basis=basis,
                   sources=(*demand.sources, f"learned profiles {path} ({len(learned)} workloads)"))
