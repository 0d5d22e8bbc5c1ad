"""Per-pod shares of each device in one poll: memory and SM time, adding up to the device's.

Rows are per device (a whole GPU, gi None; or a MIG instance) and per pod, plus one
*unattributed* row per device (namespace "" and pod ""), so that the rows of a device always
sum to the device's own value (docs/kubernetes.md, "Per-pod numbers"):

- **memory**: a pod's row is the sum of its processes' memory on the device (NVML per-process
  ``usedGpuMemory``); the unattributed row is the device's used memory minus the pods' (host
  processes, MPS servers, driver contexts), never below 0.
- **SM share**, as a fraction of the *physical GPU's* SM time over the last poll interval:
  - whole GPU: the device's busy ratio (``utilization_ratio``) split in proportion to the
    per-process SM samples (``nvmlDeviceGetProcessUtilization``); when no process has a
    sample while the device was busy, the pods' shares are unknown (absent) and the busy
    time stays unattributed.
  - MIG instance: the instance's SM activity (GPM ``sm_active``) times its SMs / the GPU's
    SMs; it is the pod's when one pod runs there (by its processes, or, without visible
    processes, by the one container the kubelet allocated the instance to); with several
    pods it stays unattributed (NVML has no per-process SM samples under MIG).
  - a MIG GPU also gets a GPU-level unattributed row (gi None): memory outside every
    instance, no SM time; accounting books there the energy no pod used.
- A pod's device value is never copied from the device: it comes from per-process data, or
  from an instance the pod holds alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

from exporter.catalog import resolve_model
from exporter.frozen import is_plain
from exporter.snapshot import GpuInfo, PodDevice, ProcessInfo

UNATTRIBUTED = ("", "")  # (namespace, pod) of the rest of a device


@dataclass(frozen=True)
class PodShare:
    """One pod's (or the unattributed rest's) use of one device during the last interval."""

    gpu: int
    uuid: str
    gi: int | None
    namespace: str
    pod: str
    memory_bytes: float | None  # None: unknown
    sm_share: float | None  # fraction of the physical GPU's SM time, 0..1; None: unknown

    @property
    def attributed(self) -> bool:
        return bool(self.pod)

    @property
    def key(self) -> tuple[int, str, int | None, str, str]:
        """(gpu index, uuid, gi, namespace, pod): the row's identity (exporter.accounting.RowKey)."""
        return (self.gpu, self.uuid, self.gi, self.namespace, self.pod)


def _share_by_dict(gpu: int, uuid: str, gi: int | None, namespace: str, pod: str, memory_bytes: float | None,
                   sm_share: float | None) -> PodShare:
    """``PodShare(...)`` built by filling the new row's ``__dict__``, as its ``__init__`` fills it
    (the same fields in the same order; still frozen): a poll of the mixed 8-GPU node builds 21
    rows, ~12.5 k instructions each through ``__init__``'s ``object.__setattr__`` calls."""
    row = _new_object(PodShare)
    row.__dict__.update(gpu=gpu, uuid=uuid, gi=gi, namespace=namespace, pod=pod, memory_bytes=memory_bytes,
                        sm_share=sm_share)
    return row


_new_object = object.__new__
# __init__ itself for a PodShare that grew more than its fields (a __post_init__, slots...).
_share = _share_by_dict if is_plain(PodShare) and len(fields(PodShare)) == 7 else PodShare


def _gpu_sm_count(gpu: GpuInfo) -> int | None:
    try:
        return resolve_model(gpu.name).sm_count
    except KeyError:
        return None


def _by_pod(processes: Iterable[ProcessInfo]) -> dict[tuple[str, str], list[ProcessInfo]]:
    pods: dict[tuple[str, str], list[ProcessInfo]] = {}
    for proc in processes:
        if proc.pod:
            pods.setdefault((proc.namespace, proc.pod), []).append(proc)
    return pods


def _memory(processes: list[ProcessInfo]) -> float | None:
    values = [p.used_memory_bytes for p in processes]
    return None if any(v is None for v in values) else float(sum(values))


def _rest(total: float | None, parts: Iterable[float | None]) -> float | None:
    parts = list(parts)
    if total is None or any(p is None for p in parts):
        return None
    return _clean(total - sum(parts))


