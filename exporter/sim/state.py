"""Plain records shared by the simulation engine, its telemetry and the fake library."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol

from exporter.catalog import MIB
from exporter.sim.mig_layout import MigInstance
from exporter.sim.model import Timeline
from exporter.sim.piecewise import timeline_value

if TYPE_CHECKING:
    from exporter.catalog import GpuModel
    from exporter.sim.mig_layout import Epoch
    from exporter.sim.model import GpuSpec, Scenario

MPS_SERVER_NAME = "nvidia-cuda-mps-server"
MPS_SERVER_MEMORY = 60 * MIB
PINNED_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
INF = float("inf")

DeviceKey = tuple[int, int]  # (gpu index, MIG instance serial; 0 = the whole GPU)


@dataclass(frozen=True)
class OomEvent:
    """A process killed because an allocation failed (reason "oom" or "mps_pinned_limit"),
    or, in ``mps_fault_events``, because its MPS server restarted (reason "mps_restart")."""

    time: float
    gpu: int
    gi: int | None
    pid: int
    name: str
    demand_bytes: int  # memory wanted at that instant (device total, or the client's own)
    capacity_bytes: int  # device capacity or the client's pinned limit
    reason: str


@dataclass
class Proc:
    """A process as the engine runs it (scenario process or MPS server)."""

    pid: int
    name: str
    cmdline: str
    env: Mapping[str, str]
    device: DeviceKey
    gi: int | None
    start: float
    end: float  # scenario end or MIG-reconfigure drain, INF when none
    memory: Timeline
    activity: Mapping[str, Timeline] = field(default_factory=dict)
    mps_client: bool = False
    mps_server: bool = False
    pinned_limit: int | None = None
    killed_at: float | None = None
    memory_na: bool = False  # NVML lists usedGpuMemory as N/A for it
    uid: int = 0
    host_memory: int | None = None

    @property
    def gpu(self) -> int:
        return self.device[0]

    def alive(self, t: float) -> bool:
        return self.start <= t < self.end and (self.killed_at is None or t < self.killed_at)

    def memory_at(self, t: float) -> float:
        return timeline_value(self.memory, t) if self.alive(t) else 0.0


@dataclass(frozen=True)
class Device:
    key: DeviceKey
    instance: MigInstance | None  # None for a whole (non-MIG) GPU
    capacity: int  # bytes processes may allocate
    uuid: str


@dataclass(frozen=True)
class XidEvent:
    """An XID error queued for NVML event sets; ``gi`` is a GPU-instance id when attributed."""

    at: float
    gpu: int
    xid: int
    gi: int | None


@dataclass(frozen=True)
class FaultWindow:
    """Calls matching ``call`` on ``gpu`` (None = any) fail with ``error`` during [start, until).

    ``call`` is a C symbol or pynvml name ("*" = every call). ``error`` is an NVMLError
    class suffix such as "GpuIsLost", or "Success" to only delay. ``delay_seconds`` of real
    time pass first (a hanging call). A NotFound fault on nvmlSystemGetProcessName models
    processes vanishing between the list and the lookup: their /proc entries go too.
    """

    call: str
    gpu: int | None
    error: str
    start: float
    until: float | None
    delay_seconds: float = 0.0
    probability: float = 1.0  # each matching call fails with this chance (seeded, see fakelib)
    serial: int | None = None  # only calls on this MIG instance (its serial; gi and index too)
    gi: int | None = None
    mig_index: int | None = None
    ident: int = 0  # position among the scenario's faults (part of the per-call seed)

    def active(self, t: float) -> bool:
        return self.start <= t and (self.until is None or t < self.until)

    def hides_procfs(self, t: float) -> bool:
        return (self.active(t) and self.error == "NotFound"
                and self.call in ("nvmlSystemGetProcessName", "*"))


class Lifecycle:
    """When each GPU is reset, removed or attached, and which driver is installed when.

    Built once from the scenario's events. A reset or a removal ends every process on the
    GPU (``next_cut``); a reset also restarts the energy counter and the volatile ECC
    counts (``last_reset``). The driver version changes when a ``driver_mismatch`` ends
    (the new kernel module is loaded).
    """

    def __init__(self, scenario, events_by_time):
        self.resets: dict[int, list[float]] = {g.index: [] for g in scenario.gpus}
        self._presence = {g.index: [(-INF, g.present)] for g in scenario.gpus}
        self._cuts: dict[int, list[float]] = {g.index: [] for g in scenario.gpus}
        self._driver = [(-INF, scenario.driver_version)]
        for e in events_by_time:
            if e.kind == "gpu_reset":
                self.resets[e.gpu].append(e.at)
                self._cuts[e.gpu].append(e.at)
            elif e.kind in ("gpu_removed", "gpu_attached"):
                self._presence[e.gpu].append((e.at, e.kind == "gpu_attached"))
                if e.kind == "gpu_removed":
                    self._cuts[e.gpu].append(e.at)
            elif e.kind == "driver_mismatch" and e.until is not None:
                self._driver.append((e.until, e.version))
        self._driver.sort(key=lambda change: change[0])
        self._reset_at: dict[float, list[int]] = {}
        for gpu, times in self.resets.items():
            for t in times:
                self._reset_at.setdefault(t, []).append(gpu)

    def resets_at(self, t: float) -> list[int]:
        return self._reset_at.get(t, [])

    def last_reset(self, gpu: int, t: float) -> float | None:
        """The latest reset of ``gpu`` at or before t, None if none."""
        times = self.resets[gpu]
        i = bisect.bisect_right(times, t)
        return times[i - 1] if i else None

    def next_reset(self, gpu: int, t: float) -> float | None:
        """The first reset of ``gpu`` strictly after t, None if none."""
        times = self.resets[gpu]
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else None

    def next_cut(self, gpu: int, t: float) -> float:
        """First reset or removal of ``gpu`` strictly after t (INF if none): processes end there."""
        times = sorted(self._cuts[gpu])
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else INF

    def cuts(self, gpu: int) -> list[float]:
        return sorted(self._cuts[gpu])

    def present(self, gpu: int, t: float) -> bool:
        """True while the GPU is on the bus at t (asked by every fake NVML call: kept cheap)."""
        changes = self._presence[gpu]
        if len(changes) == 1:
            return changes[0][1]
        return [present for when, present in changes if when <= t][-1]

    def present_gpus(self, t: float) -> list[int]:
        """Indices of the GPUs on the bus at t, ascending (NVML enumerates them in this order)."""
        return [gpu for gpu in sorted(self._presence) if self.present(gpu, t)]

    def driver_version(self, t: float) -> str:
        return [version for when, version in self._driver if when <= t][-1]


class EngineView(Protocol):
    """What the engine's helpers (exporter.sim.setup, exporter.sim.telemetry) use of the Engine
    (exporter.sim.engine) that builds them: named here, so that they need not import the engine
    that imports them (imports in the package go one way, tests/test_architecture.py)."""

    scenario: Scenario
    gpus: dict[int, GpuSpec]
    models: dict[int, GpuModel]
    devices: dict[DeviceKey, Device]
    lifecycle: Lifecycle
    refused: dict[float, list[Proc]]
    now: float

    def epoch(self, gpu: int, t: float | None = None) -> Epoch: ...

    def alive(self, t: float | None = None, gpu: int | None = None,
              device: DeviceKey | None = None) -> list[Proc]: ...
