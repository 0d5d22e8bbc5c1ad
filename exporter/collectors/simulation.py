"""Series that exist only under --simulate (gpushare_simulation_*)."""

from __future__ import annotations

from typing import Iterable

from prometheus_client.metrics_core import Metric

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

    def families(self, snapshot: Snapshot) -> Iterable[Metric]:
        out = Families()
        sim = snapshot.simulation
        if sim is None:
            return out
        out.add(TIME, (), sim.time_seconds)
        for (gpu, gi), kills in sorted(sim.oom_kills.items(), key=lambda item: (item[0][0], str(item[0][1]))):
            out.add(OOM_KILLS, (str(gpu), "" if gi is None else str(gi)), kills)
        return out
