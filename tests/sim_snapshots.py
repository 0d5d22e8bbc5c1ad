"""Snapshots the simulator really produces, for recommend's tests (what `exporter snapshot --simulate
SCENARIO --at T` prints, one JSON line per time, from one backend so a series costs one load)."""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

from exporter import snapshot_json
from exporter.backend.sim import SimBackend
from exporter.identity import Identifier

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"


def snapshot_lines(scenario: str | Path, times: list[float]) -> list[str]:
    """One `exporter snapshot` JSON line per scenario time in ``times`` (ascending)."""
    backend = SimBackend(str(scenario), identifier=Identifier())
    backend.open()
    lines = []
    try:
        for t in times:
            # Activity is averaged between two samples: take one a second earlier, as the command does.
            backend.step_to(max(0.0, t - 1.0))
            backend.poll()
            backend.step_to(t)
            lines.append(snapshot_json.dumps(backend.poll()))
    finally:
        backend.close()
    return lines


def shared_series(shared_dir: Path, scenario: Path, times: list[float]) -> Path:
    """The series file of ``snapshot_lines(scenario, times)`` in ``shared_dir`` (conftest's
    ``run_shared_dir``), played once per test run: several modules read the same histories, and the
    pytest-xdist workers share the directory; the first to ask plays the scenario, another asking
    meanwhile waits on the lock and reads the same file."""
    key = hashlib.sha256(scenario.read_bytes() + repr(list(times)).encode()).hexdigest()[:16]
    path = shared_dir / f"{scenario.stem}-{key}.jsonl"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            partial = path.with_suffix(".partial")
            partial.write_text("\n".join(snapshot_lines(scenario, times)) + "\n")
            partial.replace(path)
    return path


def write_series(path: Path, scenario: str | Path, times: list[float]) -> Path:
    path.write_text("\n".join(snapshot_lines(scenario, times)) + "\n")
    return path
