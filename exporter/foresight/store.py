"""Persistent store of workload profiles: SQLite under --state-dir, plus JSON export/import.

Safety: the database runs in WAL mode and every save is one transaction, so a crash in the
middle of a write leaves the previous profiles intact. A file that SQLite cannot read, that
fails ``PRAGMA quick_check`` or that has another schema is renamed to
``<name>.corrupt-<unix time>`` with a warning and a fresh store is started; a single row that
does not parse is dropped with a warning. Write failures (disk full, read-only) are logged and
the exporter goes on with the profiles it holds in memory. Nothing here raises to the caller
except :class:`UserError` from :func:`import_json` for a bad file a person handed us.

Size: at most ``max_profiles`` rows; the least recently updated go first. The ``outcomes``
table (schema 2) holds what warnings and kills taught per workload
(exporter.foresight.calibration), as many rows at most; a schema 1 store gains it on open.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from exporter.errors import UserError
from exporter.inputs import value_problem
from exporter.foresight.calibration import WorkloadOutcome, outcome_from_dict, outcome_to_dict
from exporter.foresight.profiles import RECENT_RUNS, WorkloadProfile

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"  # 2: the outcomes table; a "1" store is migrated on open
DB_NAME = "profiles.sqlite3"
DEFAULT_MAX_PROFILES = 2000
JSON_FORMAT = "gpushare-workload-profiles"
JSON_VERSION = 1


class ProfileStore:
    """Profiles in ``<state_dir>/profiles.sqlite3``; see the module docstring for guarantees."""

    def __init__(self, state_dir: str | os.PathLike, max_profiles: int = DEFAULT_MAX_PROFILES) -> None:
        self.path = Path(state_dir) / DB_NAME
        self.max_profiles = max_profiles
        self.error: str | None = None  # last failure, for logs and the health metric
        self._db: sqlite3.Connection | None = None
        self._open()

    @property
    def ok(self) -> bool:
        """True while the last open/write worked."""
        return self._db is not None and self.error is None

    def _open(self) -> None:
        """Open (or create) the database; set a corrupt file aside instead of failing."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._fail(f"cannot create state directory {self.path.parent}: {exc.strerror or exc}")
            return
        problem = self._try_connect()
        if problem is None:
            return
        if self.path.exists():
            self._set_aside(problem)
            problem = self._try_connect()
        if problem is not None:
            self._fail(f"{self.path}: {problem}")

    def _try_connect(self) -> str | None:
        """Connect and check the file; None on success, else what is wrong with it."""
        db = None
        try:
            db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # with WAL: consistent after a crash
            check = db.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else 'no answer'}")
            db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS profiles "
                "(key TEXT PRIMARY KEY, data TEXT NOT NULL, updated_at REAL NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS outcomes "
                "(workload TEXT PRIMARY KEY, data TEXT NOT NULL, updated_at REAL NOT NULL)"
            )
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            # schema 1 differs only by the outcomes table, created above: migrate by saying so
            db.execute("UPDATE meta SET value = ? WHERE name = 'schema' AND value = '1'", (SCHEMA_VERSION,))
            schema = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()[0]
            if schema != SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"schema version {schema!r}, expected {SCHEMA_VERSION!r}")
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            return str(exc) or type(exc).__name__
        self._db, self.error = db, None
        return None

    def _set_aside(self, problem: str) -> None:
        """Rename the unreadable database (and its WAL files) out of the way, with a warning."""
        target = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        log.warning("state store %s is unreadable (%s); moved it to %s and starting empty", self.path, problem, target)
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(self.path) + suffix)
            if source.exists():
                try:
                    source.rename(Path(str(target) + suffix))
                except OSError as exc:
                    log.warning("could not move %s aside: %s", source, exc)

    def _fail(self, message: str) -> None:
        """Remember a failure and log it once per distinct message."""
        if message != self.error:
            log.warning("state store disabled, profiles kept in memory only: %s", message)
        self.error = message

    def load(self) -> dict[str, WorkloadProfile]:
        """Every stored profile by key; unreadable rows are skipped with a warning."""
        if self._db is None:
            return {}
        try:
            rows = self._db.execute("SELECT key, data FROM profiles").fetchall()
        except sqlite3.Error as exc:
            self._fail(f"{self.path}: read failed: {exc}")
            return {}
        profiles = {}
        for key, data in rows:
            try:
                profiles[key] = profile_from_dict(json.loads(data), f"{self.path}: row {key!r}")
            except (ValueError, UserError) as exc:
                log.warning("dropping unreadable profile: %s", exc)
        return profiles

    def save(self, profiles: Iterable[WorkloadProfile]) -> bool:
        """Upsert profiles and trim to max_profiles in one transaction; False if it failed."""
        rows = [(p.key, json.dumps(profile_to_dict(p), separators=(",", ":")), p.updated_at) for p in profiles]
        if self._db is None or not rows:
            return self._db is not None
        try:
            with _transaction(self._db):
                self._db.executemany("INSERT OR REPLACE INTO profiles VALUES (?, ?, ?)", rows)
                self._db.execute(
                    "DELETE FROM profiles WHERE key NOT IN "
                    "(SELECT key FROM profiles ORDER BY updated_at DESC, key LIMIT ?)",
                    (self.max_profiles,),
                )
        except sqlite3.OperationalError as exc:  # disk full, read-only, locked: keep the file
            self._fail(f"{self.path}: write failed: {exc}")
            return False
        except sqlite3.DatabaseError as exc:  # the file went bad under us
            self._close()
            self._set_aside(str(exc))
            self._open()
            return False
        self.error = None
        return True

    def load_outcomes(self) -> dict[str, WorkloadOutcome]:
        """Every stored workload outcome by workload; unreadable rows are skipped with a warning."""
        if self._db is None:
            return {}
        try:
            rows = self._db.execute("SELECT workload, data FROM outcomes").fetchall()
        except sqlite3.Error as exc:
            self._fail(f"{self.path}: read failed: {exc}")
            return {}
        outcomes = {}
        for workload, data in rows:
            try:
                outcomes[workload] = outcome_from_dict(json.loads(data))
            except ValueError as exc:
                log.warning("dropping unreadable outcome row %r: %s", workload, exc)
        return outcomes

    def save_outcomes(self, outcomes: Iterable[WorkloadOutcome]) -> bool:
        """Upsert workload outcomes, keep the max_profiles newest; False if it failed."""
        rows = [(o.workload, json.dumps(outcome_to_dict(o), separators=(",", ":")), o.updated_at) for o in outcomes]
        if self._db is None or not rows:
            return self._db is not None
        try:
            with _transaction(self._db):
                self._db.executemany("INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?)", rows)
                self._db.execute("DELETE FROM outcomes WHERE workload NOT IN (SELECT workload FROM outcomes "
                                 "ORDER BY updated_at DESC, workload LIMIT ?)", (self.max_profiles,))
        except sqlite3.Error as exc:  # a bad file is set aside by the next profile save
            self._fail(f"{self.path}: write failed: {exc}")
            return False
        return True

    def _close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

    def close(self) -> None:
        """Close the database (checkpointing the WAL)."""
        self._close()


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.db.execute("COMMIT")
        else:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def profile_to_dict(p: WorkloadProfile) -> dict[str, Any]:
    """JSON-ready form of a profile (the format of the store rows and of export files)."""
    return {
        "key": p.key,
        "peak_bytes": p.peak_bytes,
        "peak_offset_seconds": p.peak_offset_seconds,
        "duration_seconds": p.duration_seconds,
        "runs": p.runs,
        "samples": p.samples,
        "timeline": [[age, value] for age, value in p.timeline],
        "updated_at": p.updated_at,
        "device_bytes": p.device_bytes,
        "recent_peaks": list(p.recent_peaks),
        "recent_peak_ages": list(p.recent_peak_ages),
    }


