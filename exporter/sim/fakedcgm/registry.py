"""Which simulated libdcgm the fake bindings load (the simulator's stand-in for libdcgm.so.4).

``dcgm_structs._dcgmInit`` of the fake bindings asks ``installed()``; a Simulation with a
DCGM host engine registers one with ``install`` and removes it with ``uninstall``.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_installed = None


def install(lib) -> None:
    global _installed
    with _lock:
        _installed = lib


def uninstall(lib) -> None:
    """Remove ``lib`` if it is the installed one (a later install is left alone)."""
    global _installed
    with _lock:
        if _installed is lib:
            _installed = None


def installed():
    return _installed
