"""The HTTP server's own series (gpushare_exporter_http_*, web config reloads), from HttpStats.

The counters are kept by the event loop (exporter.web.guard) and read here by the poll
thread once per poll, so a scrape shows them as of the latest poll.
"""

from __future__ import annotations

from prometheus_client.metrics_core import Metric

from exporter.collectors.base import Families, Family, Spec
from exporter.web.guard import REJECT_REASONS, HttpStats

RESPONSES = Spec("gpushare_exporter_http_responses_total", "counter",
                 "HTTP responses sent, by status code.", ("code",))
REJECTED = Spec("gpushare_exporter_http_rejected_total", "counter",
                "Requests and connections turned away, by reason (malformed, read_timeout, write_timeout, "
                "too_many_connections, unauthorized, forbidden, body, rate_limited, auth_busy).", ("reason",))
CONNECTIONS = Spec("gpushare_exporter_http_connections", "gauge", "HTTP connections open.")
RELOAD_OK = Spec("gpushare_exporter_web_config_last_reload_successful", "gauge",
                 "1 when the last load or reload of --web.config.file succeeded, 0 when the previous config "
                 "is still in force because the file is bad.")
RELOAD_TIME = Spec("gpushare_exporter_web_config_last_reload_success_timestamp_seconds", "gauge",
                   "Unix time the web config was last loaded successfully.", unit="seconds")


class HttpCollector:
    """prometheus_client collector over an :class:`HttpStats`."""

    name = "http"

    def __init__(self, stats: HttpStats) -> None:
        self.stats = stats

    def section_ok(self) -> bool:
        return True

    def collect_series(self) -> list[Family]:
        stats = self.stats
        out = Families()
        for code, count in sorted(_copy(stats.responses).items()):
            out.add(RESPONSES, (str(code),), count)
        rejected = _copy(stats.rejected)
        for reason in REJECT_REASONS:
            out.add(REJECTED, (reason,), rejected.get(reason, 0))
        out.add(CONNECTIONS, (), stats.open_connections)
        out.add(RELOAD_OK, (), None if stats.reload_ok is None else int(stats.reload_ok))
        out.add(RELOAD_TIME, (), stats.reload_timestamp)
        return out.series()

    def collect(self) -> list[Metric]:
        """prometheus_client entry point."""
        return [family.metric() for family in self.collect_series()]


def _copy(counter) -> dict:
    """A copy of a counter the event loop may be adding a key to at this very moment."""
    for _ in range(5):
        try:
            return dict(counter)
        except RuntimeError:  # dictionary changed size during iteration
            continue
    return {}
