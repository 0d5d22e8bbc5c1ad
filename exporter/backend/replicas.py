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
        # device -> pid -> (workload, slot). Kept per device: a call looks at its own device's
        # processes only, not every process of the GPU (each MIG instance of the mixed node's
        # GPUs walked all of them every poll).
        self._slots: dict[Hashable, dict[int, tuple[str, int]]] = {}
        self._taken: dict[tuple[Hashable, str], set[int]] = {}  # (device, workload) -> slots in use
        self._read: set[Hashable] = set()  # devices read this poll

    def begin_poll(self) -> None:
        self._read = set()

    def assign(self, device: Hashable, workloads: dict[int, str]) -> dict[int, int]:
        """pid -> slot for the processes (pid -> workload key) now on ``device``.

        Processes that left the device free their slots first, so a process that replaces
        one in the same poll takes its slot; new ones are placed in pid order.
        """
        self._read.add(device)
        held_here = self._slots.get(device)
        if held_here is None:
            held_here = self._slots[device] = {}
        for pid in [p for p, held in held_here.items() if workloads.get(p) != held[0]]:
            self._free(device, held_here, pid)  # gone, or its workload key changed (its pod became known)
        slots = {}
        for pid in sorted(workloads):
            held = held_here.get(pid)
            if held is None:
                taken = self._taken.setdefault((device, workloads[pid]), set())
                slot = 0
                while slot in taken:
                    slot += 1
                taken.add(slot)
                held = held_here[pid] = (workloads[pid], slot)
            slots[pid] = held[1]
        return slots

    def end_poll(self) -> None:
        """Free the slots on devices not read in this poll (a GPU instance that went away)."""
        for device in [d for d in self._slots if d not in self._read]:
            held_here = self._slots.pop(device)
            for pid in list(held_here):
                self._free(device, held_here, pid)

    def _free(self, device: Hashable, held_here: dict[int, tuple[str, int]], pid: int) -> None:
        workload, slot = held_here.pop(pid)
        group = (device, workload)
        taken = self._taken.get(group)
        if taken is not None:
            taken.discard(slot)
            if not taken:
                del self._taken[group]
