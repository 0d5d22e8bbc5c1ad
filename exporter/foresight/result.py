"""What one poll's forecast hands to the collector, and how a GPU splits into memory domains."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Callable, Iterator

from exporter.foresight.forecast import DeviceForecast
from exporter.foresight.profiles import WorkloadProfile
from exporter.frozen import is_plain
from exporter.snapshot import GpuInfo, ProcessInfo


@dataclass(frozen=True)
class ProcessRow:
    """One live process with its forecast values (bytes)."""

    gpu: int
    uuid: str
    gi: int | None
    pid: int
    process: str
    sharing: str
    workload: str  # bounded label value
    expected_peak_bytes: int | None  # None: its memory is unknown and its workload has no profile
    at_contention_bytes: int | None  # expected use when its device first overflows; None if it does not
    namespace: str = ""  # the process's pod, "" outside Kubernetes (see exporter.identity)
    pod: str = ""
    container: str = ""
    replica: int | None = None  # ProcessInfo.replica (series key in --process-series workload)
    basis: str = "current"  # what its forecast rests on (exporter.foresight.forecast.BASES)


@dataclass(frozen=True)
class DeviceRow:
    """Forecast of one GPU (gi None) or MIG instance."""

    gpu: int
    uuid: str
    gi: int | None
    profile: str  # MIG profile name, "" for a whole GPU
    forecast: DeviceForecast
    exhaustion_eta_seconds: float | None
    confidence: float | None = None  # 0..1 while contention is predicted (exporter.foresight.confidence)


@dataclass(frozen=True)
class ForesightResult:
    """Everything the forecast collector exports for one poll."""

    processes: tuple[ProcessRow, ...] = ()
    devices: tuple[DeviceRow, ...] = ()
    profiles: tuple[tuple[str, WorkloadProfile], ...] = ()  # (label, profile), bounded
    profiles_stored: int = 0
    store_ok: bool | None = None  # None without a state dir
    # (gpu, uuid, suspected kills predicted, not predicted, warnings with an OOM, without) per GPU
    outcomes: tuple[tuple[int, str, int, int, int, int], ...] = ()
    # (workload label, slack, margin): how outcomes changed its forecast (exporter.foresight.calibration)
    adjustments: tuple[tuple[str, float, float], ...] = ()


@dataclass(frozen=True)
class MemoryDomain:
    """Memory that a set of processes competes for: a whole GPU or one MIG GPU instance."""

    gi: int | None
    profile: str  # MIG profile name, "" for a whole GPU
    capacity_bytes: int | None  # usable memory
    used_bytes: int | None
    processes: tuple[ProcessInfo, ...]  # workload processes (MPS servers excluded)


def process_sharing(gpu: GpuInfo, proc: ProcessInfo) -> str:
    """The ``sharing`` label of a process, as docs/metrics.md defines it for process series."""
    if proc.gi is not None:
        return "mig+mps" if proc.is_mps_client else "mig"
    return "mps" if proc.is_mps_client else gpu.sharing


def memory_domains(gpu: GpuInfo) -> Iterator[MemoryDomain]:
    """The memory domains of a GPU.

    A GPU in MIG mode has one domain per GPU instance (its compute instances share memory);
    otherwise the whole GPU is one domain whose capacity excludes driver-reserved memory.
    MPS servers are not workloads: their memory counts as "other" use of the domain.
    """
    clients = [p for p in gpu.processes if not p.is_mps_server]
    if gpu.mig_mode or gpu.mig_instances:
        seen: set[int] = set()
        for inst in gpu.mig_instances:
            if inst.gi not in seen:
                seen.add(inst.gi)
                procs = tuple(p for p in clients if p.gi == inst.gi)
                yield MemoryDomain(inst.gi, inst.profile, inst.memory_total_bytes, inst.memory_used_bytes, procs)
        return
    capacity = None
    if gpu.memory_total_bytes is not None:
        capacity = gpu.memory_total_bytes - (gpu.memory_reserved_bytes or 0)
    yield MemoryDomain(None, "", capacity, gpu.memory_used_bytes, tuple(p for p in clients if p.gi is None))


def positional_maker(cls) -> Callable:
    """``cls(*values)`` for a frozen dataclass, faster when every field is given in order.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; a poll of
    the mixed node builds a ProcessRow and a ProcessState for each of its ~85 processes (about
    2-3 µs each that way, half that by filling ``__dict__``: docs/performance.md, "The last
    milliseconds"). The object is the same (same fields, values, equality, still frozen). Any
    other number of values goes to ``__init__``, which says what is wrong; a class whose
    ``__init__`` does more than set its fields keeps its ``__init__``.
    """
    names = tuple(f.name for f in fields(cls))
    if (not cls.__dataclass_params__.frozen or not is_plain(cls)
            or any(f.default_factory is not MISSING for f in fields(cls))):
        return cls
    new, count = object.__new__, len(names)

    def make(*values):
        if len(values) != count:
            return cls(*values)
        obj = new(cls)
        obj.__dict__.update(zip(names, values))
        return obj

    return make
