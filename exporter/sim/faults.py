"""Which scenario fault (exporter.sim.state.FaultWindow) a fake NVML call runs into.

A window matches a call when it is active at the current virtual time, names the call
(exporter.sim.fakelib.call_matches), and is about the call's GPU: the GPU of its handle
argument, of the NVML index for nvmlDeviceGetHandleByIndex, or of the pid for
nvmlSystemGetProcessName. A window scoped to one MIG instance matches only calls on that
instance: its MIG device, GPU-instance and compute-instance handles, and the parent calls
that name it (nvmlDeviceGetMigDeviceHandleByIndex with its index, nvmlDeviceGetGpuInstanceById
and nvmlGpmMigSampleGet with its GI id). A handle-less call (nvmlInit, nvmlDeviceGetCount,
...) only fails through a window that names it, never through "*".

Probabilistic windows (``probability`` < 1) fail each matching call with that chance. The
draw is a hash of (scenario seed, window, C symbol, GPU, n) where n counts that window's
matching calls of that symbol on that GPU: the same scenario and the same calls give the
same failures, whatever the thread interleaving between GPUs (each GPU is read in order).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import TYPE_CHECKING

from exporter.sim.fakelib_base import KIND_CI, KIND_GI, KIND_MIG, handle_of_call, value

if TYPE_CHECKING:
    from exporter.sim import Simulation
    from exporter.sim.state import FaultWindow

# Calls that never fail through a fault: pynvml needs them to stop and to print errors.
FAULT_EXEMPT = frozenset({"nvmlShutdown", "nvmlErrorString"})
INIT_SYMBOLS = frozenset({"nvmlInitWithFlags", "nvmlInit_v2"})
# Parent-handle calls whose second argument names one MIG instance: (symbol, attribute).
_INSTANCE_ARG = {"nvmlDeviceGetMigDeviceHandleByIndex": "mig_index",
                 "nvmlDeviceGetGpuInstanceById": "gi", "nvmlGpmMigSampleGet": "gi"}


def call_matches(call: str, symbol: str) -> bool:
    """True when a fault's ``call`` names C symbol ``symbol``: exactly, or as its
    unversioned/pynvml name (``nvmlDeviceGetMemoryInfo`` matches ``..._v2``, ``...V``);
    ``nvmlInit`` matches both init symbols."""
    if call in ("*", symbol):
        return True
    if call == "nvmlInit":
        return symbol in INIT_SYMBOLS
    return symbol.startswith(call) and re.fullmatch(r"V|_v\d+", symbol[len(call):]) is not None


def draw(seed: int, ident: int, symbol: str, gpu, n: int) -> float:
    """A reproducible uniform number in [0, 1) for the n-th matching call."""
    digest = hashlib.blake2b(f"{seed}/{ident}/{symbol}/{gpu}/{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class FaultMatcher:
    """Finds the fault window a call runs into, if any (called under the simulation lock)."""

    def __init__(self, sim: Simulation):
        self._sim = sim
        self._counts: Counter = Counter()

    def fault_for(self, name: str, args: tuple, impl) -> FaultWindow | None:
        if name in FAULT_EXEMPT:
            return None
        engine = self._sim.engine
        handle = handle_of_call(args)
        gpu = None if handle is None else handle[1]
        if name == "nvmlDeviceGetHandleByIndex_v2" and args:
            index = value(args[0])
            gpu = impl._visible[index] if 0 <= index < len(impl._visible) else None
        elif name == "nvmlSystemGetProcessName" and args:  # the GPU of that pid, if it runs
            pid = value(args[0])
            gpu = next((p.gpu for p in engine.alive() if p.pid == pid), None)
        for fault in engine.faults:
            if not fault.active(engine.now) or not call_matches(fault.call, name):
                continue
            if name in INIT_SYMBOLS and fault.call == "*":
                continue  # "every call" means every call on a GPU, not the library's start
            if fault.serial is not None:
                if not self._on_instance(fault, name, args, handle):
                    continue
            elif not (fault.gpu is None or fault.gpu == gpu or (gpu is None and fault.call != "*")):
                continue
            if fault.probability < 1.0:
                key = (fault.ident, name, gpu)
                self._counts[key] += 1
                if draw(self._sim.scenario.seed, fault.ident, name, gpu, self._counts[key]) >= fault.probability:
                    continue
            return fault
        return None

    @staticmethod
    def _on_instance(fault: FaultWindow, name: str, args: tuple, handle) -> bool:
        if handle is None or handle[1] != fault.gpu:
            return False
        if handle[0] in (KIND_MIG, KIND_GI, KIND_CI):
            return handle[2] == fault.serial
        attribute = _INSTANCE_ARG.get(name)
        return attribute is not None and len(args) > 1 and value(args[1]) == getattr(fault, attribute)
