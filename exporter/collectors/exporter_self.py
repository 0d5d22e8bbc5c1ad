"""The exporter's own health series (gpushare_exporter_*), from the poller's counters.

Per-collector success and duration are exported by :mod:`exporter.collectors.guard`,
which is the only place that sees every collector run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from prometheus_client.metrics_core import Metric

from exporter.collectors.base import Families, Family, SnapshotSource, Spec


@dataclass(frozen=True)
class PollStats:
    """What the poller knows about its own polls; replaced (never mutated) after each poll."""

    backend: str
    version: str
    polls_ok: int = 0
    polls_error: int = 0
    last_duration_seconds: float | None = None  # of the latest poll, failed or not
    last_success_timestamp: float | None = None  # Unix seconds, wall clock
    last_success_monotonic: float | None = None  # monotonic seconds, for /health ages
    last_error: str | None = None  # one line, from the latest failed poll


BUILD_INFO = Spec(
    "gpushare_exporter_build_info",
    "info",
    "Version of the exporter and the backend it reads GPUs with; always 1.",
    ("version", "backend"),
)
POLL_DURATION = Spec(
    "gpushare_exporter_poll_duration_seconds",
    "gauge",
    "Wall time the latest poll of all GPUs took, failed polls included.",
    unit="seconds",
)
LAST_POLL = Spec(
    "gpushare_exporter_last_poll_timestamp_seconds",
    "gauge",
    "Unix time the latest successful poll finished.",
    unit="seconds",
)
POLLS = Spec("gpushare_exporter_polls_total", "counter", "Polls of the backend, by result (ok or error).", ("result",))
SOURCE_AVAILABLE = Spec(
    "gpushare_exporter_source_available",
    "gauge",
    "1 while a data source (nvml, dcgm, dcgm_profiling) delivers, 0 while it does not (the log says why).",
    ("source",),
)
CALL_ERRORS = Spec(
    "gpushare_exporter_poll_errors_total",
    "counter",
    "Failed driver calls since start, by call and error class (NotSupported is not an error).",
    ("call", "error"),
)


class ExporterCollector:
    """Exports the exporter's own counters; reads poll stats and the latest snapshot."""

    name = "exporter"

    def __init__(self, stats: Callable[[], PollStats], snapshot: SnapshotSource) -> None:
        self._stats = stats
        self._snapshot = snapshot

    def collect_series(self) -> list[Family]:
        """The lean families (what the poller renders)."""
        stats = self._stats()
        out = Families()
        out.add(BUILD_INFO, (stats.version, stats.backend), 1)
        out.add(POLL_DURATION, (), stats.last_duration_seconds)
        out.add(LAST_POLL, (), stats.last_success_timestamp)
        out.add(POLLS, ("ok",), stats.polls_ok)
        out.add(POLLS, ("error",), stats.polls_error)
        snapshot = self._snapshot()
        if snapshot is not None:
            for source, status in sorted(snapshot.sources.items()):
                out.add(SOURCE_AVAILABLE, (source,), 1 if status.available else 0)
            for (call, error), count in sorted(snapshot.call_errors.items()):
                out.add(CALL_ERRORS, (call, error), count)
        return out.series()

    def collect(self) -> list[Metric]:
        """prometheus_client entry point."""
        return [family.metric() for family in self.collect_series()]

    def section_ok(self) -> bool:
        """The exporter's own counters have no backend section that could fail."""
        return True
