"""HTTP connection hardening: a connection cap, read/idle/write timeouts, quiet malformed requests.

aiohttp parses requests and answers malformed ones with 400, but logs each with a traceback
at ERROR, never times out a half-sent request, and accepts any number of connections. Here:

- :class:`GuardedHandler` (aiohttp's per-connection protocol) reports malformed requests to
  the guard instead of logging tracebacks, and tells it when request bytes arrive and when a
  response is done;
- :class:`ConnectionGuard` caps open connections (at the cap the longest-idle connection is
  closed to make room, else the newcomer gets a 503), closes connections whose request is
  not complete ``read_timeout`` after its first byte, or whose response the client has not
  taken ``write_timeout`` after it started; aiohttp's keep-alive timer closes idle ones;
- :class:`WarnLimiter`: at most one WARNING line per client per window, with the count of
  what it held back; :class:`HttpStats`: counters for the self-metrics.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

WARN_WINDOW_SECONDS = 60.0
SWEEP_SECONDS = 1.0
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: 33\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
            b"too many connections; try again\r\n")
# Reasons a request or connection was turned away (label values of the self-metric; bounded).
REJECT_REASONS = ("malformed", "read_timeout", "write_timeout", "too_many_connections", "unauthorized",
                  "forbidden", "body", "rate_limited", "auth_busy")


@dataclass(frozen=True)
class HttpLimits:
    """Connection limits; seconds for the timeouts."""

    max_connections: int = 256
    read_timeout: float = 10.0  # a request (or TLS handshake) must be complete this long after its first byte
    idle_timeout: float = 120.0  # a keep-alive connection with no request in flight is closed after this
    write_timeout: float = 60.0  # a response not taken by the client after this is abandoned
    max_line_size: int = 8190  # request line and each header line, bytes
    max_headers: int = 100


class HttpStats:
    """Counters the HTTP side keeps for gpushare_exporter_http_* (read by the poll thread)."""

    def __init__(self) -> None:
        self.responses: Counter[int] = Counter()  # status code -> count
        self.rejected: Counter[str] = Counter()  # reason (REJECT_REASONS) -> count
        self.open_connections = 0
        self.reload_ok: bool | None = None  # None without a web config
        self.reload_timestamp: float | None = None  # Unix seconds of the last successful (re)load


class WarnLimiter:
    """One WARNING per client per ``window`` seconds; later lines say how many were held back."""

    def __init__(self, window: float = WARN_WINDOW_SECONDS, max_clients: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.max_clients = max_clients
        self._clock = clock
        self._clients: OrderedDict[str, list] = OrderedDict()  # client -> [last warning time, held back]

    def warn(self, client: str, message: str, *args: object) -> bool:
        """Log ``message % args`` for ``client`` unless one was logged within the window."""
        now = self._clock()
        entry = self._clients.get(client)
        if entry is not None and now - entry[0] < self.window:
            entry[1] += 1
            return False
        held = entry[1] if entry is not None else 0
        self._clients[client] = [now, 0]
        self._clients.move_to_end(client)
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        suffix = f" (and {held} more from this client in the last {self.window:g}s)" if held else ""
        log.warning(message + "%s", *args, suffix)
        return True


def client_of(peer: object) -> str:
    """The client's address without its port ('?' when unknown)."""
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return str(peer) if peer else "?"


_QUOTED = re.compile(r"""b?'[^']*'?|b?"[^"]*"?""")


def _first_line(exc: BaseException | None) -> str:
    """What was wrong, without the client's bytes (they could hold a credential)."""
    if exc is None:
        return "bad request"
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    text = _QUOTED.sub("'...'", lines[0] if lines else "").rstrip(": ")
    return " ".join(text.split())[:120] or type(exc).__name__


