"""What the second listener (--compat-listen) serves: the dcgm-exporter output on /metrics, and
/health, / and /api/v1/snapshot as the main listener has them (exporter.server)."""

from __future__ import annotations

import gzip

from exporter.compat.dcgm_exporter import CONTENT_TYPE, DcgmExporterOutput
from exporter.config import parse_listen
from exporter.poller import Health, Poller
from exporter.server import Server, start_server
from exporter.web.guard import HttpLimits
from exporter.web.live import LiveWebConfig


class CompatExposition:
    """The dcgm-exporter text of one poll, in the shape exporter.server expects of an Exposition.

    dcgm-exporter answers every scrape in the text format 0.0.4; so does this, whatever the
    Accept header asks, so that Prometheus stores its counters under their own names.
    """

    def __init__(self, text: bytes, poller: Poller, output: DcgmExporterOutput) -> None:
        self._text = text
        self._gzipped: bytes | None = None
        self._poller = poller
        self.snapshot = output.snapshot

    def body(self, *, openmetrics_format: bool, gzipped: bool) -> bytes:
        if not gzipped:
            return self._text
        if self._gzipped is None:  # a race renders it twice at worst: same bytes
            self._gzipped = gzip.compress(self._text, compresslevel=6, mtime=0)
        return self._gzipped

    @staticmethod
    def content_type(openmetrics_format: bool) -> str:
        return CONTENT_TYPE

    def snapshot_json(self) -> bytes | None:
        main = self._poller.exposition
        return None if main is None else main.snapshot_json()


class CompatView:
    """exporter.server.PollerView over the poller, with the dcgm-exporter output as exposition."""

    def __init__(self, poller: Poller, output: DcgmExporterOutput) -> None:
        self._poller = poller
        self._output = output
        self._current: CompatExposition | None = None

    @property
    def interval(self) -> float:
        return self._poller.interval

    @property
    def version(self) -> str:
        return self._poller.version

    @property
    def backend_name(self) -> str:
        return self._poller.backend_name

    @property
    def backend_reason(self) -> str:
        return self._poller.backend_reason

    @property
    def exposition(self) -> CompatExposition | None:
        text = self._output.body
        if text is None:
            return None  # 503 until the first good poll, as on the main listener
        current = self._current
        if current is None or current._text is not text:
            current = self._current = CompatExposition(text, self._poller, self._output)
        return current

    def health(self) -> Health:
        return self._poller.health()


async def start_compat_server(poller: Poller, output: DcgmExporterOutput, listen: str,
                              web_config: LiveWebConfig | None = None, limits: HttpLimits | None = None) -> Server:
    """The --compat-listen listener: the main listener's web config (TLS, client certificates,
    basic auth, headers, rate limit) and limits, in front of the dcgm-exporter output.
    OSError when the address cannot be bound (the caller names the flag)."""
    host, port = parse_listen(listen)
    return await start_server(CompatView(poller, output), host, port, web_config=web_config, limits=limits,
                              stats=web_config.stats if web_config is not None else None)
