"""A fake libnvidia-ml: C symbols with C signatures, answered from a Simulation.

``pynvml.nvmlLib`` is normally a ``ctypes.CDLL``; pynvml looks every function up with
``getattr(nvmlLib, "<C symbol>")`` and calls it with ctypes arguments (``byref(...)`` out
parameters, ``create_string_buffer`` buffers, opaque handle pointers), then checks the
returned ``nvmlReturn_t``. ``FakeNvmlLib`` answers those lookups, so the real pynvml code
runs unchanged on top: its str/bytes conversions, exception classes and
``NVMLLibraryMismatchError`` all behave as on a real driver. A symbol the fake does not
define (or that is hidden to mimic an old driver) raises AttributeError, which pynvml turns
into NVMLError_FunctionNotFound exactly as for a real library.

Every call is counted in ``Simulation.call_counts`` under its C symbol, then checked against
the scenario's faults (which may sleep for real, to simulate a hanging call) before the
implementation in the fakelib_* mixins runs.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import pynvml

from exporter.sim.fakelib_base import ImplBase, gpu_of_call
from exporter.sim.fakelib_device import DeviceCalls
from exporter.sim.fakelib_events_gpm import EventGpmCalls
from exporter.sim.fakelib_mig import MigCalls
from exporter.sim.fakelib_procs import ProcessCalls
from exporter.sim.fakelib_sensors import SensorCalls

if TYPE_CHECKING:
    from exporter.sim import Simulation
    from exporter.sim.state import FaultWindow

# Calls that never fail through a fault: pynvml needs them to start, stop and print errors.
_FAULT_EXEMPT = {"nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString"}


def error_code(name: str) -> int:
    """NVML return code for an NVMLError class suffix ("GpuIsLost"), an NVML_ERROR_* name,
    or "Success" (0). ValueError when unknown."""
    if name in ("Success", "NVML_SUCCESS"):
        return pynvml.NVML_SUCCESS
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name, None), int):
        return getattr(pynvml, name)
    cls = getattr(pynvml, "NVMLError_" + name, None)
    if isinstance(cls, type) and issubclass(cls, pynvml.NVMLError):
        return cls().value
    raise ValueError(f"unknown NVML error {name!r} (use an NVMLError_* suffix such as "
                     f"'GpuIsLost', 'NotFound', 'Timeout')")


def call_matches(call: str, symbol: str) -> bool:
    """True when a fault's ``call`` names C symbol ``symbol``: exactly, or as its
    unversioned/pynvml name (``nvmlDeviceGetMemoryInfo`` matches ``..._v2``, ``...V``)."""
    if call in ("*", symbol):
        return True
    return symbol.startswith(call) and re.fullmatch(r"V|_v\d+", symbol[len(call):]) is not None


class NvmlImpl(DeviceCalls, SensorCalls, MigCalls, ProcessCalls, EventGpmCalls, ImplBase):
    """Every C symbol the fake defines, as a method with the C argument list."""


class _Symbol:
    """One exported function: counted, fault-checked, then dispatched to the implementation.

    Like a ctypes function pointer it accepts ``restype``/``argtypes`` assignments (pynvml
    sets ``nvmlErrorString.restype = c_char_p``); they are ignored, the implementation
    already returns what the C function would.
    """

    def __init__(self, lib: FakeNvmlLib, name: str):
        self.__name__ = name
        self._lib = lib
        self._method = getattr(lib._impl, name)
        self.restype = None
        self.argtypes = None

    def __call__(self, *args):
        sim = self._lib._sim
        name = self.__name__
        with sim._lock:
            sim.call_counts[name] += 1
            fault = self._lib._fault_for(name, args)
        if fault is not None:
            if fault.delay_seconds > 0:
                time.sleep(fault.delay_seconds)
            code = error_code(fault.error)
            if code != pynvml.NVML_SUCCESS:
                return code
        with sim._lock:
            return self._method(*args)


class FakeNvmlLib:
    """Drop-in for ``pynvml.nvmlLib``, answering from ``sim``.

    ``hidden_symbols`` removes C symbols, as an older driver would lack them.
    """

    def __init__(self, sim: Simulation, hidden_symbols=()):
        self._sim = sim
        self._impl = NvmlImpl(sim)
        self._hidden = frozenset(hidden_symbols)
        self._symbols: dict[str, _Symbol] = {}

    def __getattr__(self, name: str) -> _Symbol:
        if (not name.startswith("nvml") or name in self._hidden
                or not callable(getattr(NvmlImpl, name, None))):
            raise AttributeError(f"fake libnvidia-ml has no symbol {name!r}")
        symbol = self._symbols.get(name)
        if symbol is None:
            symbol = self._symbols[name] = _Symbol(self, name)
        return symbol

    def _fault_for(self, name: str, args: tuple) -> FaultWindow | None:
        if name in _FAULT_EXEMPT:
            return None
        engine = self._sim.engine
        gpu = gpu_of_call(name, args)
        if name == "nvmlSystemGetProcessName" and args:  # the GPU of that pid, if it runs
            pid = int(getattr(args[0], "value", args[0]))
            gpu = next((p.gpu for p in engine.alive() if p.pid == pid), None)
        for fault in engine.faults:
            if not fault.active(engine.now) or not call_matches(fault.call, name):
                continue
            # A handle-less call (no GPU to compare) only fails when the fault names it.
            if fault.gpu is None or fault.gpu == gpu or (gpu is None and fault.call != "*"):
                return fault
        return None
