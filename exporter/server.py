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

import html
import logging
from typing import Awaitable, Callable, Protocol

from aiohttp import web

from exporter.poller import Health
from exporter.shipped import shipped_docs
from exporter.render import Exposition
from exporter.web.checks import RequestChecks, refuse_expect
from exporter.web.guard import ConnectionGuard, GuardedSite, HttpLimits, HttpStats
from exporter.web.live import LiveWebConfig

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
        # The docs travel in the package (exporter.shipped): the landing page links them here.
        self._docs = shipped_docs()
        for name in self._docs:
            self.routes[f"/docs/{name}"] = self.doc

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = self.routes.get(request.path)
        if handler is None:
            tries = sorted(r for r in self.routes if not r.startswith("/docs/")) + (["/docs/"] if self._docs else [])
            return _text(404, f"not found: {request.path} (try {', '.join(tries)})")
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

    async def doc(self, request: web.Request) -> web.StreamResponse:
        path = self._docs[request.path.rsplit("/", 1)[1]]
        return web.Response(text=path.read_text(encoding="utf-8"), content_type="text/markdown", charset="utf-8")

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
    simulated = ""
    if snapshot is not None and snapshot.simulation is not None:
        simulated = (f"<p><strong>Simulated GPUs</strong> (<code>--simulate</code>, scenario time "
                     f"{snapshot.simulation.time_seconds:.0f}s): no real GPU is read; every value comes from "
                     "the scenario.</p>")
    docs = shipped_docs()
    doc_links = "".join(f"<li><a href=\"/docs/{esc(name)}\">{esc(name)}</a>: {esc(what)}</li>"
                        for name, what in DOC_TITLES if name in docs)
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpushare-exporter</title></head><body>"
        f"<h1>gpushare-exporter</h1>{simulated}<p>Version {esc(poller.version)}, backend {esc(poller.backend_name)}, "
        f"polling every {poller.interval:g}s.</p>{_backend_line(poller, snapshot)}{gpus}"
        "<ul><li><a href=\"/metrics\">/metrics</a>: Prometheus metrics</li>"
        "<li><a href=\"/health\">/health</a>: 200 while polls succeed</li>"
        "<li><a href=\"/api/v1/snapshot\">/api/v1/snapshot</a>: the latest poll as JSON</li></ul>"
        + (f"<p>Documentation:</p><ul>{doc_links}</ul>" if doc_links else "")
        + "</body></html>\n"
    )


def _backend_line(poller: PollerView, snapshot) -> str:
    """Why this backend, and each data source that is not delivering (with its reason)."""
    esc = html.escape
    reason = getattr(poller, "backend_reason", "") or (snapshot.backend_reason if snapshot is not None else "")
    lines = [f"Backend {esc(poller.backend_name)}: {esc(reason)}."] if reason else []
    for name, status in sorted((snapshot.sources if snapshot is not None else {}).items()):
        if not status.available:
            lines.append(f"Source {esc(name)} unavailable: {esc(status.reason)}.")
    return "".join(f"<p>{line}</p>" for line in lines)


# Docs the landing page links, in this order.
DOC_TITLES = (("metrics.md", "every metric, its unit and labels"),
              ("configuration.md", "commands, flags, config file, endpoints"),
              ("kubernetes.md", "pods, per-pod numbers and accounting, deployment"),
              ("alerts.md", "alert rules"), ("foresight.md", "the OOM forecast, its accuracy and limits"),
              ("runbooks.md", "what to do when an alert fires"),
              ("dashboards.md", "Grafana dashboards"), ("scenarios.md", "the --simulate scenario format"),
              ("dcgm-exporter.md", "replacing dcgm-exporter: the --compat-listen output"))


class Server:
    """A running HTTP server: ``url`` to reach it, ``reload()`` the web config, ``await close()``."""

    def __init__(self, runner: web.AppRunner, url: str, live: LiveWebConfig, guard: ConnectionGuard,
                 security: RequestChecks) -> None:
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
    security = RequestChecks(live, guard)
    handlers = _Handlers(poller)
    app = web.Application(middlewares=[security.middleware])
    app.router.add_route("*", "/{tail:.*}", handlers.dispatch, expect_handler=refuse_expect)
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