def _clean(value: float) -> float:
    """A difference that should be >= 0, without float noise (1e-16 instead of 0)."""
    return value if value > 1e-9 else 0.0


def _whole_gpu(gpu: GpuInfo) -> list[PodShare]:
    busy = gpu.utilization_ratio
    if not any(proc.pod for proc in gpu.processes):
        # No pod's process here (every GPU of a node without Kubernetes, every poll): the rest
        # row alone, what the general way below gives with no pod rows (nothing subtracted).
        return [_share(gpu.index, gpu.uuid, None, *UNATTRIBUTED, _rest(gpu.memory_used_bytes, ()),
                         None if busy is None else _clean(busy))]
    pods = _by_pod(gpu.processes)
    samples = sum(p.sm_utilization_ratio or 0.0 for p in gpu.processes)
    rows = []
    for (namespace, pod), procs in sorted(pods.items()):
        share = None
        if busy is not None:
            mine = sum(p.sm_utilization_ratio or 0.0 for p in procs)
            # The ratio first: busy * mine underflows for subnormal samples (0.75 * 5e-324 is
            # 5e-324 again), which would give a pod the whole device's busy time or more.
            share = busy * (mine / samples) if samples > 0 else (0.0 if busy == 0 else None)
        rows.append(_share(gpu.index, gpu.uuid, None, namespace, pod, _memory(procs), share))
    attributed_sm = [r.sm_share or 0.0 for r in rows]
    rest_sm = None if busy is None else _clean(busy - sum(attributed_sm))
    rows.append(_share(gpu.index, gpu.uuid, None, *UNATTRIBUTED,
                         _rest(gpu.memory_used_bytes, (r.memory_bytes for r in rows)), rest_sm))
    return rows


def _mig_gpu(gpu: GpuInfo, allocated: list[PodDevice]) -> list[PodShare]:
    total_sms = _gpu_sm_count(gpu)
    rows: list[PodShare] = []
    any_pod = any(proc.pod for proc in gpu.processes)  # none on a node without Kubernetes: no pod to look for
    for inst in sorted(gpu.mig_instances, key=lambda i: i.gi):
        share = None
        if total_sms and inst.activity.sm_active is not None:
            share = min(1.0, inst.activity.sm_active * inst.sm_count / total_sms)
        used = None if inst.memory_used_bytes is None else float(inst.memory_used_bytes)
        pods = _by_pod(p for p in gpu.processes if p.gi == inst.gi) if any_pod else {}
        holders = {(d.namespace, d.pod) for d in allocated if d.gi == inst.gi} if allocated else set()
        if not pods and len(holders) == 1:
            # No pod process visible (per-instance lists need privileges), but the kubelet gave
            # the instance to one pod alone: its whole use is that pod's.
            namespace, pod = holders.pop()
            rows.append(_share(gpu.index, gpu.uuid, inst.gi, namespace, pod, used, share))
            rest_memory, rest_sm = (None if used is None else 0.0), (None if share is None else 0.0)
        else:
            alone = len(pods) == 1
            mine = [_share(gpu.index, gpu.uuid, inst.gi, namespace, pod, _memory(procs), share if alone else None)
                    for (namespace, pod), procs in sorted(pods.items())]
            rows.extend(mine)
            rest_memory = _rest(used, (r.memory_bytes for r in mine))
            rest_sm = None if share is None else (0.0 if alone else share)
        rows.append(_share(gpu.index, gpu.uuid, inst.gi, *UNATTRIBUTED, rest_memory, rest_sm))
    # Memory outside every instance, and the GPU's idle SM time (which is nobody's: 0 here,
    # while accounting gives this row the energy no pod used).
    outside = _rest(gpu.memory_used_bytes, (i.memory_used_bytes for i in gpu.mig_instances))
    rows.append(_share(gpu.index, gpu.uuid, None, *UNATTRIBUTED, outside, 0.0))
    return rows


def device_shares(gpu: GpuInfo, pod_devices: Iterable[PodDevice] = ()) -> list[PodShare]:
    """The per-pod rows (plus unattributed rests) of one GPU that is up; [] for a GPU that is down."""
    if not gpu.up:
        return []
    if gpu.mig_mode or gpu.mig_instances:
        return _mig_gpu(gpu, [d for d in pod_devices if d.gpu_index == gpu.index])
    return _whole_gpu(gpu)
