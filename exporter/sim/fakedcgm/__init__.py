"""A simulated DCGM: fake Python bindings over a simulated host engine, from the same scenario.

- ``bindings/``: modules named like DCGM's (dcgm_structs, dcgm_fields, dcgm_agent, dcgmvalue),
  with the same call shapes, value structs, blank sentinels and error classes, so the exporter's
  DCGM backend runs on them unchanged. They are imported by bare name from BINDINGS_DIR, as
  the real ones are from /usr/share/datacenter-gpu-manager-4/bindings/python3.
- ``hostengine.FakeDcgmLib``: the C API those wrappers call, answered from the Simulation
  (exporter.sim.engine and its telemetry: the values the fake NVML reports, one truth).
- ``spec``: the optional ``dcgm`` scenario section (version, faults...).

``install(sim, spec)`` makes the bindings' ``_dcgmInit`` find that host engine; ``uninstall``
takes it away again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from exporter.sim.fakedcgm import registry

if TYPE_CHECKING:  # the host engine loads at install(): reading a scenario's dcgm section (spec) does not need it
    from exporter.sim.fakedcgm.hostengine import FakeDcgmLib
    from exporter.sim.fakedcgm.spec import DcgmSpec

BINDINGS_DIR = str(Path(__file__).resolve().parent / "bindings")


def install(sim, spec: DcgmSpec) -> FakeDcgmLib:
    """Register a simulated libdcgm for ``sim``; the fake bindings load it from now on."""
    from exporter.sim.fakedcgm.hostengine import FakeDcgmLib

    lib = FakeDcgmLib(sim, spec)
    registry.install(lib)
    return lib


def uninstall(lib: FakeDcgmLib) -> None:
    registry.uninstall(lib)


def __getattr__(name: str):
    if name == "FakeDcgmLib":
        from exporter.sim.fakedcgm.hostengine import FakeDcgmLib

        return FakeDcgmLib
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BINDINGS_DIR", "FakeDcgmLib", "install", "uninstall"]
