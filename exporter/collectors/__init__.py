"""Collectors: objects whose collect_series() turns the current Snapshot into lean metric
families (exporter.collectors.base.Family) and collect() into prometheus_client ones.

One collector per file. They read a Snapshot only and never call the driver.
"""

from __future__ import annotations

from typing import Callable

from exporter.collectors.base import SnapshotSource
from exporter.collectors.exporter_self import ExporterCollector, PollStats
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.guard import Collector, GuardedCollectors
from exporter.collectors.health import HealthCollector
from exporter.collectors.instances import POD
from exporter.collectors.mig import MigCollector
from exporter.collectors.mps import MpsCollector
from exporter.collectors.pods import PodCollector
from exporter.collectors.process import ProcessCollector
from exporter.collectors.simulation import SimulationCollector

__all__ = ["Collector", "GuardedCollectors", "PollStats", "default_collectors"]


def default_collectors(snapshot: SnapshotSource, stats: Callable[[], PollStats],
                       process_series: str = POD) -> list[Collector]:
    """Every collector, in the order their families appear on /metrics."""
    return [
        GpuCollector(snapshot),
        HealthCollector(snapshot),
        MigCollector(snapshot),
        ProcessCollector(snapshot, process_series),
        MpsCollector(snapshot, process_series),
        PodCollector(snapshot),
        SimulationCollector(snapshot),
        ExporterCollector(stats, snapshot),
    ]
