"""HTTP front end (aiohttp): serves the poller's cached exposition, health and a landing page.

No request ever triggers a driver call: /metrics hands out bytes rendered by the
poller thread. Routes: GET/HEAD on ``/``, ``/metrics``, ``/health`` and ``/api/v1/snapshot``; other paths
404, other methods 405 with an Allow header; an unexpected error is a one-line 500,
never a traceback.

Security (docs/security.md): an optional web config (exporter.web) adds TLS, client
certificates, basic auth, response headers and a rate limit, and reloads without a restart;
every connection goes through a guard (exporter.web.guard) that caps connections, times out
half-sent requests and turns malformed ones into a 4xx and at most one warning per client.
Each request passes, in order: rate limit (429), no request body (413/417), client
certificate SAN (403), basic auth (401 with WWW-Authenticate); the configured headers go on
every answer.
"""

from __future__ import annotations

import asyncio
import html
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, Protocol

from aiohttp import web

from exporter.poller import Health
from exporter.render import Exposition
from exporter.web.auth import MAX_PENDING_CHECKS, parse_basic
from exporter.web.guard import ConnectionGuard, GuardedHandler, GuardedSite, HttpLimits, HttpStats
from exporter.web.live import LiveWebConfig
from exporter.web.sans import san_allowed

log = logging.getLogger(__name__)

ALLOWED_METHODS = ("GET", "HEAD")


class PollerView(Protocol):
    """The parts of :class:`exporter.poller.Poller` the server reads."""

    interval: float
    version: str
    backend_name: str

    @property
    def exposition(self) -> Exposition | None: ...

    def health(self) -> Health: ...


def _q_value(params: list[str]) -> float:
    """The q parameter of one Accept(-Encoding) element; a malformed q counts as 0."""
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return 0.0
    return 1.0


def _accepts(header: str, token: str) -> bool:
    """True when the comma-separated header lists ``token`` with a non-zero q."""
    for element in header.split(","):
        name, *params = element.split(";")
        if name.strip().lower() == token and _q_value(params) > 0:
            return True
    return False


def wants_openmetrics(accept: str) -> bool:
    """Prometheus lists application/openmetrics-text in Accept when it can parse it."""
    return _accepts(accept, "application/openmetrics-text")


def wants_gzip(accept_encoding: str) -> bool:
    """Gzip only when the client names it; a bare '*' is not taken as consent."""
    return _accepts(accept_encoding, "gzip")


def _text(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=message.rstrip("\n") + "\n", headers=headers)


class _Handlers:
    def __init__(self, poller: PollerView) -> None:
        self.poller = poller
        self.routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
            "/": self.landing,
            "/metrics": self.metrics,
            "/health": self.health,
            "/api/v1/snapshot": self.snapshot,
        }

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = self.routes.get(request.path)
        if handler is None:
            return _text(404, f"not found: {request.path} (try {', '.join(sorted(self.routes))})")
        if request.method not in ALLOWED_METHODS:
            return _text(
                405, f"method {request.method} not allowed on {request.path}", Allow=", ".join(ALLOWED_METHODS)
            )
        return await handler(request)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        exposition = self.poller.exposition
        if exposition is None:
            # Even a failed first poll publishes the self-metrics, so this is only the first poll in flight.
            interval = self.poller.interval
            return _text(
                503,
                f"no metrics yet: the first poll has not finished (polling every {interval:g}s)",
                **{"Retry-After": str(max(1, round(interval)))},
            )
        openmetrics_format = wants_openmetrics(request.headers.get("Accept", ""))
        gzipped = wants_gzip(request.headers.get("Accept-Encoding", ""))
        body = exposition.body(openmetrics_format=openmetrics_format, gzipped=gzipped)
        headers = {
            "Content-Type": exposition.content_type(openmetrics_format),
            "Vary": "Accept, Accept-Encoding",
            "Cache-Control": "no-store",
        }
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def health(self, request: web.Request) -> web.StreamResponse:
        health = self.poller.health()
        return _text(200 if health.ok else 503, health.reason)

    async def snapshot(self, request: web.Request) -> web.StreamResponse:
        """The latest successful poll as JSON (what `exporter snapshot` prints); input of `recommend --from`."""
        exposition = self.poller.exposition
        body = exposition.snapshot_json() if exposition is not None else None
        if body is None:
            return _text(503, "no snapshot yet: no poll has succeeded", **{"Retry-After": "1"})
        return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-store"})

    async def landing(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=landing_page(self.poller), content_type="text/html", charset="utf-8")


