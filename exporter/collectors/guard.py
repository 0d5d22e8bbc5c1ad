"""Runs every collector in isolation and reports how each one fared.

One collector raising must not blank the scrape: its families are dropped, the
others are kept, and gpushare_exporter_collector_success{collector} says 0.
Success also reflects the backend: a collector whose snapshot section failed to
read this poll reports 0 even though it ran.

The poller takes the families lean (:meth:`GuardedCollectors.collect_series`, from each
collector's ``collect_series()`` where it has one); ``collect()`` gives the same families as
prometheus_client ones, so the guard can still be registered in a CollectorRegistry.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Protocol

from prometheus_client.metrics_core import Metric

from exporter.collectors.base import Families, Family, Spec, sample_value

log = logging.getLogger(__name__)

SUCCESS = Spec(
    "gpushare_exporter_collector_success",
    "gauge",
    "1 if the collector ran without error and the backend read its data this poll, else 0.",
    ("collector",),
)
DURATION = Spec(
    "gpushare_exporter_collector_duration_seconds",
    "gauge",
    "Time the collector took to turn the latest snapshot into metrics.",
    ("collector",),
    "seconds",
)


class Collector(Protocol):
    """What the guard needs from a collector; the poller's own also have ``collect_series()``
    (lean families, see exporter.collectors.base.Family), which the guard prefers."""

    name: str

    def collect(self) -> Iterable[Metric]: ...

    def section_ok(self) -> bool: ...


class GuardedCollectors:
    """A prometheus_client collector wrapping several collectors, each one isolated."""

    def __init__(self, collectors: Iterable[Collector], clock: Callable[[], float] = time.perf_counter) -> None:
        self._collectors = tuple(collectors)
        self._clock = clock
        self._last_failure: dict[str, str] = {}  # collector -> message, to log each new failure once

    def collect(self) -> list[Metric]:
        """Families of every collector that succeeded, then the success/duration families."""
        return [family.metric() if isinstance(family, Family) else family for family in self.collect_series()]

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value from a fresh collect, as CollectorRegistry.get_sample_value says it."""
        return sample_value(self.collect_series(), name, labels)

    def collect_series(self) -> list[Family | Metric]:
        """As :meth:`collect`, lean: a collector with ``collect_series()`` gives :class:`Family`s
        (what exporter.encode writes directly), any other its prometheus_client families."""
        families: list[Family | Metric] = []
        health = Families()
        for collector in self._collectors:
            start = self._clock()
            try:
                lean = getattr(collector, "collect_series", None)
                produced = lean() if lean is not None else [family for family in collector.collect() if family.samples]
                ok = collector.section_ok()
                self._last_failure.pop(collector.name, None)
            except Exception as exc:  # noqa: BLE001 - isolation is the point
                produced, ok = [], False
                self._note_failure(collector.name, exc)
            health.add(SUCCESS, (collector.name,), 1 if ok else 0)
            health.add(DURATION, (collector.name,), max(0.0, self._clock() - start))
            families.extend(produced)
        families.extend(health.series())
        return families

    def _note_failure(self, name: str, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if self._last_failure.get(name) != message:
            # Logged once per distinct failure, not once per poll; the traceback goes to debug.
            log.warning("collector %s failed: %s", name, message)
            log.debug("collector %s traceback", name, exc_info=exc)
            self._last_failure[name] = message
