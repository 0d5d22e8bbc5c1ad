"""Snapshots the simulator really produces, for recommend's tests (what `exporter snapshot --simulate
SCENARIO --at T` prints, one JSON line per time, from one backend so a series costs one load)."""

from __future__ import annotations

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


def write_series(path: Path, scenario: str | Path, times: list[float]) -> Path:
    path.write_text("\n".join(snapshot_lines(scenario, times)) + "\n")
    return path
