"""The choke point of every DCGM call: counts calls, turns DCGMError into DcgmError.

Receives the loaded bindings (exporter/backend/dcgm_bindings.py); imports none. A failing
call raises ``DcgmError`` with the DCGM_ST_* code and the error class's short name
("ConnectionNotValid" for DCGMError_ConnectionNotValid), which the session and the backend
use to tell a lost host engine from a busy profiling module.
"""

from __future__ import annotations

import threading
from collections import Counter

from exporter.backend.dcgm_bindings import Bindings

# DCGM_ST_* codes the backend reacts to.
CONNECTION_NOT_VALID = -21
VER_MISMATCH = -12
REQUIRES_ROOT = -29
MODULE_NOT_LOADED = -33
PROFILING_NOT_SUPPORTED = -36
PROFILING_LIBRARY_ERROR = -37
PROFILING_MULTI_PASS = -38
NOT_SUPPORTED = -6
FUNCTION_NOT_FOUND = -20
NOT_WATCHED = -16
NO_DATA = -14
LIBRARY_NOT_FOUND = -25
# Errors after which the handle is useless: drop it and connect again later.
CONNECTION_LOST = frozenset({CONNECTION_NOT_VALID, VER_MISMATCH})


class DcgmError(Exception):
    """A DCGM call failed: ``code`` (DCGM_ST_*, None when not a DCGM error), ``error`` (short name)."""

    def __init__(self, call: str, code: int | None, error: str, message: str):
        super().__init__(f"{call}: {message} ({error}{'' if code is None else f', {code}'})")
        self.call = call
        self.code = code
        self.error = error
        self.message = message


def short_name(exc: BaseException) -> str:
    """DCGMError_ConnectionNotValid -> "ConnectionNotValid"."""
    name = type(exc).__name__
    return name[len("DCGMError_"):] if name.startswith("DCGMError_") else name


class DcgmCaller:
    """``call("dcgmWatchFields", handle, ...)`` runs ``dcgm_agent.dcgmWatchFields(handle, ...)``."""

    def __init__(self, bindings: Bindings):
        self.bindings = bindings
        self.calls_by_name: Counter[str] = Counter()
        self.calls_this_poll = 0
        self._lock = threading.Lock()

    def begin_poll(self) -> None:
        self.calls_this_poll = 0

    def call(self, fn_name: str, *args):
        fn = getattr(self.bindings.agent, fn_name, None)
        if fn is None:
            raise DcgmError(fn_name, FUNCTION_NOT_FOUND, "FunctionNotFound",
                            f"dcgm_agent in {self.bindings.directory} has no {fn_name}")
        return self.run(fn_name, fn, *args)

    def run(self, name: str, fn, *args):
        """Call any bindings function (e.g. dcgm_structs._dcgmInit) through the choke point."""
        with self._lock:
            self.calls_this_poll += 1
            self.calls_by_name[name] += 1
        try:
            return fn(*args)
        except self.bindings.error_class() as exc:
            raise DcgmError(name, getattr(exc, "value", None), short_name(exc), str(exc)) from None
        except (OSError, TypeError, ValueError, AttributeError) as exc:  # ctypes or a binding bug
            raise DcgmError(name, None, type(exc).__name__, str(exc) or type(exc).__name__) from None
