"""The web config in force, reloaded without a restart on SIGHUP or when one of its files changes.

A reload re-reads and re-validates the file (and the certificate, key and CA files it names)
off the event loop. A good file replaces the config for the next request and, with TLS, for
the next connection: the listening SSLContext gets the new versions, ciphers and client
certificate mode, and each handshake switches to the new context for the new certificate,
key and client CA (``sni_callback``, called for every handshake). A bad file is one WARNING
line, and the previous config stays in force (``gpushare_exporter_web_config_last_reload_successful``
turns 0). TLS cannot be switched on or off by a reload: that needs a restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time

from exporter.web.config import WebConfig, WebConfigError, load_web_config
from exporter.web.guard import HttpStats
from exporter.web.tls import apply_policy

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0  # how often the files are checked for changes (a few stat calls)


def _signature(paths: tuple[str, ...]) -> tuple:
    """What identifies the files' current content cheaply (follows symlinks, as Kubernetes mounts swap them)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
        except OSError:
            out.append((path, None))
    return tuple(out)


class LiveWebConfig:
    """Holds the current :class:`WebConfig` (``current``); None path means no web config."""

    def __init__(self, config: WebConfig | None, stats: HttpStats | None = None) -> None:
        self.current = config
        self.stats = stats or HttpStats()
        self.listen_context: ssl.SSLContext | None = config.ssl_context if config else None
        if self.listen_context is not None:
            self.listen_context.sni_callback = self._switch_context
        self._signature = _signature(config.files) if config else ()
        self._last_failure: str | None = None
        self._watcher: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        if config is not None:
            self.stats.reload_ok, self.stats.reload_timestamp = True, time.time()
            for note in config.notes:
                log.warning("web config %s: %s", config.path, note)

    @classmethod
    def from_path(cls, path: str | None, stats: HttpStats | None = None) -> LiveWebConfig:
        """Load ``path`` (WebConfigError, one line, when it is bad) or run without a web config."""
        return cls(load_web_config(path) if path else None, stats)

    def _switch_context(self, ssl_object, server_name, listen_context) -> None:
        config = self.current
        if config is not None and config.ssl_context is not None and config.ssl_context is not listen_context:
            ssl_object.context = config.ssl_context
        return None

    # -- reloading ------------------------------------------------------------------------

    def changed(self) -> bool:
        """True when a file of the current config changed since it was loaded."""
        return self.current is not None and _signature(self.current.files) != self._signature

    async def reload(self, reason: str) -> bool:
        """Re-read the config file; True when the new one is in force. Never raises."""
        if self.current is None:
            return False
        async with self._lock:
            path = self.current.path
            signature = _signature(self.current.files)
            try:
                config = await asyncio.to_thread(load_web_config, path)
                if (config.ssl_context is None) != (self.listen_context is None):
                    raise WebConfigError(f"{path}: switching TLS on or off needs a restart")
            except WebConfigError as exc:
                self._signature = signature  # do not retry the same broken files every second
                self.stats.reload_ok = False
                message = str(exc)
                if message != self._last_failure:
                    log.warning("web config reload (%s) failed, keeping the previous config: %s", reason, message)
                    self._last_failure = message
                return False
            except Exception as exc:  # noqa: BLE001 - a reload must never take the server down
                self.stats.reload_ok = False
                log.warning("web config reload (%s) failed, keeping the previous config: %s: %s",
                            reason, type(exc).__name__, " ".join(str(exc).split()))
                return False
            if self.listen_context is not None and config.tls is not None:
                apply_policy(self.listen_context, config.tls)
            self.current = config
            self._signature = _signature(config.files)
            self._last_failure = None
            self.stats.reload_ok, self.stats.reload_timestamp = True, time.time()
            log.info("web config reloaded (%s): %s", reason, describe(config))
            for note in config.notes:
                log.warning("web config %s: %s", config.path, note)
            return True

    def start_watching(self) -> None:
        """Check the files every WATCH_SECONDS from the running loop (no-op without a config)."""
        if self.current is not None and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            try:
                await self._watcher
            except asyncio.CancelledError:
                pass
            self._watcher = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            if self.changed():
                await self.reload("file changed")


def describe(config: WebConfig) -> str:
    """'TLS on (client certificates: RequireAndVerifyClientCert), basic auth for 2 users' (no secrets)."""
    parts = [f"TLS on (client certificates: {config.tls.client_auth_type})" if config.tls else "TLS off"]
    users = config.auth.user_count if config.auth else 0
    parts.append(f"basic auth for {users} user(s)" if users else "no basic auth")
    if config.rate_interval > 0:
        parts.append(f"rate limit {1 / config.rate_interval:g}/s, burst {config.rate_burst}")
    return ", ".join(parts)

