"""Loads DCGM's Python bindings: the only module of the exporter that imports them.

The bindings ship with DCGM, not on PyPI (shared/reference/dcgm_k8s_facts.md §A1): modules
``dcgm_structs``, ``dcgm_fields``, ``dcgm_agent``, ``dcgmvalue`` (and ``pydcgm``, not used
here) that import each other by bare name, so their directory goes on ``sys.path``. They
are looked for in a configured directory (``--dcgm-bindings``) or DCGM's install paths:

- DCGM 4.x (datacenter-gpu-manager-4-core): /usr/share/datacenter-gpu-manager-4/bindings/python3
- DCGM 3.x (datacenter-gpu-manager): /usr/local/dcgm/bindings/python3
- DCGM 2.x: /usr/local/dcgm/bindings and /usr/src/dcgm/bindings

The other DCGM modules of the exporter receive the loaded modules from here (a ``Bindings``)
and never import them, as exporter/backend/nvml.py is the only importer of pynvml.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from types import ModuleType

INSTALL_DIRS = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
    "/usr/local/dcgm/bindings/python3",
    "/usr/local/dcgm/bindings",
    "/usr/src/dcgm/bindings",
)
MODULES = ("dcgm_structs", "dcgm_fields", "dcgm_agent", "dcgmvalue")


class BindingsNotFound(Exception):
    """The bindings are not installed where we looked, or failed to import; str() says which."""


@dataclass(frozen=True)
class Bindings:
    """The loaded binding modules and where they came from."""

    structs: ModuleType
    fields: ModuleType
    agent: ModuleType
    value: ModuleType
    directory: str

    def error_class(self):
        """DCGMError, the base class of every DCGM call failure."""
        return self.structs.DCGMError


def search_dirs(configured: str | None) -> tuple[str, ...]:
    """The configured directory alone when given (a wrong one must not fall back silently)."""
    return (configured,) if configured else INSTALL_DIRS


def load(directories: tuple[str, ...]) -> Bindings:
    """Import the bindings from the first directory that has them; BindingsNotFound otherwise."""
    for directory in directories:
        if os.path.isfile(os.path.join(directory, "dcgm_agent.py")):
            return _import_from(directory)
    where = ", ".join(directories)
    raise BindingsNotFound(f"DCGM Python bindings not found (looked in {where}); install "
                           "datacenter-gpu-manager-4-core, or give their directory with --dcgm-bindings")


def _import_from(directory: str) -> Bindings:
    real = os.path.realpath(directory)
    for name in MODULES:  # a copy imported from elsewhere would mix two DCGM versions
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        if module is not None and os.path.dirname(os.path.realpath(origin)) != real:
            del sys.modules[name]
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)  # the modules import each other by bare name: this copy first
    try:
        modules = [importlib.import_module(name) for name in MODULES]
    except Exception as exc:  # noqa: BLE001 - a broken install is reported, never raised through
        raise BindingsNotFound(f"DCGM Python bindings in {directory} failed to import: "
                               f"{type(exc).__name__}: {exc}") from None
    structs, fields, agent, value = modules
    return Bindings(structs, fields, agent, value, directory)


__all__ = ["Bindings", "BindingsNotFound", "INSTALL_DIRS", "load", "search_dirs"]