def landing_page(poller: PollerView) -> str:
    """Small HTML page: version, backend, the GPUs of the latest poll, links."""
    esc = html.escape
    exposition = poller.exposition
    snapshot = exposition.snapshot if exposition is not None else None
    if snapshot is None:
        gpus = "<p>No successful poll yet.</p>"
    else:
        rows = "".join(
            f"<tr><td>{gpu.index}</td><td>{esc(gpu.name)}</td><td>{esc(gpu.sharing)}</td>"
            f"<td>{'up' if gpu.up else esc('down: ' + (gpu.error or 'unknown'))}</td>"
            f"<td><code>{esc(gpu.uuid)}</code></td></tr>"
            for gpu in snapshot.gpus
        )
        gpus = (
            f"<p>Driver {esc(snapshot.driver_version)}, {len(snapshot.gpus)} GPU(s).</p>"
            "<table><tr><th>GPU</th><th>Name</th><th>Sharing</th><th>State</th><th>UUID</th></tr>"
            f"{rows}</table>"
        )
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpushare-exporter</title></head><body>"
        f"<h1>gpushare-exporter</h1><p>Version {esc(poller.version)}, backend {esc(poller.backend_name)}, "
        f"polling every {poller.interval:g}s.</p>{gpus}"
        "<ul><li><a href=\"/metrics\">/metrics</a>: Prometheus metrics</li>"
        "<li><a href=\"/health\">/health</a>: 200 while polls succeed</li></ul>"
        "<p>Documentation: docs/metrics.md (every metric) and docs/configuration.md (flags, config file) "
        "in the gpushare-exporter source tree.</p>"
        "</body></html>\n"
    )


class _TokenBucket:
    """exporter-toolkit's rate_limit: ``burst`` tokens, one more every ``interval`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tokens: float | None = None
        self._last = clock()

    def allow(self, interval: float, burst: int) -> bool:
        now = self._clock()
        tokens = float(burst) if self._tokens is None else self._tokens
        tokens = min(float(burst), tokens + (now - self._last) / interval)
        self._last = now
        if tokens >= 1.0:
            self._tokens = tokens - 1.0
            return True
        self._tokens = tokens
        return False


class _Security:
    """The per-request checks of the web config, as one aiohttp middleware."""

    def __init__(self, live: LiveWebConfig, guard: ConnectionGuard) -> None:
        self.live = live
        self.guard = guard
        self.bucket = _TokenBucket()
        self._bcrypt = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpushare-bcrypt")
        self._pending = 0

    def close(self) -> None:
        self._bcrypt.shutdown(wait=False, cancel_futures=True)

    def _refuse(self, request: web.Request, reason: str, status: int, message: str, **headers: str):
        client = getattr(request.protocol, "client", None) or str(request.remote)
        self.guard.rejected(reason, client, "%s %s from %s answered %d: %s",
                            request.method, request.path[:100], client, status, message)
        return _text(status, message, **headers)

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, GuardedHandler):
            protocol.request_started()
        config = self.live.current
        response = await self._check(request, config)
        if response is None:
            response = await _call_handler(request, handler, self.guard)
        if config is not None:
            for name, value in config.headers:
                response.headers[name] = value
        return response

    async def _check(self, request: web.Request, config) -> web.StreamResponse | None:
        """A refusal, or None when the request may go on to its handler."""
        if config is not None and config.rate_interval > 0:
            if not self.bucket.allow(config.rate_interval, config.rate_burst):
                return _text(429, "too many requests (rate_limit in the web config)", **{"Retry-After": "1"})
        if request.body_exists:
            response = self._refuse(request, "body", 413, "this server takes no request body")
            response.force_close()  # do not read what the client is still sending
            return response
        if config is None:
            return None
        if config.tls is not None and config.tls.client_allowed_sans is not None:
            peer = request.transport.get_extra_info("peercert") if request.transport else None
            if not san_allowed(peer, config.tls.client_allowed_sans):
                return self._refuse(request, "forbidden", 403,
                                    "client certificate has none of the allowed subject alternative names")
        auth = config.auth
        if auth is None:
            return None
        credentials = parse_basic(request.headers.get("Authorization", ""))
        verdict = auth.cached(*credentials) if credentials else False
        if verdict is None:
            if self._pending >= MAX_PENDING_CHECKS:
                return self._refuse(request, "auth_busy", 429, "too many password checks in progress; retry",
                                    **{"Retry-After": "1"})
            self._pending += 1
            try:
                verdict = await asyncio.get_running_loop().run_in_executor(self._bcrypt, auth.check, *credentials)
            finally:
                self._pending -= 1
        if verdict:
            return None
        what = "wrong user name or password" if credentials else "authentication required"
        return self._refuse(request, "unauthorized", 401, what,
                            **{"WWW-Authenticate": 'Basic realm="gpushare-exporter", charset="UTF-8"'})


async def _call_handler(request: web.Request, handler, guard: ConnectionGuard) -> web.StreamResponse:
    """The handler's response; an unexpected error is a one-line 500 and one log line, no traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - the client gets one line, the log gets one line
        message = " ".join(str(exc).split())[:200]
        guard.warnings.warn(f"handler:{type(exc).__name__}", "error serving %s %s: %s: %s",
                            request.method, request.path[:100], type(exc).__name__, message)
        log.debug("traceback of the error serving %s %s", request.method, request.path, exc_info=exc)
        return _text(500, "internal error; see the exporter log")


