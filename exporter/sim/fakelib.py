"""A fake libnvidia-ml: C symbols with C signatures, answered from a Simulation.

``pynvml.nvmlLib`` is normally a ``ctypes.CDLL``; pynvml looks every function up with
``getattr(nvmlLib, "<C symbol>")`` and calls it with ctypes arguments (``byref(...)`` out
parameters, ``create_string_buffer`` buffers, opaque handle pointers), then checks the
returned ``nvmlReturn_t``. ``FakeNvmlLib`` answers those lookups, so the real pynvml code
runs unchanged on top: its str/bytes conversions, exception classes and
``NVMLLibraryMismatchError`` all behave as on a real driver.

Which symbols exist. The library exports what the simulated driver branch exports
(exporter.sim.nvml_symbols, from the scenario's ``driver_version``): a symbol of a newer
branch, an unknown name, or one hidden to mimic an older driver raises AttributeError,
which pynvml turns into NVMLError_FunctionNotFound exactly as for a real library. Of the
symbols the branch exports, the fakelib_* mixins implement those a monitoring client
reads; every other one is answered by exporter.sim.fakelib_fallback (NotSupported for a
reading this board does not give, NoPermission for a change: the fake is read-only).

The recorder: every symbol looked up and refused lands in ``Simulation.missing_symbols``,
every one answered by the fallback in ``Simulation.fallback_symbols``, and every call whose
arguments the fake could not use (a NULL pointer where NVML wants a buffer: answered
INVALID_ARGUMENT) in ``Simulation.invalid_calls`` (C symbol -> calls).

Every call is counted in ``Simulation.call_counts`` under its C symbol, then checked against
the scenario's faults (which may sleep for real, to simulate a hanging call) before the
implementation runs. Fault matching: exporter.sim.faults.
"""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

import pynvml

from exporter.catalog import driver_branch
from exporter.sim.fakelib_base import ImplBase
from exporter.sim.fakelib_board import BoardCalls
from exporter.sim.fakelib_ci import ComputeInstanceCalls
from exporter.sim.fakelib_device import DeviceCalls
from exporter.sim.fakelib_events_gpm import EventGpmCalls
from exporter.sim.fakelib_fallback import fallback_for
from exporter.sim.fakelib_fields import FieldCalls
from exporter.sim.fakelib_health import HealthCalls
from exporter.sim.fakelib_identity import IdentityCalls
from exporter.sim.fakelib_mig import MigCalls
from exporter.sim.fakelib_procs import ProcessCalls
from exporter.sim.fakelib_sensors import SensorCalls
from exporter.sim.faults import FaultMatcher, call_matches  # noqa: F401 - re-exported
from exporter.sim.nvml_symbols import SYMBOLS_BY_BRANCH, exported

if TYPE_CHECKING:
    from exporter.sim import Simulation


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


class NvmlImpl(FieldCalls, BoardCalls, IdentityCalls, HealthCalls, DeviceCalls, SensorCalls, MigCalls,
               ComputeInstanceCalls, ProcessCalls, EventGpmCalls, ImplBase):
    """Every C symbol the fake implements, as a method with the C argument list."""


class _Symbol:
    """One exported function: counted, fault-checked, then dispatched to the implementation.

    Like a ctypes function pointer it accepts ``restype``/``argtypes`` assignments (pynvml
    sets ``nvmlErrorString.restype = c_char_p``); they are ignored, the implementation
    already returns what the C function would.
    """

    def __init__(self, lib: FakeNvmlLib, name: str, method):
        self.__name__ = name
        self._lib = lib
        self._method = method
        self.restype = None
        self.argtypes = None

    def __call__(self, *args):
        sim = self._lib._sim
        name = self.__name__
        with sim._lock:
            sim.call_counts[name] += 1
            fault = self._lib._faults.fault_for(name, args, self._lib._impl)
        if fault is not None:
            if fault.delay_seconds > 0:
                time.sleep(fault.delay_seconds)
            code = error_code(fault.error)
            if code != pynvml.NVML_SUCCESS:
                return code
        with sim._lock:
            try:
                return self._method(*args)
            except (AttributeError, TypeError, ValueError, IndexError, ctypes.ArgumentError):
                # Arguments a C library could not use (a NULL or wrongly typed pointer, a
                # short array): INVALID_ARGUMENT, as NVML checks its pointers; recorded.
                sim.invalid_calls[name] += 1
                return pynvml.NVML_ERROR_INVALID_ARGUMENT


class FakeNvmlLib:
    """Drop-in for ``pynvml.nvmlLib``, answering from ``sim``.

    ``hidden_symbols`` removes C symbols, as an older driver would lack them.
    """

    def __init__(self, sim: Simulation, hidden_symbols=()):
        self._sim = sim
        self._impl = NvmlImpl(sim)
        self._hidden = frozenset(hidden_symbols)
        self._symbols: dict[str, _Symbol] = {}
        self._faults = FaultMatcher(sim)
        self._branch = _branch(sim.scenario.driver_version)

    def __getattr__(self, name: str) -> _Symbol:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        symbol = self._symbols.get(name)
        if symbol is not None:
            return symbol
        method = None
        if name not in self._hidden and exported(name, self._branch):
            method = getattr(self._impl, name, None)
            if not callable(method):
                method = fallback_for(self._impl, name)
        if method is None:
            with self._sim._lock:
                self._sim.missing_symbols[name] += 1
            raise AttributeError(f"fake libnvidia-ml ({self._sim.scenario.driver_version}) has no symbol {name!r}")
        symbol = self._symbols[name] = _Symbol(self, name, method)
        return symbol


def _branch(driver_version: str) -> int:
    """580 for "580.95.05". The symbol table's oldest branch stands for every older one too
    (nvml_symbols), so a 470 or 510 scenario exports what R535 does, not nothing."""
    return max(driver_branch(driver_version), min(SYMBOLS_BY_BRANCH))
