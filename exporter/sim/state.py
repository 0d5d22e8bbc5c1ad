"""Plain records shared by the simulation engine, its telemetry and the fake library."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from exporter.catalog import MIB
from exporter.sim.mig_layout import MigInstance
from exporter.sim.model import Timeline
from exporter.sim.piecewise import timeline_value

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

    def active(self, t: float) -> bool:
        return self.start <= t and (self.until is None or t < self.until)

    def hides_procfs(self, t: float) -> bool:
        return (self.active(t) and self.error == "NotFound"
                and self.call in ("nvmlSystemGetProcessName", "*"))
