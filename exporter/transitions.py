"""Log what changed between polls, once: a GPU going down and coming back, XIDs, MPS server
restarts, MIG reconfigurations.

The backend reports states every poll (a lost GPU is ``up=False`` in every snapshot); logging
states would repeat the same line every second. :class:`TransitionLog` is a poller observer
that compares each snapshot with the previous one and logs each change once:

- WARNING ``GPU 0 (GPU-...) is down: GpuIsLost`` when a GPU stops answering, INFO
  ``GPU 0 (GPU-...) is back up after 35s down`` when it answers again;
- WARNING ``GPU 0 (GPU-...): XID 79 (x2)`` for XID errors counted since the previous poll;
- WARNING ``GPU 0 (GPU-...): MPS server restarted (pid 100 -> 200)``, INFO when an MPS server
  starts or stops;
- INFO ``GPU 1 (GPU-...): MIG layout changed: 3g.20gb@0 2g.10gb@4 -> 3g.20gb@0 3g.20gb@4``,
  and when MIG mode is switched.

Command lines never appear here (nor anywhere else in logs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from exporter.snapshot import GpuInfo, Snapshot

log = logging.getLogger(__name__)


@dataclass
class _GpuState:
    up: bool
    error: str | None
    since: float  # when the current up/down state began (snapshot clock)
    xids: dict = field(default_factory=dict)
    mps: dict = field(default_factory=dict)  # gi (None = whole GPU) -> server pid
    layout: tuple = ()
    mig_mode: bool | None = None


def _name(gpu: GpuInfo) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})" if gpu.uuid else f"GPU {gpu.index}"


def _layout(gpu: GpuInfo) -> tuple:
    seen, out = set(), []
    for inst in sorted(gpu.mig_instances, key=lambda i: (i.placement_start, i.gi)):
        if inst.gi not in seen:
            seen.add(inst.gi)
            out.append(f"{inst.profile}@{inst.placement_start}")
    return tuple(out)


class TransitionLog:
    """Poller observer: ``observe(snapshot)`` logs the changes since the previous snapshot."""

    def __init__(self, clock: Callable[[Snapshot], float] | None = None) -> None:
        self._clock = clock or (lambda s: s.simulation.clock if s.simulation is not None else s.timestamp)
        self._gpus: dict[int, _GpuState] = {}

    def observe(self, snapshot: Snapshot) -> None:
        now = self._clock(snapshot)
        for gpu in snapshot.gpus:
            before = self._gpus.get(gpu.index)
            if before is None:
                self._gpus[gpu.index] = self._first(gpu, now)
                continue
            self._up_down(gpu, before, now)
            if gpu.up:
                self._xids(gpu, before)
                # An incomplete read (a failed process or MIG list this poll) is not a change.
                if snapshot.section_ok.get("process", True) and snapshot.section_ok.get("mps", True):
                    self._mps(gpu, before)
                if snapshot.section_ok.get("mig", True):
                    self._mig(gpu, before)

    def _first(self, gpu: GpuInfo, now: float) -> _GpuState:
        """The first sight of a GPU: a GPU already down at start is worth one line too."""
        if not gpu.up:
            log.warning("%s is down: %s", _name(gpu), gpu.error or "unknown error")
        return _GpuState(gpu.up, gpu.error, now, dict(gpu.xid_errors), _servers(gpu), _layout(gpu), gpu.mig_mode)

    def _up_down(self, gpu: GpuInfo, before: _GpuState, now: float) -> None:
        if gpu.up and not before.up:
            log.info("%s is back up after %.0fs down (%s)", _name(gpu), max(0.0, now - before.since),
                     before.error or "unknown error")
            before.up, before.error, before.since = True, None, now
            # What changed while it was down is not news: start comparing afresh.
            before.mps, before.layout, before.mig_mode = _servers(gpu), _layout(gpu), gpu.mig_mode
        elif not gpu.up and before.up:
            log.warning("%s is down: %s", _name(gpu), gpu.error or "unknown error")
            before.up, before.error, before.since = False, gpu.error, now
        elif not gpu.up and gpu.error != before.error:
            log.warning("%s is still down, now: %s (was: %s)", _name(gpu), gpu.error, before.error)
            before.error = gpu.error

    def _xids(self, gpu: GpuInfo, before: _GpuState) -> None:
        for code, count in sorted(gpu.xid_errors.items()):
            new = count - before.xids.get(code, 0)
            if new > 0:
                log.warning("%s: XID %d%s", _name(gpu), code, f" (x{new})" if new > 1 else "")
        before.xids = dict(gpu.xid_errors)

    def _mps(self, gpu: GpuInfo, before: _GpuState) -> None:
        now = _servers(gpu)
        for gi in sorted(set(now) | set(before.mps), key=lambda g: -1 if g is None else g):
            where = _name(gpu) if gi is None else f"{_name(gpu)} GI {gi}"
            old, new = before.mps.get(gi), now.get(gi)
            if old is not None and new is not None and old != new:
                log.warning("%s: MPS server restarted (pid %d -> %d)", where, old, new)
            elif old is None and new is not None:
                log.info("%s: MPS server started (pid %d)", where, new)
            elif old is not None and new is None:
                log.info("%s: MPS server stopped (pid %d)", where, old)
        before.mps = now

    def _mig(self, gpu: GpuInfo, before: _GpuState) -> None:
        if gpu.mig_mode is not None and before.mig_mode is not None and gpu.mig_mode != before.mig_mode:
            log.info("%s: MIG mode %s", _name(gpu), "enabled" if gpu.mig_mode else "disabled")
        layout = _layout(gpu)
        if gpu.mig_mode and layout != before.layout and gpu.mig_mode == before.mig_mode:
            log.info("%s: MIG layout changed: %s -> %s", _name(gpu), " ".join(before.layout) or "(none)",
                     " ".join(layout) or "(none)")
        if gpu.mig_mode is not None:
            before.mig_mode = gpu.mig_mode
        before.layout = layout


def _servers(gpu: GpuInfo) -> dict:
    """gi -> pid of the MPS server there (the lowest pid if several)."""
    out: dict = {}
    for server in sorted(gpu.mps_servers, key=lambda s: s.pid):
        out.setdefault(server.gi, server.pid)
    return out
