"""NVML backend: the only module of the exporter that imports pynvml.

The same code runs on a real GPU and in simulation (where pynvml.nvmlLib is a fake C
library). All calls go through ``NvmlCaller.call`` (the choke point); per-GPU reading lives
in nvml_device.py and its helpers, which receive the caller and never import pynvml.

Error policy of the choke point:
- NotSupported, NoPermission -> NA ("not available"): WARNING once per (call, GPU model),
  metric omitted, not an error. The answer is cached per (call, device, MIG mode) so the call
  is not repeated every poll (asked again every REPROBE_POLLS polls).
- FunctionNotFound, NVMLLibraryMismatchError -> NA for every GPU (old driver), warned once.
- GpuIsLost -> GpuLostError: the GPU is reported down for this poll, its handle re-fetched.
- Anything else -> NvmlCallError, counted in Snapshot.call_errors[(call, error)]; the reader
  leaves the value None and marks the section (gpu/mig/process/mps) failed.
- Errors that are normal control flow (NotFound for an empty MIG slot, Timeout for an empty
  event queue...) are declared with ``expect=`` and come back as Missing, uncounted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from exporter.backend.nvml_device import GpuReader
from exporter.backend.nvml_types import NA, SECTIONS, DeviceTag, GpuLostError, Missing, NvmlCallError
from exporter.backend.procinfo import ProcFs
from exporter.identity import Identifier
from exporter.errors import NoGpuError
from exporter.snapshot import GpuInfo, Snapshot

log = logging.getLogger(__name__)

# Outcomes that mean "this device/driver cannot give the value", not "something broke".
# NoPermission is here because it is a deployment fact (unprivileged exporter reading MIG
# parent aggregates), constant for the process lifetime, and not a GPU fault.
_NOT_AVAILABLE = {
    "NotSupported": "not supported on {model}",
    "NoPermission": "not permitted on {model} (insufficient privileges)",
}
# Outcomes that mean the symbol is absent from this driver: true for every GPU.
_ABSENT = ("FunctionNotFound", "LibraryMismatch")

# Calls where "not supported" is a property of (device, scalar argument), not of the device.
_ARG_SCOPED = frozenset({
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlGpmMigSampleGet",
})

# A "not available" answer is remembered (the call is skipped) for this many polls, then
# asked again in case a reset or driver change made it available.
REPROBE_POLLS = 300


def _short_name(pynvml, exc: BaseException) -> str:
    """pynvml error class name without its prefix: NVMLError_GpuIsLost -> "GpuIsLost"."""
    if isinstance(exc, pynvml.NVMLLibraryMismatchError):
        return "LibraryMismatch"
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    # pynvml raises plain NVMLError(0) when a size probe unexpectedly succeeds (no data).
    value = getattr(exc, "value", None)
    return "Success" if value == 0 else f"Code{value}"


class NvmlCaller:
    """Single choke point for NVML calls: maps errors, warns once, counts calls and errors.

    ``call(fn_name, *args, gpu=tag, expect=("NotFound",))`` returns the value, ``NA`` (not
    available: NotSupported, NoPermission, FunctionNotFound, NVMLLibraryMismatchError),
    ``Missing(err)`` for an expected error, or raises NvmlCallError / GpuLostError.
    Thread-safe: GPU readers call it from worker threads.
    """

    def __init__(self, pynvml):
        self.nv = pynvml
        self.errors: Counter[tuple[str, str]] = Counter()  # (call, error) -> count, cumulative
        self.calls_by_name: Counter[str] = Counter()  # cumulative, NVML calls actually made
        self.calls_this_poll = 0
        self._lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()
        self._unavailable: set[tuple] = set()  # cache keys of calls known to answer NA
        self._unavailable_names: set[str] = set()  # fn names with any key in _unavailable
        self._polls = 0

    def begin_poll(self) -> None:
        """Reset the per-poll call count; every REPROBE_POLLS polls forget cached NA answers."""
        with self._lock:
            self.calls_this_poll = 0
            self._polls += 1
            if self._polls % REPROBE_POLLS == 0:
                self._unavailable = {k for k in self._unavailable if k[0] == "absent"}  # symbols stay absent
                self._unavailable_names = {k[1] for k in self._unavailable}

    def errors_snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.errors)

    @staticmethod
    def _cache_keys(fn_name: str, args: tuple, gpu: DeviceTag | None) -> tuple[tuple, tuple]:
        """(driver-wide key, per-device key) under which an NA answer is remembered.

        For calls whose support depends on a scalar argument (clock type, memory struct
        version, profile id) that argument is part of the key. Other scalars (timestamps,
        pids) are not, or the cache would grow without bound. Handles never are: the tag
        already names the device.
        """
        scalars = tuple(a for a in args if isinstance(a, int)) if fn_name in _ARG_SCOPED else ()
        return ("absent", fn_name, scalars), ("device", fn_name, gpu, scalars)

    def call(self, fn_name: str, *args, gpu: DeviceTag | None = None, expect: tuple[str, ...] = ()):
        """Call ``pynvml.<fn_name>(*args)`` and classify the outcome (see class docstring)."""
        # Most calls have never answered NA: skip building the cache keys for them.
        if fn_name in self._unavailable_names:
            absent_key, device_key = self._cache_keys(fn_name, args, gpu)
            if absent_key in self._unavailable or device_key in self._unavailable:
                return NA
        fn = getattr(self.nv, fn_name, None)
        if fn is None:  # nvidia-ml-py older than the call: same as a driver without the symbol
            return self._not_available(fn_name, "FunctionNotFound", self._cache_keys(fn_name, args, gpu)[0], gpu)
        with self._lock:
            self.calls_this_poll += 1
            self.calls_by_name[fn_name] += 1
        try:
            return fn(*args)
        except (self.nv.NVMLError, self.nv.NVMLLibraryMismatchError, UnicodeDecodeError) as exc:
            if isinstance(exc, UnicodeDecodeError):  # garbage bytes from the driver
                error = "UnicodeDecodeError"
            else:
                error = _short_name(self.nv, exc)
            if error in expect:
                return Missing(error)
            if error in _ABSENT or error in _NOT_AVAILABLE:
                absent_key, device_key = self._cache_keys(fn_name, args, gpu)
                return self._not_available(fn_name, error, absent_key if error in _ABSENT else device_key, gpu)
            self._count_error(fn_name, error, exc)
            if error == "GpuIsLost":
                raise GpuLostError(fn_name, error, str(exc)) from None
            raise NvmlCallError(fn_name, error, str(exc)) from None

    def _not_available(self, fn_name: str, error: str, key: tuple, gpu: DeviceTag | None):
        model = gpu.model if gpu is not None and gpu.model else "this GPU"
        with self._lock:
            self._unavailable.add(key)
            self._unavailable_names.add(fn_name)
            warn_key = (fn_name, model if error in _NOT_AVAILABLE else "")
            first = warn_key not in self._warned
            self._warned.add(warn_key)
        if first:
            if error in _NOT_AVAILABLE:
                reason = _NOT_AVAILABLE[error].format(model=model)
            else:
                reason = "not found in the NVIDIA driver library (driver older than nvidia-ml-py)"
            log.warning("%s %s; metric omitted", fn_name, reason)
        return NA

    def _count_error(self, fn_name: str, error: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[(fn_name, error)] += 1
            first = self.errors[(fn_name, error)] == 1
        (log.warning if first else log.debug)("NVML call %s failed: %s (%s)", fn_name, error, exc)


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
                log.error("GPU %d: read failed: %s: %s", self.reader.index, type(exc).__name__, exc)
                log.debug("GPU read traceback", exc_info=exc)
                self.result = None
            finally:
                self.done.set()


class NvmlBackend:
    """Polls every GPU through NVML into a Snapshot; see exporter.backend.base.Backend.

    Each GPU is read by its own long-lived worker thread, one GPU after the other: the poll
    hands GPU i to its worker and waits for it before handing over GPU i+1. One Python thread
    runs at a time, so readers do not fight each other (and the HTTP loop) for the GIL; the
    threads are there so that a hung driver call holds up only its own GPU. A GPU whose read
    takes longer than ``gpu_timeout`` seconds is reported ``up=False, error="timeout"`` and
    skipped while that read is still running, so reads never pile up; only the poll during
    which it hung waits for it.
    """

    name = "nvml"

    def __init__(self, pynvml_module=None, procfs_root: str = "/proc", gpu_timeout: float = 5.0,
                 identifier: Identifier | None = None):
        """``identifier`` names each process's workload and pod (default: built-in rules only)."""
        self._nv = pynvml_module
        self.procfs = ProcFs(procfs_root)
        self.identifier = identifier or Identifier()
        self.gpu_timeout = gpu_timeout
        self.caller: NvmlCaller | None = None
        self.driver_version = ""
        self.readers: list[GpuReader] = []
        self._workers: list[_GpuWorker] = []
        self._open = False

    def open(self) -> None:
        """nvmlInit and discover GPUs; NoGpuError (one line) when there is no driver or GPU."""
        if self._nv is None:
            import pynvml  # the single pynvml import of the exporter

            self._nv = pynvml
        nv = self._nv
        self.caller = NvmlCaller(nv)
        try:
            nv.nvmlInit()
        except (nv.NVMLError, nv.NVMLLibraryMismatchError) as exc:
            error = _short_name(nv, exc)
            raise NoGpuError(_init_failure_reason(error, exc)) from None
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self._shutdown()
            raise NoGpuError(_init_failure_reason(_short_name(nv, exc), exc)) from None
        if count == 0:
            self._shutdown()
            raise NoGpuError(_init_failure_reason("NoGpus", None))
        version = self.caller.call("nvmlSystemGetDriverVersion")
        self.driver_version = version if isinstance(version, str) else ""
        self.readers = [GpuReader(self.caller, i, self.procfs, self.identifier) for i in range(count)]
        self._workers = [_GpuWorker(reader) for reader in self.readers]
        self._open = True

    def poll(self) -> Snapshot:
        """Read every GPU once. GPU-level failures are reported in the Snapshot, not raised."""
        if not self._open:
            raise RuntimeError("NvmlBackend.poll() called before open()")
        started = time.monotonic()
        self.caller.begin_poll()
        gpus: list[GpuInfo] = []
        failed: set[str] = set()
        for worker in self._workers:
            result = None
            if not worker.busy:  # a read still stuck from an earlier poll: do not queue another
                worker.start_read()
                if worker.done.wait(self.gpu_timeout):
                    result = worker.result  # None only if the reader itself failed (logged)
                else:
                    log.warning("GPU %d: read took longer than %.1fs; reported down",
                                worker.reader.index, self.gpu_timeout)
            info, sections = result or (worker.reader.down("timeout"), set(SECTIONS))
            gpus.append(info)
            failed |= sections
        return Snapshot(
            timestamp=time.time(),
            backend=self.name,
            driver_version=self.driver_version,
            poll_duration_seconds=time.monotonic() - started,
            gpus=tuple(gpus),
            call_errors=self.caller.errors_snapshot(),
            section_ok={s: s not in failed for s in SECTIONS},
            pod_devices=self._pod_devices(gpus),
        )

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
        for worker in self._workers:
            worker.stop()
            if not worker.busy:  # a hung read still owns its resources
                worker.reader.close()
        self._workers = []
        self._shutdown()
        close_pods = getattr(self.identifier.pods, "close", None)
        if close_pods is not None:  # background watchers of the pod sources
            close_pods()

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except (self._nv.NVMLError, self._nv.NVMLLibraryMismatchError) as exc:
            log.debug("nvmlShutdown failed: %s", exc)


__all__ = ["NA", "Missing", "NvmlCallError", "GpuLostError", "DeviceTag", "NvmlCaller", "NvmlBackend"]
