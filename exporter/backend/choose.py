"""Which backend reads the GPUs: ``--backend nvml``, ``dcgm`` or ``auto``, and why.

- nvml: NVML only.
- dcgm: DCGM's bindings must load (else one line, exit 2: the user asked for DCGM); a host
  engine that does not answer yet is waited for (the backend serves NVML data meanwhile and
  says so in gpushare_exporter_source_available{source="dcgm"}).
- auto: DCGM when its bindings load and a host engine answers now, else NVML.

The choice and its reason go to the log, to ``Snapshot.backend_reason`` (``exporter
snapshot``, /api/v1/snapshot) and to the landing page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.backend import dcgm_bindings
from exporter.errors import UserError

if TYPE_CHECKING:  # the DCGM backend is imported when DCGM is tried: an NVML-only run never loads it
    from exporter.backend.dcgm_session import DcgmAddress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DcgmOptions:
    """How to reach DCGM: bindings directories to search, host engine address (None = embedded)."""

    bindings_dirs: tuple[str, ...] = dcgm_bindings.INSTALL_DIRS
    address: DcgmAddress | None = None
    interval: float = 1.0  # seconds between the exporter's polls
    bindings_label: str | None = None  # how messages name where the bindings are (default: the directory)
    update_interval: float | None = None  # --dcgm-update-interval; None: see watch_interval()

    def watch_interval(self) -> float:
        """The update period the exporter asks DCGM for (docs/backends.md): --dcgm-update-interval
        when given; else the poll interval, but on a shared nv-hostengine (--dcgm-address) at
        least SHARED_ENGINE_MIN_SECONDS: DCGM samples a field at the fastest period any of its
        clients asked for, so a 1 s poll would make it sample every second for everyone."""
        if self.update_interval is not None:
            return max(MIN_UPDATE_SECONDS, self.update_interval)
        if self.address is None:
            return max(MIN_UPDATE_SECONDS, self.interval)
        return max(SHARED_ENGINE_MIN_SECONDS, self.interval)


MIN_UPDATE_SECONDS = 0.1  # DCGM's own floor for a watch is 100 ms
SHARED_ENGINE_MIN_SECONDS = 5.0


def open_backend(kind: str, nvml, options: DcgmOptions):
    """The opened backend for ``kind`` ("nvml", "dcgm", "auto") on top of the unopened ``nvml``."""
    if kind == "nvml":
        return open_nvml(nvml, "--backend nvml")
    try:
        bindings = dcgm_bindings.load(options.bindings_dirs)
    except dcgm_bindings.BindingsNotFound as exc:
        if kind == "dcgm":
            raise UserError(f"--backend dcgm: {exc}") from None
        return open_nvml(nvml, f"--backend auto: {exc}")
    where = options.bindings_label or bindings.directory
    from exporter.backend.dcgm import DcgmBackend
    from exporter.backend.dcgm_caller import DcgmCaller, DcgmError
    from exporter.backend.dcgm_session import DcgmSession
    from exporter.backend.dcgm_status import reason_for

    if kind == "dcgm":
        backend = DcgmBackend(nvml, bindings, options.address, options.interval,
                              reason=f"--backend dcgm: DCGM bindings from {where}",
                              update_interval=options.watch_interval())
        backend.open()
        return backend
    session = DcgmSession(bindings, DcgmCaller(bindings), options.address, options.interval,
                          options.watch_interval())
    try:
        session.connect()
    except DcgmError as exc:
        session.close()
        return open_nvml(nvml, f"--backend auto: DCGM bindings found in {where} but "
                           f"{reason_for(exc, session.where)}")
    backend = DcgmBackend(nvml, bindings, options.address, options.interval, session=session,
                          update_interval=options.watch_interval(),
                          reason=f"--backend auto: DCGM bindings in {where} and {session.where} "
                                 f"(DCGM {session.version or 'version unknown'}) answered")
    try:
        backend.open()
    except BaseException:
        session.close()
        raise
    return backend


def open_nvml(nvml, reason: str):
    """Open the NVML backend, chosen for ``reason``."""
    nvml.reason = reason
    nvml.open()
    log.info("backend nvml: %s", reason)
    return nvml


class ChosenBackend:
    """The backend ``kind`` picks, decided at ``open()`` (DCGM is probed then, not before)."""

    def __init__(self, kind: str, nvml, options: DcgmOptions):
        self.kind = kind
        self._nvml = nvml
        self.options = options
        self.inner = None

    @property
    def name(self) -> str:
        return self.inner.name if self.inner is not None else ("dcgm" if self.kind == "dcgm" else "nvml")

    @property
    def reason(self) -> str:
        return getattr(self.inner, "reason", "")

    def open(self) -> None:
        self.inner = open_backend(self.kind, self._nvml, self.options)

    def poll(self):
        if self.inner is None:
            raise RuntimeError("poll() called before open()")
        return self.inner.poll()

    @property
    def calls_last_poll(self) -> int:
        return self.inner.calls_last_poll if self.inner is not None else 0

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