class GuardedHandler(RequestHandler):
    """aiohttp's connection protocol, reporting to a :class:`ConnectionGuard`."""

    def __init__(self, manager, guard: ConnectionGuard, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.client = "?"
        self.opened_at = guard.clock()
        self.partial_since: float | None = None  # request bytes waiting to form a complete request
        self.busy_since: float | None = None  # a request dispatched, its response not finished
        self.last_done = self.opened_at
        self.refused = False
        self._quiet_errors = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = client_of(transport.get_extra_info("peername"))
        if not self.guard.admit(self):
            self.refused = True
            transport.write(_REFUSAL)
            transport.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.refused:
            return
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if data and self.partial_since is None:
            self.partial_since = self.guard.clock()
        super().data_received(data)

    def request_started(self) -> None:
        """Called by the server middleware when a complete request reaches the application."""
        self.partial_since = None
        self.busy_since = self.guard.clock()

    async def finish_response(self, request, resp, start_time):
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            now = self.guard.clock()
            self.busy_since = None
            self.last_done = now
            self.guard.stats.responses[getattr(resp, "status", 0)] += 1
            if self.partial_since is not None:
                self.partial_since = now  # pipelined bytes: their read time starts now

    def handle_error(self, request, status=500, exc=None, message=None):
        if status < 500:
            self.guard.rejected("malformed", self.client, "malformed request from %s answered %d: %s",
                                self.client, status, _first_line(exc))
        self._quiet_errors = True  # aiohttp logs the traceback of every bad request: not here
        try:
            return super().handle_error(request, status, exc, message)
        finally:
            self._quiet_errors = False

    def log_exception(self, *args, **kw) -> None:
        exc = kw.get("exc_info")
        if self._quiet_errors:
            log.debug(*args, **kw)
            return
        text = (args[0] % args[1:]) if args and len(args) > 1 else (args[0] if args else "error")
        detail = _first_line(exc) if isinstance(exc, BaseException) else ""
        self.guard.warnings.warn(f"internal:{text}", "HTTP server: %s%s", text, f": {detail}" if detail else "")
        log.debug("HTTP server error details", exc_info=exc if isinstance(exc, BaseException) else None)


class ConnectionGuard:
    """Admission and timeouts for every connection of one server."""

    def __init__(self, limits: HttpLimits, stats: HttpStats | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.stats = stats or HttpStats()
        self.clock = clock
        self.warnings = WarnLimiter(clock=clock)
        self._open: dict[GuardedHandler, None] = {}  # insertion-ordered set
        self._sweeper: asyncio.Task | None = None

    def handler_factory(self, manager, loop: asyncio.AbstractEventLoop) -> Callable[[], GuardedHandler]:
        """The protocol factory for loop.create_server."""
        limits = self.limits

        def make() -> GuardedHandler:
            return GuardedHandler(
                manager, self, loop=loop, keepalive_timeout=limits.idle_timeout, tcp_keepalive=True,
                logger=logging.getLogger("exporter.web.http"), access_log=None,
                max_line_size=limits.max_line_size, max_field_size=limits.max_line_size,
                max_headers=limits.max_headers, lingering_time=0.0,
            )

        return make

    def rejected(self, reason: str, client: str, message: str, *args: object) -> None:
        """Count a turned-away request or connection; warn at most once per client per window."""
        self.stats.rejected[reason] += 1
        self.warnings.warn(client, message, *args)

    # -- admission ----------------------------------------------------------------------

    def admit(self, handler: GuardedHandler) -> bool:
        """Room for one more connection? At the cap the longest-idle one is closed for it."""
        if len(self._open) >= self.limits.max_connections:
            victim = self._longest_idle()
            if victim is None:
                self.rejected("too_many_connections", handler.client,
                              "refused a connection from %s: %d connections open (--web.max-connections)",
                              handler.client, len(self._open))
                return False
            self._close(victim)
        self._open[handler] = None
        self.stats.open_connections = len(self._open)
        return True

    def forget(self, handler: GuardedHandler) -> None:
        self._open.pop(handler, None)
        self.stats.open_connections = len(self._open)

    def _longest_idle(self) -> GuardedHandler | None:
        idle = [h for h in self._open if h.busy_since is None]
        if not idle:
            return None
        # Idle without a byte of a new request first, then the oldest partial request.
        return min(idle, key=lambda h: (h.partial_since is not None, h.partial_since or h.last_done))

    def _close(self, handler: GuardedHandler) -> None:
        self.forget(handler)
        handler.force_close()

    # -- timeouts -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic sweep (call from the event loop)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.sweep()

    def sweep(self) -> None:
        """Close connections past their read or write deadline."""
        now, limits = self.clock(), self.limits
        for handler in list(self._open):
            if handler.busy_since is not None:
                if now - handler.busy_since > limits.write_timeout:
                    self.rejected("write_timeout", handler.client, "closed a connection from %s: response not "
                                  "taken within %gs", handler.client, limits.write_timeout)
                    self._close(handler)
            elif handler.partial_since is not None and now - handler.partial_since > limits.read_timeout:
                self.rejected("read_timeout", handler.client, "closed a connection from %s: request not complete "
                              "%gs after its first byte (--web.read-timeout)", handler.client, limits.read_timeout)
                self._close(handler)


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through a :class:`ConnectionGuard` (TLS optional)."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, guard: ConnectionGuard,
                 ssl_context=None, backlog: int = 128) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port, self._guard = host, port, guard

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        factory = self._guard.handler_factory(self._runner.server, loop)
        extra = {"ssl_handshake_timeout": self._guard.limits.read_timeout} if self._ssl_context else {}
        self._server = await loop.create_server(factory, self._host, self._port, ssl=self._ssl_context,
                                                backlog=self._backlog, reuse_address=True, **extra)
        self._guard.start()

    async def stop(self) -> None:
        await self._guard.stop()
        await super().stop()
