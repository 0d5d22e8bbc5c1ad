"""Turns collected metric families into the bytes /metrics serves.

The poller collects once per poll into an immutable :class:`Exposition`; the HTTP
server only hands out its bytes. Each format variant (text 0.0.4 or OpenMetrics, plain
or gzip) is encoded on first request and memoised for the life of the exposition; the
poller encodes the variants scrapers have been asking for in its own thread, before the
swap, so a scrape normally finds its bytes ready.
"""

from __future__ import annotations

import gzip
import threading
from typing import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as _OPENMETRICS_1_0

from exporter import encode, snapshot_json
from exporter.collectors import GuardedCollectors, PollStats, default_collectors
from exporter.collectors.base import Family, SnapshotSource
from exporter.collectors.guard import Collector
from exporter.collectors.instances import POD
from exporter.prerender import Variant
from exporter.snapshot import Snapshot

TEXT_CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
OPENMETRICS_CONTENT_TYPE = _OPENMETRICS_1_0


class Exposition:
    """One poll's worth of /metrics, immutable once built.

    ``created_monotonic`` is when it was rendered; ``snapshot`` is the poll it was
    rendered from (None when no poll has succeeded yet), for the landing page.
    """

    def __init__(self, families: Iterable[Family | Metric], snapshot: Snapshot | None,
                 created_monotonic: float) -> None:
        self._families = tuple(families)
        self.snapshot = snapshot
        self.created_monotonic = created_monotonic
        self._lock = threading.Lock()
        self._memo: dict[Variant, bytes] = {}
        self._requested: set[Variant] = set()
        self._json: bytes | None = None

    def body(self, *, openmetrics_format: bool, gzipped: bool) -> bytes:
        """The exposition as a scrape asked for it; the poller pre-renders what scrapes ask."""
        key = (openmetrics_format, gzipped)
        self._requested.add(key)  # set.add is atomic under the GIL
        return self.variant(key)

    def variant(self, key: Variant) -> bytes:
        """The (openmetrics, gzip) variant; each is encoded at most once."""
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        with self._lock:  # double-checked: two concurrent first requests render once
            cached = self._memo.get(key)
            if cached is None:
                openmetrics_format, gzipped = key
                plain = self._plain(openmetrics_format)
                # mtime=0 keeps the gzip bytes a pure function of the text.
                cached = gzip.compress(plain, compresslevel=6, mtime=0) if gzipped else plain
                self._memo[key] = cached
            return cached

    @property
    def text(self) -> bytes:
        """The Prometheus text format (0.0.4), uncompressed; not counted as a scrape's request."""
        return self.variant((False, False))

    def _plain(self, openmetrics_format: bool) -> bytes:
        # Called with the lock held; the uncompressed variant may already be memoised.
        cached = self._memo.get((openmetrics_format, False))
        if cached is None:
            cached = (encode.openmetrics if openmetrics_format else encode.text)(self._families)
            self._memo[(openmetrics_format, False)] = cached
        return cached

    def snapshot_json(self) -> bytes | None:
        """The snapshot as JSON (for /api/v1/snapshot), rendered at most once; None before a poll."""
        if self.snapshot is None:
            return None
        with self._lock:
            if self._json is None:
                self._json = snapshot_json.dumps(self.snapshot).encode()
            return self._json

    @staticmethod
    def content_type(openmetrics_format: bool) -> str:
        """Content-Type header value for the asked format."""
        return OPENMETRICS_CONTENT_TYPE if openmetrics_format else TEXT_CONTENT_TYPE

    def rendered_variants(self) -> frozenset[Variant]:
        """(openmetrics, gzip) variants rendered so far; lets tests see the laziness."""
        return frozenset(self._memo)

    def requested_variants(self) -> frozenset[Variant]:
        """(openmetrics, gzip) variants scrapes have asked this exposition for."""
        return frozenset(self._requested)


def build_registry(
    snapshot: SnapshotSource, stats: Callable[[], PollStats], extra: Sequence[Collector] = (),
    process_series: str = POD,
) -> GuardedCollectors:
    """Every collector behind the failure guard.

    ``extra`` collectors (e.g. forecasts) go after the snapshot collectors and before the
    exporter's own; each needs ``name``, ``collect()`` and ``section_ok()``, and may have
    ``collect_series()``. What comes back stands in for a prometheus_client registry:
    ``collect()`` and ``get_sample_value()`` work on it as on a CollectorRegistry, and it can
    be registered in one.
    """
    collectors = default_collectors(snapshot, stats, process_series)
    collectors[-1:-1] = list(extra)
    return GuardedCollectors(collectors)


def render(registry: "GuardedCollectors | CollectorRegistry", snapshot: Snapshot | None,
           created_monotonic: float) -> Exposition:
    """Collect once and freeze the result: lean families where the collectors give them
    (exporter.collectors.base.Family), which the encoder writes without prometheus_client objects."""
    lean = getattr(registry, "collect_series", None)
    return Exposition(lean() if lean is not None else registry.collect(), snapshot, created_monotonic)
