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
from operator import attrgetter
from typing import Callable, Iterable

from exporter.collectors.base import Block, Families, SnapshotCollector, Spec, gi_label, gpu_labels
from exporter.collectors.instances import POD, Fields, GroupPlans, group, share_total, total, with_mode_labels
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
    def fields(proc: ProcessInfo) -> Fields:
        return (gi_label(proc.gi), str(proc.pid), proc.name, process_sharing(gpu, proc)) + identity_labels(proc) + (
            proc.replica,)

    return fields


def process_series(gpu: GpuInfo, processes: Iterable[ProcessInfo], mode: str) -> list:
    """(label values, member processes) of each per-process series of ``gpu`` in ``mode``."""
    ordered = sorted(processes, key=lambda p: (p.gi is not None, p.gi or 0, p.pid))
    return group(ordered, gpu_labels(gpu.index, gpu.uuid), process_fields(gpu), mode)


# What a process's series key is made of (see GroupPlans): the ProcessInfo fields that
# process_fields reads, in one C-level read.
_PLAN_KEY = attrgetter("gi", "pid", "name", "is_mps_client", "is_mps_server", "workload", "namespace", "pod",
                       "container", "replica")


def _plan_fields(key: tuple, sharing: str) -> Fields:
    """process_fields of a process whose _PLAN_KEY is ``key``, on a GPU whose sharing mode is ``sharing``."""
    gi, pid, name, mps_client, mps_server, workload, namespace, pod, container, replica = key
    if mps_client or mps_server:  # as process_sharing
        mode = "mig+mps" if gi is not None else "mps"
    else:
        mode = "mig" if gi is not None else sharing
    return (gi_label(gi), str(pid), name, mode, cached_workload_label(workload) if workload else "", namespace, pod,
            container, replica)


def _plan_order(key: tuple) -> tuple:
    """process_series' order: whole-GPU processes first, then by GPU instance, then by pid."""
    gi = key[0]
    return (gi is not None, gi or 0, key[1])


def process_plans(mode: str) -> GroupPlans:
    """process_series(gpu, processes, mode) as ``plans.series(processes, gpu_labels(...), gpu.sharing)``,
    worked out once per set of processes (see GroupPlans)."""
    return GroupPlans(_PLAN_KEY, _plan_fields, mode, _plan_order)


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
        self._block = Block(self._memory, self._sm)
        self._plans = process_plans(mode)

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        block, plans = self._block, self._plans
        seen = set()  # GPUs written: a repeated one (a broken snapshot) goes series by series
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            ids = gpu_labels(gpu.index, gpu.uuid)
            if ids not in seen:
                seen.add(ids)
                singles = plans.singles(gpu.processes, ids, gpu.sharing)
                # One process per series (pid mode; pod mode outside Kubernetes): each family's
                # series of the GPU in one step, once both families exist.
                if singles is not None and out.put_columns(block, singles[0], (
                        tuple(map(_MEMORY, singles[1])), tuple(map(_SM, singles[1])))):
                    continue
            for labels, members in plans.series(gpu.processes, ids, gpu.sharing):
                if len(members) == 1:  # the common case, and every series in pid mode
                    out.put(block, labels, _values(members[0]))
                    continue
                out.put(block, labels, (total([p.used_memory_bytes for p in members]),
                                        share_total([p.sm_utilization_ratio for p in members])))
        return out


_values = attrgetter("used_memory_bytes", "sm_utilization_ratio")
_MEMORY, _SM = attrgetter("used_memory_bytes"), attrgetter("sm_utilization_ratio")