class Server:
    """A running HTTP server: ``url`` to reach it, ``reload()`` the web config, ``await close()``."""

    def __init__(self, runner: web.AppRunner, url: str, live: LiveWebConfig, guard: ConnectionGuard,
                 security: _Security) -> None:
        self._runner = runner
        self.url = url
        self.live = live
        self.guard = guard
        self._security = security

    @property
    def stats(self) -> HttpStats:
        return self.guard.stats

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Re-read the web config; False (and one WARNING) when it is bad or there is none."""
        return await self.live.reload(reason)

    async def close(self) -> None:
        """Stop listening and finish in-flight requests."""
        await self.live.stop_watching()
        await self._runner.cleanup()
        self._security.close()


def _url_for(address: object, requested_host: str | None, tls: bool) -> str:
    host, port = address[0], address[1]  # type: ignore[index]
    if requested_host in (None, "", "0.0.0.0", "::"):
        host = "127.0.0.1" if requested_host != "::" else "::1"  # wildcard binds: show a reachable loopback
    if ":" in str(host):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}/"


async def _refuse_expect(request: web.Request) -> web.StreamResponse:
    """No request here has a body, so 'Expect: 100-continue' is answered 417 at once."""
    response = _text(417, "this server takes no request body")
    response.force_close()
    return response


async def start_server(poller: PollerView, host: str | None, port: int, *, web_config: LiveWebConfig | None = None,
                       limits: HttpLimits | None = None, stats: HttpStats | None = None) -> Server:
    """Listen on host:port (host "" or None: every interface; port 0: any free port).

    ``web_config`` (TLS, auth, headers) defaults to none; ``limits`` to HttpLimits();
    ``stats`` receives the HTTP counters (self-metrics).
    """
    stats = stats or (web_config.stats if web_config is not None else HttpStats())
    live = web_config or LiveWebConfig(None, stats)
    live.stats = stats
    guard = ConnectionGuard(limits or HttpLimits(), stats)
    security = _Security(live, guard)
    handlers = _Handlers(poller)
    app = web.Application(middlewares=[security.middleware])
    app.router.add_route("*", "/{tail:.*}", handlers.dispatch, expect_handler=_refuse_expect)
    # Scrapes every few seconds would flood the log; refusals are logged by the guard instead.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
    await runner.setup()
    site = GuardedSite(runner, host or None, port, guard, ssl_context=live.listen_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        security.close()
        raise
    live.start_watching()
    url = _url_for(runner.addresses[0], host, live.listen_context is not None)
    return Server(runner, url, live, guard, security)