def profile_from_dict(d: Any, place: str) -> WorkloadProfile:
    """Validate one JSON profile; raise UserError naming ``place`` and the bad field."""
    if not isinstance(d, dict):
        raise UserError(f"{place}: must be an object")

    def number(name: str, optional: bool = False, integer: bool = False) -> Any:
        value = d.get(name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
            kind = "a non-negative integer" if integer else "a non-negative number"
            raise UserError(f"{place}.{name}: must be {kind}, got {value!r}")
        if integer and not float(value).is_integer():
            raise UserError(f"{place}.{name}: must be a non-negative integer, got {value!r}")
        return int(value) if integer else float(value)

    key = d.get("key")
    if not isinstance(key, str) or not key:
        raise UserError(f"{place}.key: must be a non-empty string")
    raw_timeline = d.get("timeline", [])
    if not isinstance(raw_timeline, list):
        raise UserError(f"{place}.timeline: must be a list of [age_seconds, bytes] pairs")
    timeline = []
    for i, step in enumerate(raw_timeline):
        ok = isinstance(step, list) and len(step) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in step
        )
        if not ok:
            raise UserError(f"{place}.timeline[{i}]: must be [age_seconds, bytes], both >= 0")
        if timeline and step[0] <= timeline[-1][0]:
            raise UserError(f"{place}.timeline[{i}]: ages must increase")
        timeline.append((float(step[0]), int(step[1])))
    raw_peaks = d.get("recent_peaks", [])  # absent in files written before it existed
    if not isinstance(raw_peaks, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw_peaks
    ):
        raise UserError(f"{place}.recent_peaks: must be a list of non-negative integers (bytes)")
    raw_ages = d.get("recent_peak_ages", [])  # absent in files written before it existed
    if not isinstance(raw_ages, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 and x == x and x != float("inf")
        for x in raw_ages
    ):
        raise UserError(f"{place}.recent_peak_ages: must be a list of non-negative numbers (seconds)")
    return WorkloadProfile(
        key=key,
        peak_bytes=number("peak_bytes", integer=True),
        peak_offset_seconds=number("peak_offset_seconds"),
        duration_seconds=number("duration_seconds", optional=True),
        runs=number("runs", integer=True),
        samples=number("samples", integer=True),
        timeline=tuple(timeline),
        updated_at=number("updated_at"),
        device_bytes=number("device_bytes", optional=True, integer=True),
        recent_peaks=tuple(raw_peaks[-RECENT_RUNS:]),
        recent_peak_ages=tuple(float(x) for x in raw_ages[-RECENT_RUNS:]),
    )


