"""Series that exist only under --simulate (gpushare_simulation_*)."""

from __future__ import annotations

from typing import Iterable

from exporter.collectors.base import Families, SnapshotCollector, Spec
from exporter.snapshot import Snapshot

OOM_KILLS = Spec(
    "gpushare_simulation_oom_kills_total",
    "counter",
    "Simulated processes killed because their device ran out of memory.",
    ("gpu", "gi"),
)
TIME = Spec(
    "gpushare_simulation_time_seconds",
    "gauge",
    "Virtual time of the simulated scenario, seconds since its start.",
    unit="seconds",
)


class SimulationCollector(SnapshotCollector):
    """Exports the simulation families; exports nothing on real hardware."""

    name = "simulation"

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        sim = snapshot.simulation
        if sim is None:
            return out
        out.add(TIME, (), sim.time_seconds)
        # Every device that exists now starts at 0, so increase() sees the first kill too.
        kills: dict[tuple[int, str], int] = {key: 0 for key in _devices(snapshot)}
        for (gpu, gi), count in sim.oom_kills.items():
            kills[(gpu, "" if gi is None else str(gi))] = count
        for (gpu, gi), count in sorted(kills.items()):
            out.add(OOM_KILLS, (str(gpu), gi), count)
        return out


def _devices(snapshot: Snapshot) -> Iterable[tuple[int, str]]:
    """(gpu, gi) of every memory domain read this poll: each MIG instance, else the whole GPU."""
    for gpu in snapshot.gpus:
        if not gpu.up:
            continue
        if gpu.mig_mode:
            yield from ((gpu.index, str(gi)) for gi in sorted({m.gi for m in gpu.mig_instances}))
        else:
            yield (gpu.index, "")
