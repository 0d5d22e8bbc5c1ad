"""NVML backend: the only module of the exporter that imports pynvml.

The same code runs on a real GPU and in simulation (where pynvml.nvmlLib is a fake C
library). All calls go through ``NvmlCaller.call`` (exporter/backend/nvml_caller.py, the choke
point, which also holds the error policy); per-GPU reading lives in nvml_device.py and its
helpers, which receive the caller and never import pynvml.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from exporter.backend.nvml_caller import REPROBE_POLLS, NvmlCaller, _short_name
from exporter.backend.nvml_device import GpuReader
from exporter.backend.nvml_types import NA, SECTIONS, DeviceTag, GpuLostError, Missing, NvmlCallError, frozen_maker
from exporter.backend.nvml_worker import ReadPool, _GpuWorker
from exporter.backend.procinfo import ProcFs
from exporter.identity import Identifier
from exporter.errors import NoGpuError
from exporter.snapshot import GpuInfo, Snapshot, SourceStatus

log = logging.getLogger(__name__)

_NVML_SOURCES = {"nvml": SourceStatus(True)}
_snapshot = frozen_maker(Snapshot)  # one a poll, built without its __init__'s 11 object.__setattr__ calls


def _init_failure_reason(error: str, exc: BaseException) -> str:
    """One line for NoGpuError, naming the likely cause."""
    reasons = {
        "LibraryNotFound": "NVIDIA driver library libnvidia-ml.so.1 not found (no NVIDIA driver installed?)",
        "DriverNotLoaded": "NVIDIA kernel driver is not loaded",
        "LibRmVersionMismatch": "NVIDIA driver/library version mismatch (reload the kernel module or reboot)",
        "NoPermission": "no permission to open the NVIDIA device files",
        "NoGpus": "NVML found no NVIDIA GPU on this host",
    }
    return "nvml: " + reasons.get(error, f"initialisation failed: {error} ({exc})")


# nvmlInit failures that end `exporter serve` at startup: no driver library that can be
# loaded at all (a host without the NVIDIA driver), or a driver that sees no GPU. Any other
# (driver not loaded yet, library/driver version mismatch after an upgrade, no permission
# to the device files yet, a lost GPU...) is logged and retried each poll.
FATAL_AT_START = ("LibraryNotFound", "NoGpus")
# Enumerate the GPUs again (nvmlShutdown + nvmlInit: NVML enumerates at init) when a GPU has
# been down this many polls in a row (it may have been removed), backing off to at most once
# per REDISCOVER_MAX_BACKOFF polls while it stays down; and, to find GPUs attached since,
# when the count of NVIDIA GPUs on the PCI bus (/sys, checked every REDISCOVER_EVERY_POLLS
# polls) differs from what it was at the last enumeration. A re-init is not free on a real
# node (without persistence mode the driver may tear the GPUs down), so it is never periodic.
REDISCOVER_DOWN_POLLS = 3
REDISCOVER_MAX_BACKOFF = 64
REDISCOVER_EVERY_POLLS = 300
_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers


def pci_gpu_count(root: str = "/sys/bus/pci/devices") -> int | None:
    """NVIDIA display/3D controllers on the PCI bus, or None when /sys cannot tell."""
    try:
        entries = os.listdir(root)
    except OSError:
        return None
    count = 0
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "vendor")) as fh:
                vendor = fh.read().strip()
            with open(os.path.join(root, entry, "class")) as fh:
                pci_class = fh.read().strip()
        except OSError:
            continue
        count += vendor == _NVIDIA_VENDOR and pci_class.startswith(_GPU_CLASSES)
    return count


class NvmlUnavailable(NoGpuError):
    """NVML could not be initialised for this poll (the poll fails; retried next poll). A
    NoGpuError, so a one-shot command (snapshot) reports it in one line."""


class NvmlBackend:
    """Polls every GPU through NVML into a Snapshot; see exporter.backend.base.Backend.

    The GPUs are read one after the other on a long-lived reader thread (exporter.backend.
    nvml_worker): the poll hands them over at once and waits for each in turn. One Python
    thread runs at a time, so reads do not fight each other (and the HTTP loop) for the GIL;
    the thread is there so that a hung driver call holds up only its own GPU: the GPUs after
    it go to another reader. A GPU whose read takes longer than ``gpu_timeout`` seconds is
    reported ``up=False, error="timeout"`` and skipped while that read is still running, so
    reads never pile up; only the poll during which it hung waits for it.

    The NVML session survives what real nodes do (docs/scenarios.md, fault model): an
    nvmlInit that fails (driver not loaded yet, library/driver mismatch) is retried each poll
    (those polls fail, ``nvmlInit`` errors are counted) instead of ending the exporter; a GPU
    that stays down, or a change in the number of GPUs on the PCI bus, makes the backend
    enumerate again, so removed GPUs disappear from the snapshot and attached ones appear.
    """

    name = "nvml"

    def __init__(self, pynvml_module=None, procfs_root: str = "/proc", gpu_timeout: float = 5.0,
                 identifier: Identifier | None = None, gpus_on_bus: Callable[[], int | None] = pci_gpu_count,
                 clock: Callable[[], float] = time.time):
        """``identifier`` names each process's workload and pod (default: built-in rules only);
        ``gpus_on_bus`` counts the GPUs present, without NVML (None: unknown); ``clock``: Unix
        seconds now, the time an XID is stamped with (the simulated host's clock in simulation)."""
        self._clock = clock
        self._nv = pynvml_module
        self._gpus_on_bus = gpus_on_bus
        self._bus_count: int | None = None  # gpus_on_bus() at the last enumeration
        self.procfs = ProcFs(procfs_root)
        self.identifier = identifier or Identifier()
        self.gpu_timeout = gpu_timeout
        self.caller: NvmlCaller | None = None
        self.driver_version = ""
        self.readers: list[GpuReader] = []
        self._workers: list[_GpuWorker] = []
        self._pool: ReadPool | None = None
        self._open = False
        self._initialized = False  # an NVML session with its readers is up
        self._polls = 0
        self._discovered_at = 0  # poll number of the last enumeration
        self._down: dict[int, int] = {}  # GPU index -> polls down in a row
        self._backoff = REDISCOVER_DOWN_POLLS
        self.discoveries = 0  # enumerations after the first (tests, benchmarks)
        self.reason = ""  # why this backend was chosen (set by exporter.backend.choose)

    def open(self) -> None:
        """nvmlInit and discover GPUs. NoGpuError (one line) when there is no driver library,
        no permission or no GPU; other init failures are retried by every poll."""
        if self._nv is None:
            import pynvml  # the single pynvml import of the exporter

            self._nv = pynvml
        self.caller = NvmlCaller(self._nv)
        failure = self._start()
        if failure is not None:
            error, reason = failure
            # LibraryNotFound from a library that did load (a simulated one) is transient.
            no_library = error == "LibraryNotFound" and getattr(self._nv, "nvmlLib", None) is None
            if error in FATAL_AT_START and (error != "LibraryNotFound" or no_library):
                raise NoGpuError(reason)
            log.warning("%s; retrying every poll", reason)
        self._open = True

    def _start(self) -> tuple[str, str] | None:
        """Initialise NVML and build one reader per GPU; (error, one-line reason) on failure."""
        nv = self._nv
        try:
            nv.nvmlInit()
        except (nv.NVMLError, nv.NVMLLibraryMismatchError) as exc:
            error = _short_name(nv, exc)
            self.caller.count_failure("nvmlInit", error)
            return error, _init_failure_reason(error, exc)
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self._shutdown()
            error = _short_name(nv, exc)
            self.caller.count_failure("nvmlDeviceGetCount", error)
            return error, _init_failure_reason(error, exc)
        if count == 0:
            self._shutdown()
            return "NoGpus", _init_failure_reason("NoGpus", None)
        version = self.caller.call("nvmlSystemGetDriverVersion")
        self.driver_version = version if isinstance(version, str) else ""
        old = {r.uuid: r for r in self.readers if r.uuid}
        # Same count: the enumeration order is the same, so a GPU that cannot say its UUID now
        # (lost) keeps the identity its index had; otherwise only the UUID identifies a GPU.
        same_order = self.readers if len(self.readers) == count else None
        self.readers = [GpuReader(self.caller, i, self.procfs, self.identifier, self._clock) for i in range(count)]
        for reader in self.readers:
            reader.adopt(old, same_order[reader.index] if same_order else None)
        self._workers = [_GpuWorker(reader) for reader in self.readers]
        self._pool = ReadPool()
        self._initialized = True
        self._discovered_at = self._polls
        self._down = {}
        self._bus_count = self._gpus_on_bus()
        return None

    def _stop_session(self) -> None:
        self._stop_pool()
        for worker in self._workers:
            worker.reader.close()
        self._workers = []
        self._initialized = False
        self._shutdown()

    def _rediscover_due(self) -> bool:
        if any(w.busy for w in self._workers):
            return False  # a read hangs in the driver: never shut NVML down under it
        since = self._polls - self._discovered_at
        if since and since % REDISCOVER_EVERY_POLLS == 0:
            on_bus = self._gpus_on_bus()
            if on_bus is not None and on_bus != self._bus_count:
                return True
        return bool(self._down) and max(self._down.values()) >= REDISCOVER_DOWN_POLLS and since >= self._backoff

    def _rediscover(self) -> None:
        """Enumerate again: close the session and start a new one (at the end of a poll, so
        every reader has drained its XID events first). A failure leaves NVML down: the next
        poll retries and fails until it can start."""
        still_down = bool(self._down)
        log.info("nvml: enumerating GPUs again (%s)", "a GPU stays unreadable" if still_down
                 else "the number of GPUs on the bus changed")
        self._stop_session()
        self.discoveries += 1
        self._backoff = min(REDISCOVER_MAX_BACKOFF, self._backoff * 2) if still_down else REDISCOVER_DOWN_POLLS
        failure = self._start()
        if failure is not None:
            log.warning("%s; retrying every poll", failure[1])

    def poll(self) -> Snapshot:
        """Read every GPU once. GPU-level failures are reported in the Snapshot, not raised;
        NvmlUnavailable when NVML itself cannot be initialised."""
        if not self._open:
            raise RuntimeError("NvmlBackend.poll() called before open()")
        started = time.monotonic()
        self._polls += 1
        if not self._initialized:
            failure = self._start()
            if failure is not None:
                raise NvmlUnavailable(failure[1])
        self.caller.begin_poll()
        gpus: list[GpuInfo] = []
        failed: set[str] = set()
        # A read still stuck from an earlier poll is not queued again.
        queued = [worker for worker in self._workers if not worker.busy]
        for worker in queued:
            worker.queued()
        batch = self._pool.start(queued) if queued else None
        reading = set(queued)
        for worker in self._workers:
            result = None
            if worker in reading:
                if worker.done.wait(self.gpu_timeout):
                    result = worker.result  # None only if the reader itself failed (logged)
                else:  # logged once, as the GPU going down (exporter.transitions)
                    log.debug("GPU %d: read took longer than %.1fs; reported down",
                              worker.reader.index, self.gpu_timeout)
                    rest = batch.cut_rest()  # the GPUs not begun yet go to a reader that does not hang
                    if rest:
                        batch = self._pool.start(rest)
            info, sections = result or (worker.reader.down("timeout"), set(SECTIONS))
            gpus.append(info)
            failed |= sections
            if info.up or info.error == "timeout":  # slow is not gone: no re-enumeration for it
                self._down.pop(info.index, None)
            else:
                self._down[info.index] = self._down.get(info.index, 0) + 1
        if not self._down:
            self._backoff = REDISCOVER_DOWN_POLLS
        snapshot = _snapshot(
            timestamp=time.time(),
            backend=self.name,
            driver_version=self.driver_version,
            poll_duration_seconds=time.monotonic() - started,
            gpus=tuple(gpus),
            call_errors=self.caller.errors_snapshot(),
            section_ok={s: s not in failed for s in SECTIONS},
            simulation=None,  # every field given: frozen_maker's short way
            sources=_NVML_SOURCES,
            backend_reason=self.reason,
            pod_devices=self._pod_devices(gpus),
        )
        if self._rediscover_due():
            self._rediscover()
        return snapshot

    def _pod_devices(self, gpus: list[GpuInfo]):
        """Kubelet device allocations on these GPUs; a failing resolver costs them, not the poll."""
        try:
            return self.identifier.pod_devices(gpus)
        except Exception as exc:  # noqa: BLE001 - attribution is optional; the GPUs are not
            log.warning("pod device allocations unavailable this poll: %s", exc)
            return ()

    @property
    def calls_last_poll(self) -> int:
        """NVML calls made during the last poll (for benchmarks)."""
        return self.caller.calls_this_poll if self.caller else 0

    def close(self) -> None:
        """Free GPM samples and event sets, then nvmlShutdown. Safe to call twice."""
        if not self._open:
            return
        self._open = False
        self._stop_pool()
        for worker in self._workers:
            if not worker.busy:  # a hung read still owns its resources
                worker.reader.close()
        self._workers = []
        if self._initialized:
            self._initialized = False
            self._shutdown()
        close_pods = getattr(self.identifier.pods, "close", None)
        if close_pods is not None:  # background watchers of the pod sources
            close_pods()

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool = None

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except (self._nv.NVMLError, self._nv.NVMLLibraryMismatchError) as exc:
            log.debug("nvmlShutdown failed: %s", exc)


__all__ = ["NA", "Missing", "NvmlCallError", "GpuLostError", "DeviceTag", "NvmlCaller", "NvmlBackend",
           "NvmlUnavailable", "_GpuWorker", "ReadPool", "REPROBE_POLLS"]