def export_json(profiles: Iterable[WorkloadProfile]) -> str:
    """The JSON export document for these profiles (sorted by key, stable)."""
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "profiles": [profile_to_dict(p) for p in sorted(profiles, key=lambda p: p.key)],
    }
    return json.dumps(document, indent=1) + "\n"


def import_json(text: str, place: str) -> list[WorkloadProfile]:
    """Profiles from an export document; UserError naming ``place`` (the file) when invalid."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{place}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise UserError(f"{place}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # a number of thousands of digits
        raise UserError(f"{place}: not valid JSON: {value_problem(exc)}") from None
    if not isinstance(document, dict) or document.get("format") != JSON_FORMAT:
        raise UserError(f"{place}: not a workload profile export (expected \"format\": \"{JSON_FORMAT}\")")
    if document.get("version") != JSON_VERSION:
        raise UserError(f"{place}: version: unsupported version {document.get('version')!r}, expected {JSON_VERSION}")
    raw = document.get("profiles")
    if not isinstance(raw, list):
        raise UserError(f"{place}: profiles: must be a list")
    profiles = [profile_from_dict(entry, f"{place}: profiles[{i}]") for i, entry in enumerate(raw)]
    keys = [p.key for p in profiles]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise UserError(f"{place}: profiles: key {duplicate!r} appears more than once")
    return profiles
