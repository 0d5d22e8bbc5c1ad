"""XID critical-error events of one GPU, counted per XID code (no pynvml import).

An event set is registered on the parent handle for nvmlEventTypeXidCriticalError; each
poll drains it without waiting (nvmlEventSetWait_v2 with timeout 0 until Timeout).
"""

from __future__ import annotations

from exporter.backend.nvml_types import NA, GpuLostError, NvmlCallError, PollContext, ok

MAX_EVENTS_PER_POLL = 1024  # bound the drain should a broken driver never say Timeout


class XidReader:
    """XID counts since exporter start for one GPU."""

    def __init__(self, caller, clock=None):
        """``clock``: Unix seconds now; an XID is stamped with the time of the drain that found
        it (NVML events carry no time: at most one poll interval late)."""
        self.caller = caller
        self.clock = clock
        self.last: tuple[int, float] | None = None  # (code, Unix seconds) of the latest XID
        self._set = None
        self._unsupported = False
        # Replaced, never mutated, so another thread may read it while a read is running.
        self.counts: dict[int, int] = {}

    def drain(self, ctx: PollContext, handle) -> dict[int, int]:
        """Count the XIDs that arrived since the last poll; return all counts so far."""
        if self._set is None and not self._unsupported:
            self._register(ctx, handle)
        if self._set is None:
            return self.counts
        nv = self.caller.nv
        new: dict[int, int] = {}
        for _ in range(MAX_EVENTS_PER_POLL):
            data = ctx.get("gpu", "nvmlEventSetWait_v2", self._set, 0, expect=("Timeout",))
            if not ok(data):
                break  # Timeout: queue empty
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                code = int(data.eventData)
                new[code] = new.get(code, 0) + 1
                if self.clock is not None:
                    self.last = (code, float(self.clock()))
        if new:
            counts = dict(self.counts)
            for code, n in new.items():
                counts[code] = counts.get(code, 0) + n
            self.counts = counts
        return self.counts

    def _register(self, ctx: PollContext, handle) -> None:
        nv = self.caller.nv
        event_set = ctx.raw("gpu", "nvmlEventSetCreate")
        if not ok(event_set):
            self._unsupported = event_set is NA  # a failure is retried next poll
            return
        # nvmlDeviceRegisterEvents returns None on success, so PollContext cannot be used.
        try:
            result = self.caller.call("nvmlDeviceRegisterEvents", handle, nv.nvmlEventTypeXidCriticalError,
                                      event_set, gpu=ctx.tag)
        except GpuLostError:
            self._free(event_set)
            raise
        except NvmlCallError:  # counted by the caller; retried next poll
            self._free(event_set)
            ctx.failed.add("gpu")
            ctx.failures += 1
            return
        if result is NA:  # XID events not supported on this GPU
            self._free(event_set)
            self._unsupported = True
            return
        self._set = event_set

    def _free(self, event_set) -> None:
        try:
            self.caller.call("nvmlEventSetFree", event_set)
        except Exception:  # freeing on a lost GPU must not break the read or close()
            pass

    def close(self) -> None:
        """Free the event set (registration is redone on the next read)."""
        if self._set is not None:
            event_set, self._set = self._set, None
            self._free(event_set)
