"""The GPUs of a poll read on a reader thread, one after the other (no pynvml import).

A poll hands the GPUs it reads, in order, to one long-lived reader thread and waits for each
in turn (at most ``gpu_timeout`` each): one hand-off per poll. One hand-off per GPU, as before,
cost ~0.7 ms a poll on the mixed 8-GPU node on a busy 2-core machine: each wake-up moved the
work to the other core, with the caches it had warmed (docs/performance.md, "Poll, fourth
pass"). A driver call that hangs still holds up only its own GPU: the GPUs after it are handed
to another reader (one is kept on standby), and the hung thread, when its call returns, ends
that GPU's read and goes back to the pool, or ends if the pool has enough.
"""

from __future__ import annotations

import logging
import threading

from exporter.backend.nvml_device import GpuReader
from exporter.snapshot import GpuInfo

log = logging.getLogger("exporter.backend.nvml")

STANDBY_READERS = 2  # idle reader threads kept: the one that reads, and one for after a hang


class _GpuWorker:
    """One GPU's read: ``done`` is set while no read of it is in flight, ``result`` its outcome."""

    def __init__(self, reader: GpuReader):
        self.reader = reader
        self.done = threading.Event()
        self.done.set()  # idle
        self.result: tuple[GpuInfo, set[str]] | None = None
        self._last_error: str | None = None  # the last read failure, logged once until it changes

    @property
    def busy(self) -> bool:
        """True while a read is in flight (possibly one a previous poll gave up on)."""
        return not self.done.is_set()

    def queued(self) -> None:
        """A read of this GPU is handed to a reader thread (the caller checks ``busy`` first)."""
        self.result = None
        self.done.clear()

    def run(self) -> None:
        """Read the GPU (on a reader thread); ``done`` is set however the read ends."""
        try:
            self.result = self.reader.read()
        except Exception as exc:  # noqa: BLE001 - a reader bug must not end the reader thread
            message = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            (log.error if message != self._last_error else log.debug)(
                "GPU %d: read failed: %s", self.reader.index, message)
            self._last_error = message
            log.debug("GPU read traceback", exc_info=exc)
            self.result = None
        finally:
            self.done.set()


class _Batch:
    """The GPUs one reader thread reads in a poll, in order, until the poll cuts the rest off."""

    def __init__(self, workers: list[_GpuWorker]):
        self.workers = workers
        self.position = 0  # the next worker to read
        self.cut = False  # the poll gave the rest to another reader: stop after the current GPU
        self.lock = threading.Lock()

    def take(self) -> _GpuWorker | None:
        with self.lock:
            if self.cut or self.position >= len(self.workers):
                return None
            worker = self.workers[self.position]
            self.position += 1
            return worker

    def cut_rest(self) -> list[_GpuWorker]:
        """The workers not taken yet, which this batch will no longer read."""
        with self.lock:
            self.cut = True
            return self.workers[self.position:]


class _ReaderThread:
    """A daemon thread that reads the batches it is handed; never joined (a read may hang)."""

    def __init__(self, pool: ReadPool, number: int):
        self.pool = pool
        self.batch: _Batch | None = None
        self._wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"nvml-reader{number}")
        self.thread.start()

    def hand(self, batch: _Batch | None) -> None:
        """Read ``batch`` now; None: end the thread."""
        self.batch = batch
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            batch, self.batch = self.batch, None
            if batch is None:
                return
            worker = batch.take()
            while worker is not None:
                worker.run()
                worker = batch.take()
            if not self.pool.give_back(self):
                return


class ReadPool:
    """Reader threads for one NVML session; ``start`` hands a poll's GPUs to an idle one."""

    def __init__(self, standby: int = STANDBY_READERS):
        self._lock = threading.Lock()
        self._standby = standby
        self._stopping = False
        self._made = 0
        self._idle = [self._new() for _ in range(standby)]

    def _new(self) -> _ReaderThread:
        self._made += 1
        return _ReaderThread(self, self._made)

    def start(self, workers: list[_GpuWorker]) -> _Batch:
        """Hand ``workers`` (each already ``queued()``) to an idle reader, made if none is idle
        (every other one hangs in the driver)."""
        batch = _Batch(workers)
        with self._lock:
            reader = self._idle.pop() if self._idle else self._new()
        reader.hand(batch)
        return batch

    def give_back(self, reader: _ReaderThread) -> bool:
        """A reader that finished its batch: kept idle, or False (it ends) when enough are."""
        with self._lock:
            if self._stopping or len(self._idle) >= self._standby:
                return False
            self._idle.append(reader)
            return True

    def stop(self) -> None:
        """End the idle readers; a busy one ends when its read returns."""
        with self._lock:
            self._stopping = True
            idle, self._idle = self._idle, []
        for reader in idle:
            reader.hand(None)
