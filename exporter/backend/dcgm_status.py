"""How the DCGM backend words and paces its failures: one-line reasons, logging once, narrowing.

Used by exporter.backend.dcgm_source (and exporter.backend.choose for --backend auto's reason).
"""

from __future__ import annotations

import logging

from exporter.backend.dcgm_caller import (
    CONNECTION_LOST, LIBRARY_NOT_FOUND, MODULE_NOT_LOADED, PROFILING_LIBRARY_ERROR, REQUIRES_ROOT, VER_MISMATCH,
    DcgmError,
)
from exporter.snapshot import SourceStatus

log = logging.getLogger("exporter.backend.dcgm_source")


def reason_for(exc: DcgmError, where: str) -> str:
    """One line saying what a DCGM failure means and what to do about it."""
    hints = {
        LIBRARY_NOT_FOUND: "libdcgm.so not found (install datacenter-gpu-manager-4-core or set LD_LIBRARY_PATH)",
        REQUIRES_ROOT: f"{where} needs root while MIG is enabled (-29): run the exporter as root or use "
                       "--dcgm-address to read from nv-hostengine",
        VER_MISMATCH: f"{where} answered 'API version mismatch' (-12): run nv-hostengine and the DCGM "
                      "bindings of the same version",
        MODULE_NOT_LOADED: "DCGM's profiling module is not loaded (-33): install "
                           "datacenter-gpu-manager-4-proprietary (or DCGM's profiling package)",
        PROFILING_LIBRARY_ERROR: "profiling module busy (-37): another tool (Nsight Systems/Compute, CUPTI, a "
                                 "second DCGM) holds the GPU performance counters",
    }
    if exc.code in hints:
        return hints[exc.code]
    if exc.code in CONNECTION_LOST:
        return f"{where} is not reachable ({exc.message}, {exc.code})"
    return f"{exc.call} failed on {where}: {exc.message} ({exc.error})"


# Profiling fields that pre-Hopper GPUs collect together when the full set needs several passes
# (-38): activity and memory traffic first, then SM activity alone.
SINGLE_PASS_SETS = ((1001, 1002, 1004, 1005), (1002,))


def single_pass_candidates(fields: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``fields``, then narrower sets of them to try when DCGM answers -38 (multi-pass)."""
    out = [fields]
    for subset in SINGLE_PASS_SETS:
        narrowed = tuple(f for f in fields if f in subset)
        if narrowed and narrowed not in out:
            out.append(narrowed)
    return out


class SourceLog:
    """Logs each source's reason once when it appears or changes, and its recovery."""

    def __init__(self) -> None:
        self._last: dict[str, SourceStatus] = {}

    def update(self, sources: dict[str, SourceStatus]) -> None:
        for name, status in sources.items():
            previous = self._last.get(name)
            if status == previous:
                continue
            if not status.available:
                log.warning("source %s unavailable: %s", name, status.reason)
            elif previous is not None:
                log.info("source %s available again", name)
            self._last[name] = status
