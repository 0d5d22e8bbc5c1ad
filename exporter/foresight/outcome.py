"""How well the forecast does on this fleet: suspected OOM kills and the warnings before them.

Nothing on a real host says "this process was killed for lack of GPU memory": CUDA returns
an out-of-memory error to the process, which usually exits. So this is a heuristic, stated
as one (docs/foresight.md):

- a **suspected OOM kill** is a process that vanished from a GPU the exporter could read
  while, at its last sighting, its memory domain (the GPU, or its MIG instance) was at least
  FULL_FRACTION full and shared with another process, or the process itself held at least
  FULL_FRACTION of its MPS pinned memory limit; or one that was gone before its profile's
  expected end while the contention warning was up on its device (the fatal allocation
  usually comes between two polls, so the device is rarely seen full).
  A process that ends normally on a full device, or crashes early during a warning, counts
  too (false positives); one killed, unwarned, on a device that was not full at the poll
  before (a spike between polls) does not (a false negative, which flatters recall).
  ``predicted`` says whether the contention warning was up on its device at its last sighting.
- a **contention warning** is the shipped alert's condition (headroom below zero for at
  least WARNING_FOR seconds, as the rules' ``for:``) on one memory domain; it is counted when
  it ends, with ``outcome="oom"`` when a suspected OOM kill happened on that GPU while it was
  up or within OUTCOME_GRACE seconds after, else ``outcome="none"``.

Precision over 30 days is then warnings with outcome oom over all warnings, and recall the
predicted share of suspected kills (recording rules in alerts/gpushare-recording.yml).
Series are per GPU (MIG instances are summed into their GPU), created at 0 on first sight
of a GPU so that increase() sees the first event: 4 series per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FULL_FRACTION = 0.97  # a domain (or MPS limit) this full when a process vanished may have OOM-killed it
WARNING_FOR = 30.0  # seconds: the `for:` of GpuMemoryContentionPredicted / MigMemoryContentionPredicted
OUTCOME_GRACE = 60.0  # seconds after a warning ends in which a kill still counts as its outcome

Device = tuple[str, "int | None"]  # (GPU uuid, gi)


@dataclass
class _Warning:
    negative_since: float  # first poll of the current negative-headroom streak
    up_since: float | None = None  # when it had lasted WARNING_FOR (the alert fires)
    oom: bool = False  # a suspected kill happened on its GPU while it was up


@dataclass
class OutcomeCounts:
    """Counter values of one GPU, since the exporter started."""

    gpu: int
    suspected: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})  # predicted -> kills
    warnings: dict[str, int] = field(default_factory=lambda: {"oom": 0, "none": 0})  # outcome -> warnings


class Outcomes:
    """Suspected OOM kills and finished contention warnings, per GPU."""

    def __init__(self) -> None:
        self.counts: dict[str, OutcomeCounts] = {}  # GPU uuid -> counters
        self._warnings: dict[Device, _Warning] = {}
        self._ended: list[tuple[Device, float, _Warning]] = []  # waiting OUTCOME_GRACE for a kill

    def gpu_seen(self, index: int, uuid: str) -> None:
        """Create the GPU's counters at 0 (first sight), keep its index current."""
        counts = self.counts.get(uuid)
        if counts is None:
            self.counts[uuid] = OutcomeCounts(index)
        else:
            counts.gpu = index

    def warning_up(self, device: Device) -> bool:
        """True when the contention warning of a device was up at its last forecast."""
        warning = self._warnings.get(device)
        return warning is not None and warning.up_since is not None

    def vanished(self, device: Device, suspected: bool, predicted: bool, now: float) -> None:
        """A process left ``device``; count it when it looks like an OOM kill."""
        if not suspected or device[0] not in self.counts:
            return
        self.counts[device[0]].suspected[predicted] += 1
        for other, warning in self._warnings.items():
            if other[0] == device[0] and warning.up_since is not None:
                warning.oom = True
        for other, ended_at, warning in self._ended:
            if other[0] == device[0] and now - ended_at <= OUTCOME_GRACE:
                warning.oom = True

    def forecast(self, device: Device, headroom_bytes: int | None, now: float) -> None:
        """Follow a device's warning with this poll's headroom (None: no forecast this poll)."""
        warning = self._warnings.get(device)
        if headroom_bytes is not None and headroom_bytes < 0:
            if warning is None:
                warning = self._warnings[device] = _Warning(now)
            if warning.up_since is None and now - warning.negative_since >= WARNING_FOR:
                warning.up_since = now
            return
        if warning is not None:
            del self._warnings[device]
            if warning.up_since is not None:
                self._ended.append((device, now, warning))

    def settle(self, now: float) -> list[tuple[Device, bool]]:
        """Count the warnings whose grace period is over; (device, ended with an OOM) of each."""
        waiting, settled = [], []
        for device, ended_at, warning in self._ended:
            if now - ended_at > OUTCOME_GRACE or warning.oom:
                counts = self.counts.get(device[0])
                if counts is not None:
                    counts.warnings["oom" if warning.oom else "none"] += 1
                settled.append((device, warning.oom))
            else:
                waiting.append((device, ended_at, warning))
        self._ended = waiting
        return settled

    def devices_without(self, present: set[Device], now: float) -> None:
        """End the warnings of devices that had no forecast this poll (gone, unread)."""
        for device in [d for d in self._warnings if d not in present]:
            self.forecast(device, None, now)

    def rows(self) -> tuple[tuple[int, str, int, int, int, int], ...]:
        """(gpu, uuid, kills predicted, kills not predicted, warnings with oom, without) per GPU."""
        return tuple((c.gpu, uuid, c.suspected[True], c.suspected[False], c.warnings["oom"], c.warnings["none"])
                     for uuid, c in sorted(self.counts.items(), key=lambda item: (item[1].gpu, item[0])))
