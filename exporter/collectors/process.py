"""Per process series (gpushare_process_*).

Labels stay bounded: the executable basename goes in ``process``, never the command
line or environment (those are free text and would explode the series count). ``workload``
is the workload key cut to at most 48 characters (exporter.foresight.workload.workload_label);
``namespace``, ``pod`` and ``container`` name the process's Kubernetes container ("" outside
Kubernetes). What one series stands for (a pid, a container, a workload replica) is the
``--process-series`` mode, see exporter.collectors.instances.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Iterable

from exporter.collectors.base import Families, SnapshotCollector, Spec, gi_label, gpu_labels
from exporter.collectors.instances import POD, Fields, group, known_total, share_total, total, with_mode_labels
from exporter.foresight.workload import workload_label
from exporter.snapshot import GpuInfo, ProcessInfo, Snapshot

# Identity of a process: what it is (workload) and, on Kubernetes, where it runs.
IDENTITY = ("workload", "namespace", "pod", "container")
PROCESS = ("gpu", "uuid", "gi", "pid", "process", "sharing") + IDENTITY

MEMORY_USED = Spec(
    "gpushare_process_memory_used_bytes",
    "gauge",
    "Device memory used by the process's context on this GPU or MIG instance.",
    PROCESS,
    "bytes",
)
SM_UTILIZATION = Spec(
    "gpushare_process_sm_utilization_ratio",
    "gauge",
    "Fraction of the last sample period in which the process ran kernels (absent under MIG).",
    PROCESS,
    "ratio",
)


def process_sharing(gpu: GpuInfo, proc: ProcessInfo) -> str:
    """How this process shares its device: mps / mig+mps for MPS, mig inside MIG, else the GPU's mode.

    The MPS server itself counts as MPS: it exists only to multiplex the clients.
    """
    in_mig = proc.gi is not None
    if proc.is_mps_client or proc.is_mps_server:
        return "mig+mps" if in_mig else "mps"
    if in_mig:
        return "mig"
    return gpu.sharing


# Keys repeat every poll; the label of a long key costs a hash.
cached_workload_label = lru_cache(maxsize=4096)(workload_label)


def identity_labels(proc: ProcessInfo) -> tuple[str, str, str, str]:
    """Values of the IDENTITY labels of one process."""
    return (cached_workload_label(proc.workload) if proc.workload else "", proc.namespace, proc.pod, proc.container)


def process_fields(gpu: GpuInfo) -> "Callable[[ProcessInfo], Fields]":
    """The series-key fields of a process of ``gpu`` (see exporter.collectors.instances.group)."""
    sharing = gpu.sharing

    def fields(proc: ProcessInfo) -> Fields:
        # process_sharing, gi_label and identity_labels inline: one tuple per process of every
        # poll, built in one step (the process and MPS collectors call this for each).
        gi, workload = proc.gi, proc.workload
        if proc.is_mps_client or proc.is_mps_server:
            mode = "mps" if gi is None else "mig+mps"
        else:
            mode = sharing if gi is None else "mig"
        return ("" if gi is None else str(gi), str(proc.pid), proc.name, mode,
                cached_workload_label(workload) if workload else "", proc.namespace, proc.pod, proc.container,
                proc.replica)

    return fields


def process_series(gpu: GpuInfo, processes: Iterable[ProcessInfo], mode: str) -> list:
    """(label values, member processes) of each per-process series of ``gpu`` in ``mode``."""
    ordered = sorted(processes, key=lambda p: (p.gi is not None, p.gi or 0, p.pid))
    return group(ordered, gpu_labels(gpu.index, gpu.uuid), process_fields(gpu), mode)


def process_labels(gpu: GpuInfo, proc: ProcessInfo) -> tuple[str, ...]:
    """Label values shared by every per-process series (process and MPS collectors)."""
    return gpu_labels(gpu.index, gpu.uuid) + (
        gi_label(proc.gi),
        str(proc.pid),
        proc.name,
        process_sharing(gpu, proc),
    ) + identity_labels(proc)


class ProcessCollector(SnapshotCollector):
    """Exports the per-process families listed in docs/metrics.md."""

    name = "process"
    section = "process"

    def __init__(self, source, mode: str = POD) -> None:
        super().__init__(source)
        self.mode = mode
        self._memory, self._sm = with_mode_labels(MEMORY_USED, mode), with_mode_labels(SM_UTILIZATION, mode)

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            for labels, members in process_series(gpu, gpu.processes, self.mode):
                if len(members) == 1:  # the common case, and every series in pid mode
                    out.add_all(labels, ((self._memory, members[0].used_memory_bytes),
                                         (self._sm, members[0].sm_utilization_ratio)))
                    continue
                out.add_all(labels, ((self._memory, total([p.used_memory_bytes for p in members])),
                                     (self._sm, share_total([p.sm_utilization_ratio for p in members]))))
        return out
