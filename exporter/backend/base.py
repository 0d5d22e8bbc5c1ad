"""The interface every backend offers to the poller."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from exporter.snapshot import Snapshot


@runtime_checkable
class Backend(Protocol):
    """Reads every GPU on the host into a Snapshot.

    ``open`` raises exporter.errors.NoGpuError (a UserError) when there is nothing to read;
    ``poll`` never raises for failures of one GPU (they show as ``GpuInfo.up = False`` and
    in ``Snapshot.section_ok``); ``close`` releases driver resources and may be called twice.
    """

    name: str  # "nvml" | "dcgm": the ``backend`` field of every Snapshot

    def open(self) -> None: ...

    def poll(self) -> Snapshot: ...

    def close(self) -> None: ...
