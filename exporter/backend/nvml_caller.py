"""The choke point of every NVML call (receives the pynvml module; never imports it).

Error policy of ``NvmlCaller.call``:
- NotSupported, NoPermission -> NA ("not available"): WARNING once per (call, GPU model),
  metric omitted, not an error. The answer is cached per (call, device, MIG mode) so the call
  is not repeated every poll (asked again every REPROBE_POLLS polls).
- FunctionNotFound, NVMLLibraryMismatchError -> NA for every GPU (old driver), warned once.
- GpuIsLost -> GpuLostError: the GPU is reported down for this poll, its handle re-fetched.
- Anything else -> NvmlCallError, counted in Snapshot.call_errors[(call, error)]; the reader
  leaves the value None and marks the section (gpu/mig/process/mps) failed.
- Errors that are normal control flow (NotFound for an empty MIG slot, Timeout for an empty
  event queue...) are declared with ``expect=`` and come back as Missing, uncounted.

A few hot calls (process lists, field values, process utilization) are made through
exporter.backend.nvml_direct (the same C calls as pynvml's wrappers, without its per-field
Python hooks and per-call ctypes classes); which function answers a name is settled once
per name. Every outcome above is the same either way.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from exporter.backend.nvml_direct import direct_calls
from exporter.backend.nvml_types import (
    NA,
    DeviceTag,
    GpuLostError,
    Missing,
    NvmlCallError,
)

log = logging.getLogger("exporter.backend.nvml")

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
        self._lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()
        self._unavailable: set[tuple] = set()  # cache keys of calls known to answer NA
        self._unavailable_names: set[str] = set()  # fn names with any key in _unavailable
        self._polls = 0
        self._caught = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, UnicodeDecodeError)
        self._direct = direct_calls(pynvml)
        self._functions: dict = {}  # fn name -> the function that makes that call
        # fn name -> its function, for the calls no NA answer is remembered for: what
        # PollContext.get and .raw call directly (``call`` without its frame; see ready()).
        self._ready: dict = {}
        # Names of the calls made this poll, and the counts of the polls before. A list append
        # is one step under the GIL, so the hot path takes no lock; begin_poll folds the list.
        self._made: list[str] = []
        self._counted: Counter[str] = Counter()

    @property
    def calls_this_poll(self) -> int:
        """NVML calls made since the last begin_poll."""
        return len(self._made)

    @property
    def calls_by_name(self) -> Counter[str]:
        """fn name -> NVML calls actually made, cumulative (a copy)."""
        counts = Counter(self._counted)
        counts.update(self._made)
        return counts

    def begin_poll(self) -> None:
        """Reset the per-poll call count; every REPROBE_POLLS polls forget cached NA answers."""
        with self._lock:
            made, self._made = self._made, []
            self._counted.update(made)
            self._polls += 1
            if self._polls % REPROBE_POLLS == 0:
                self._unavailable = {k for k in self._unavailable if k[0] == "absent"}  # symbols stay absent
                self._unavailable_names = {k[1] for k in self._unavailable}
                self._ready = {n: f for n, f in self._functions.items() if n not in self._unavailable_names}

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

    def _function(self, fn_name: str):
        """The function that makes ``fn_name``'s call; None when pynvml does not know the call.
        Remembered once found: pynvml's functions do not change while the exporter runs."""
        fn = self._direct.get(fn_name) if hasattr(self.nv, fn_name) else None
        fn = fn or getattr(self.nv, fn_name, None)
        if fn is not None:
            self._functions[fn_name] = fn
            with self._lock:
                if fn_name not in self._unavailable_names:
                    self._ready[fn_name] = fn
        return fn

    def ready(self, fn_name: str):
        """The function ``call(fn_name, ...)`` would call now with no answer remembered in the
        way, or None (the call is unknown yet, or an NA answer is remembered for it: go through
        ``call``). A caller that calls it itself appends ``fn_name`` to ``_made`` first and hands
        an exception of ``_caught`` to ``failed``: the same outcome as ``call``, one Python
        frame less on each of a poll's ~290 calls (PollContext.get and .raw)."""
        return self._ready.get(fn_name)

    def call(self, fn_name: str, *args, gpu: DeviceTag | None = None, expect: tuple[str, ...] = ()):
        """Call ``pynvml.<fn_name>(*args)`` and classify the outcome (see class docstring)."""
        # Most calls have never answered NA: skip building the cache keys for them.
        if fn_name in self._unavailable_names:
            absent_key, device_key = self._cache_keys(fn_name, args, gpu)
            if absent_key in self._unavailable or device_key in self._unavailable:
                return NA
        fn = self._functions.get(fn_name) or self._function(fn_name)
        if fn is None:  # nvidia-ml-py older than the call: same as a driver without the symbol
            return self._not_available(fn_name, "FunctionNotFound", self._cache_keys(fn_name, args, gpu)[0], gpu)
        self._made.append(fn_name)
        try:
            return fn(*args)
        except self._caught as exc:
            return self.failed(fn_name, args, gpu, expect, exc)

    def failed(self, fn_name: str, args: tuple, gpu: DeviceTag | None, expect: tuple[str, ...], exc: BaseException):
        """The outcome of ``fn_name(*args)`` raising ``exc`` (one of ``_caught``): Missing, NA,
        or NvmlCallError / GpuLostError raised (see the class docstring)."""
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
            self._ready.pop(fn_name, None)
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

    def count_failure(self, fn_name: str, error: str) -> None:
        """Count a failure of a call made outside ``call`` (nvmlInit, nvmlDeviceGetCount)."""
        with self._lock:
            self.errors[(fn_name, error)] += 1

    def _count_error(self, fn_name: str, error: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[(fn_name, error)] += 1
            first = self.errors[(fn_name, error)] == 1
        (log.warning if first else log.debug)("NVML call %s failed: %s (%s)", fn_name, error, exc)


__all__ = ["REPROBE_POLLS", "NvmlCaller"]
