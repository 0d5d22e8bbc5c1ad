"""The per-request checks of the web config, as one aiohttp middleware (exporter.server uses it).

In order: rate limit (429), no request body (413; ``Expect`` gets 417 from refuse_expect),
client certificate SAN (403), basic auth (401 with WWW-Authenticate); then the handler, whose
unexpected errors become a one-line 500 and one log line; the configured headers go on every
answer. See docs/security.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from aiohttp import web

from exporter.web.auth import MAX_PENDING_CHECKS, parse_basic
from exporter.web.guard import ConnectionGuard, GuardedHandler
from exporter.web.live import LiveWebConfig
from exporter.web.sans import san_allowed

log = logging.getLogger("exporter.server")


def text_response(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=message.rstrip("\n") + "\n", headers=headers)


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


class RequestChecks:
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
        return text_response(status, message, **headers)

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, GuardedHandler):
            protocol.request_started()
        config = self.live.current
        response = await self._check(request, config)
        if response is None:
            response = await call_handler(request, handler, self.guard)
        if config is not None:
            for name, value in config.headers:
                response.headers[name] = value
        return response

    async def _check(self, request: web.Request, config) -> web.StreamResponse | None:
        """A refusal, or None when the request may go on to its handler."""
        if config is not None and config.rate_interval > 0:
            if not self.bucket.allow(config.rate_interval, config.rate_burst):
                return text_response(429, "too many requests (rate_limit in the web config)", **{"Retry-After": "1"})
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


async def call_handler(request: web.Request, handler, guard: ConnectionGuard) -> web.StreamResponse:
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
        return text_response(500, "internal error; see the exporter log")


async def refuse_expect(request: web.Request) -> web.StreamResponse:
    """No request here has a body, so 'Expect: 100-continue' is answered 417 at once."""
    response = text_response(417, "this server takes no request body")
    response.force_close()
    return response


