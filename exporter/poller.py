"""Polls the backend on a fixed schedule and publishes one rendered exposition per poll.

A worker thread calls ``backend.poll()`` every ``interval`` seconds. Deadlines are
computed from the start time, not from the end of the previous poll, so the schedule
does not drift; a poll that overruns skips the deadlines it missed instead of
queueing them. After each poll the metrics are rendered once and the new
:class:`~exporter.render.Exposition` replaces the old one in a single attribute
assignment, which is atomic for readers on other threads (the aiohttp loop).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from exporter import __version__
from exporter.backend.base import Backend  # name, open(), poll() -> Snapshot, close()
from exporter.collectors import Collector, PollStats
from exporter.frozen import replace
from exporter.prerender import PrerenderPlan
from exporter.render import Exposition, build_registry, render
from exporter.snapshot import Snapshot

log = logging.getLogger(__name__)

# /health turns 503 when the latest successful poll is this many intervals old (plus, in
# `serve`, the GPU timeout: the poll in which a GPU hangs legitimately lasts that much longer).
STALE_AFTER_INTERVALS = 3
# What Prometheus asks for (OpenMetrics, gzip): encoded from the first poll on, so that the
# first scrape after a start is as fast as the rest.
PROMETHEUS_VARIANT = (True, True)


@dataclass(frozen=True)
class Health:
    """Answer for /health: ok, and a one-line reason either way."""

    ok: bool
    reason: str


def next_deadline(previous: float, now: float, interval: float) -> float:
    """The first deadline on the grid previous + k*interval (k >= 1) that lies after ``now``.

    A poll that overran several intervals resumes on the grid rather than firing the
    missed polls back to back.
    """
    deadline = previous + interval
    if deadline > now:
        return deadline
    missed = math.floor((now - deadline) / interval) + 1
    return deadline + missed * interval


def _down_note(snapshot: Snapshot | None) -> str:
    """'; every GPU is down (GPU 0: GpuIsLost)' or '; 1 of 8 GPUs down' for /health's reason."""
    if snapshot is None or not snapshot.gpus:
        return ""
    down = [gpu for gpu in snapshot.gpus if not gpu.up]
    if not down:
        return ""
    listed = ", ".join(f"GPU {gpu.index}: {gpu.error or 'unknown'}" for gpu in down[:8])
    if len(down) == len(snapshot.gpus):
        return f"; every GPU is down ({listed})"
    return f"; {len(down)} of {len(snapshot.gpus)} GPUs down ({listed})"


