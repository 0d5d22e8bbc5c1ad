"""Replica slots: a small number per live process of a workload on a device, reused after it exits.

``exporter serve --process-series workload`` exports one series per (device, workload,
replica) instead of one per pid. A process keeps its slot for as long as it lives on the
device; a new process takes the lowest free slot of its (device, workload). So the number of
series ever created is the peak number of concurrent instances, not the number of processes
that ever ran, while each series still stands for one running instance (its peaks and the
concurrency survive the aggregation).
"""

from __future__ import annotations

from typing import Hashable


class ReplicaSlots:
    """Slot assignment for one physical GPU (its MIG instances are told apart by ``device``)."""

    def __init__(self) -> None:
        self._slot: dict[tuple[Hashable, int], tuple[str, int]] = {}  # (device, pid) -> (workload, slot)
        self._taken: dict[tuple[Hashable, str], set[int]] = {}  # (device, workload) -> slots in use
        self._seen: set[tuple[Hashable, int]] = set()

    def begin_poll(self) -> None:
        self._seen = set()

    def assign(self, device: Hashable, workload: str, pid: int) -> int:
        """The slot of ``pid`` on ``device``: kept from earlier polls, or the lowest free one."""
        key = (device, pid)
        self._seen.add(key)
        held = self._slot.get(key)
        if held is not None:
            if held[0] == workload:
                return held[1]
            self._free(key)  # the workload key changed (its pod became known): a new instance
        taken = self._taken.setdefault((device, workload), set())
        slot = 0
        while slot in taken:
            slot += 1
        taken.add(slot)
        self._slot[key] = (workload, slot)
        return slot

    def end_poll(self) -> None:
        """Free the slots of processes not seen in this poll."""
        for key in [k for k in self._slot if k not in self._seen]:
            self._free(key)

    def _free(self, key: tuple[Hashable, int]) -> None:
        workload, slot = self._slot.pop(key)
        group = (key[0], workload)
        taken = self._taken.get(group)
        if taken is not None:
            taken.discard(slot)
            if not taken:
                del self._taken[group]
