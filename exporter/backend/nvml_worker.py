"""One long-lived thread per GPU that reads it when a poll asks (no pynvml import)."""

from __future__ import annotations

import logging
import threading

from exporter.backend.nvml_device import GpuReader
from exporter.snapshot import GpuInfo

log = logging.getLogger("exporter.backend.nvml")


class _GpuWorker:
    """A long-lived daemon thread that reads one GPU whenever a poll asks it to.

    One per GPU, started at open(): a poll only wakes it (no thread is created per poll),
    and a GPU whose driver call hangs holds up its own worker and nothing else. Daemon, so a
    read stuck in the driver never blocks the process from exiting.
    """

    def __init__(self, reader: GpuReader):
        self.reader = reader
        self.done = threading.Event()
        self.done.set()  # idle
        self.result: tuple[GpuInfo, set[str]] | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._last_error: str | None = None  # the last read failure, logged once until it changes
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"nvml-gpu{reader.index}")
        self.thread.start()

    @property
    def busy(self) -> bool:
        """True while a read is in flight (possibly one a previous poll gave up on)."""
        return not self.done.is_set()

    def start_read(self) -> None:
        """Ask for one read; the caller checks ``busy`` first."""
        self.result = None
        self.done.clear()
        self._wake.set()

    def stop(self) -> None:
        """Let the thread end after its current read, if any (it is never joined)."""
        self._stopping = True
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.result = self.reader.read()
            except Exception as exc:  # noqa: BLE001 - a reader bug must not end the worker
                message = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                (log.error if message != self._last_error else log.debug)(
                    "GPU %d: read failed: %s", self.reader.index, message)
                self._last_error = message
                log.debug("GPU read traceback", exc_info=exc)
                self.result = None
            finally:
                self.done.set()