def one_line(exc: BaseException) -> str:
    """``Type: message`` on a single line, for logs and /health."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Poller:
    """Owns the backend, the poll schedule and the current exposition."""

    def __init__(
        self,
        backend: Backend,
        interval: float,
        *,
        version: str = __version__,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        extra_collectors: Sequence[Collector] = (),
        observers: Sequence[Callable[[Snapshot], None]] = (),
        stale_after: float | None = None,
        process_series: str = "pod",
    ) -> None:
        """``observers`` see each good snapshot before it is rendered (e.g. to update forecasts
        that ``extra_collectors`` export); an observer that raises is logged and skipped.
        ``stale_after``: seconds after the latest successful poll at which /health turns 503
        (default STALE_AFTER_INTERVALS intervals). ``process_series`` is what one per-process
        series stands for (exporter.collectors.instances)."""
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self.backend = backend
        self.interval = float(interval)
        self.stale_after = float(stale_after) if stale_after is not None else STALE_AFTER_INTERVALS * self.interval
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._stats = PollStats(backend=str(getattr(backend, "name", "unknown")), version=version)
        self._snapshot: Snapshot | None = None
        self._exposition: Exposition | None = None
        self._prerender = PrerenderPlan()
        # The collectors read whatever the poller currently holds; only the poll path renders.
        self._registry = build_registry(lambda: self._snapshot, lambda: self._stats, extra_collectors,
                                        process_series)
        self._observers = tuple(observers)
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = False

    # -- state readers (any thread) -------------------------------------------------

    @property
    def exposition(self) -> Exposition | None:
        """The latest rendered exposition; None until the first poll has finished."""
        return self._exposition

    @property
    def stats(self) -> PollStats:
        """Counters of the polls so far."""
        return self._stats

    @property
    def version(self) -> str:
        """Exporter version, as in gpushare_exporter_build_info."""
        return self._stats.version

    @property
    def backend_name(self) -> str:
        """The backend's ``name`` (nvml, dcgm)."""
        return self._stats.backend

    @property
    def backend_reason(self) -> str:
        """Why this backend reads the GPUs (``--backend auto`` tells what it found)."""
        return str(getattr(self.backend, "reason", "") or "")

    def health(self) -> Health:
        """Healthy while the latest successful poll is younger than ``stale_after`` seconds.

        /health says whether the exporter works (polls and serves), not whether the GPUs do:
        with every GPU lost it stays 200 (restarting the exporter cannot bring a GPU back) and
        the reason says which are down; gpushare_gpu_up == 0 is what alerts on them.
        """
        stats = self._stats
        limit = self.stale_after
        error = f"; last error: {stats.last_error}" if stats.last_error else ""
        if stats.last_success_monotonic is None:
            return Health(False, f"no successful poll yet (polling every {self.interval:g}s){error}")
        if self._exposition is None:
            # The poll thread records success before it renders; until the first page is
            # published /metrics answers 503, so /health must not say ready yet either.
            return Health(False, "first poll succeeded; its metrics are still being rendered")
        age = max(0.0, self._monotonic() - stats.last_success_monotonic)
        if age >= limit:
            return Health(False, f"last successful poll was {age:.1f}s ago (limit {limit:g}s){error}")
        return Health(True, f"ok: last successful poll {age:.1f}s ago{_down_note(self._snapshot)}")

    # -- polling --------------------------------------------------------------------

    def poll_once(self) -> bool:
        """Poll the backend once, render, publish. True when the poll succeeded.

        A failing poll is logged and counted; the previous snapshot stays the one
        rendered, so the scrape keeps its GPU series and only the self-metrics move.
        """
        with self._poll_lock:
            start = self._monotonic()
            try:
                snapshot = self.backend.poll()
                error = None if snapshot is not None else "backend returned no snapshot"
            except Exception as exc:  # noqa: BLE001 - any backend failure is a failed poll
                snapshot, error = None, one_line(exc)
                log.debug("poll failure traceback", exc_info=exc)
            end = self._monotonic()
            self._log_outcome(error)
            if snapshot is not None:
                self._notify(snapshot)
                self._snapshot = snapshot
                # A copy by __dict__ (exporter.frozen), not dataclasses.replace's __init__: every poll.
                self._stats = replace(
                    self._stats,
                    # --backend auto decides which backend it is when it opens, not before.
                    backend=str(getattr(self.backend, "name", self._stats.backend)),
                    polls_ok=self._stats.polls_ok + 1,
                    last_duration_seconds=end - start,
                    last_success_timestamp=self._wall_clock(),
                    last_success_monotonic=end,
                    last_error=None,
                )
            else:
                self._stats = replace(
                    self._stats,
                    polls_error=self._stats.polls_error + 1,
                    last_duration_seconds=end - start,
                    last_error=error,
                )
            self._publish()
            return error is None

    def _log_outcome(self, error: str | None) -> None:
        # A failure that repeats every poll is logged once at warning, then at debug.
        previous = self._stats.last_error
        if error is not None:
            level = logging.DEBUG if error == previous else logging.WARNING
            log.log(level, "poll failed: %s", error)
        elif previous is not None:
            log.info("polling recovered after: %s", previous)

    def _notify(self, snapshot: Snapshot) -> None:
        for observer in self._observers:
            try:
                observer(snapshot)
            except Exception as exc:  # noqa: BLE001 - an observer must not stop the metrics
                log.warning("snapshot observer %r failed: %s", observer, one_line(exc))

    def _publish(self) -> None:
        try:
            exposition = render(self._registry, self._snapshot, self._monotonic())
        except Exception:  # noqa: BLE001 - keep serving the previous bytes
            log.exception("rendering metrics failed; serving the previous exposition")
            return
        # Scrapers ask for the same format every time (Prometheus: OpenMetrics + gzip). Encode
        # it here, in the poll thread, in the polls just before a scrape is expected, so that
        # scrapes do not pay for encoding on the event loop (see exporter/prerender.py).
        previous = self._exposition
        now = exposition.created_monotonic
        if previous is not None:
            self._prerender.asked(previous.requested_variants(), now)
        else:
            self._prerender.expect(PROMETHEUS_VARIANT, now)
        for variant in self._prerender.due(now, self.interval):
            exposition.variant(variant)
        self._exposition = exposition  # the atomic swap readers rely on

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Open the backend (errors propagate, e.g. NoGpuError) and start the worker thread."""
        if self._thread is not None:
            raise RuntimeError("poller already started")
        self.backend.open()
        self._opened = True
        # --backend auto knows which backend it is only now.
        self._stats = dataclasses.replace(self._stats, backend=str(getattr(self.backend, "name", self._stats.backend)))
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpushare-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the worker (after the poll in flight, if any) and close the backend."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("poller thread still busy in a poll; not waiting for it")
                return  # closing the backend under a running poll could crash the driver library
        if self._opened:
            self._opened = False
            try:
                self.backend.close()
            except Exception as exc:  # noqa: BLE001 - shutting down anyway
                log.warning("closing the backend failed: %s", one_line(exc))

    def _run(self) -> None:
        deadline = self._monotonic()
        while not self._stop.is_set():
            self.poll_once()
            now = self._monotonic()
            deadline = next_deadline(deadline, now, self.interval)
            self._stop.wait(max(0.0, deadline - now))
