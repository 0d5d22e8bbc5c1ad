"""Snapshots the simulator really produces, for recommend's tests (what `exporter snapshot --simulate
SCENARIO --at T` prints, one JSON line per time, from one backend so a series costs one load)."""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Callable
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
    ``run_shared_dir``), played once per test run: several modules read the same histories."""
    return shared_file(shared_dir, f"{scenario.stem}-snapshots", scenario.read_bytes() + repr(list(times)).encode(),
                       lambda: "\n".join(snapshot_lines(scenario, times)) + "\n")


def shared_lines(shared_dir: Path, scenario: Path, times: list[float]) -> list[str]:
    """``snapshot_lines(scenario, times)`` from :func:`shared_series`'s file."""
    return shared_series(shared_dir, scenario, times).read_text().split("\n")[:-1]


def shared_file(shared_dir: Path, name: str, key: bytes, make: Callable[[], str]) -> Path:
    """``make()``'s text in a file of ``shared_dir`` named after ``name`` and a hash of ``key``, made
    once per test run: the pytest-xdist workers share the directory; the first to ask makes it,
    another asking meanwhile waits on the lock and reads the same file."""
    path = shared_dir / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.txt"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            partial = path.with_suffix(".partial")
            partial.write_text(make())
            partial.replace(path)
    return path


def write_series(path: Path, scenario: str | Path, times: list[float]) -> Path:
    path.write_text("\n".join(snapshot_lines(scenario, times)) + "\n")
    return path
