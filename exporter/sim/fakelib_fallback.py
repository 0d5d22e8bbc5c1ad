"""Answers for the exported NVML symbols the fake does not model one by one.

The simulated driver exports every symbol of its branch (exporter.sim.nvml_symbols), so no
client ever gets a FunctionNotFound that the real driver would not give. The symbols
exporter.sim.fakelib_* implement answer with values; the rest answer here, after the same
checks a real call makes first (NVML initialised, a valid handle, the GPU still on the bus):

- a call that would change the GPU or the driver (Set*, Clear*, Reset*, Create*, Destroy*,
  Remove*, Discover*, Modify*, Freeze*, power smoothing and workload-profile updates, PRM
  writes): NO_PERMISSION, what a non-root caller gets. The simulation is read-only;
- any other reading: NOT_SUPPORTED (vGPU host calls on a bare-metal GPU, NVSwitch fabric,
  C2C links, unit (S-class) queries, and readings the simulation has no model for).

docs/scenarios.md ("Fidelity contract") lists which readings are simplified this way.
"""

from __future__ import annotations

import re

from exporter.sim.fakelib_base import (
    KIND_CI, KIND_GI, KIND_GPU, KIND_MIG, NO_PERMISSION, NOT_SUPPORTED, UNINITIALIZED, decode,
)
from exporter.sim.nvml_symbols import SINCE

_CHANGES = re.compile(
    r"^nvml(Device|GpuInstance|ComputeInstance|System|Unit|VgpuInstance|Gpm|EventSet)?"
    r"(Set|Clear|Reset|Create|Destroy|Freeze|Modify|Remove|Discover|PowerSmoothing|ReadWritePRM|"
    r"VgpuForce|WorkloadPowerProfile(Set|Clear|Update))")


def changes_state(name: str) -> bool:
    """True for calls that change the GPU or the driver rather than read them."""
    return _CHANGES.match(name) is not None


def fallback_for(impl, name: str):
    """A C function for exported symbol ``name`` that the fake does not implement, or None
    when ``name`` is no NVML symbol at all."""
    if name not in SINCE:
        return None
    code = NO_PERMISSION if changes_state(name) else NOT_SUPPORTED
    sim = impl.sim

    def answer(*args):
        sim.fallback_symbols[name] += 1
        if impl._uninitialized():
            return UNINITIALIZED
        handle = decode(args[0]) if args else None
        if handle is not None and handle[0] in (KIND_GPU, KIND_MIG):
            dev = impl._dev(args[0])
            if isinstance(dev, int):
                return dev
        elif handle is not None and handle[0] in (KIND_GI, KIND_CI):
            dev = impl._gi(args[0])
            if isinstance(dev, int):
                return dev
        return code

    answer.__name__ = name
    return answer
