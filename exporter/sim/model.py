"""Validated, immutable form of a scenario file (see docs/scenarios.md).

The loader (exporter.sim.scenario) turns YAML into these; the simulation engine
(exporter.sim.engine) reads only these. All times are virtual seconds from the scenario
start, all sizes bytes, all ratios 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# A piecewise-linear function of virtual time: ((t0, v0), (t1, v1), ...), t strictly
# increasing... except that two points may share a time to express a step. Before t0 the
# value is v0, after the last point the last value holds. A scalar becomes ((0.0, v),).
Timeline = tuple[tuple[float, float], ...]


def timeline_value(timeline: Timeline, t: float) -> float:
    """Value of a piecewise-linear timeline at virtual time t (seconds)."""
    if t <= timeline[0][0]:
        return timeline[0][1]
    for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
        if t < t1:
            if t1 == t0:
                return v1
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return timeline[-1][1]


@dataclass(frozen=True)
class MigSpec:
    profile: str  # e.g. "3g.40gb" (validated against the GPU model's catalog)
    start: int  # placement start in memory slices (resolved by the loader when omitted)
    mps: bool = False  # an MPS server runs on this instance (MIG+MPS)
    # MIG device index to use instead of the next free one (makes indices sparse on purpose,
    # as after destroying instances on a real GPU); must be < the model's max_mig_devices.
    device_index: int | None = None


@dataclass(frozen=True)
class GpuSpec:
    index: int
    model: str  # catalog key, e.g. "H100-80GB" (aliases already resolved)
    uuid: str
    pci_bus_id: str
    mig: tuple[MigSpec, ...] | None  # None: MIG disabled; () MIG enabled with no instances
    mps: bool  # MPS server on the whole GPU (non-MIG)
    # Optional overrides; None means "derive from load" (see engine).
    power_watts: Timeline | None = None
    temperature_celsius: Timeline | None = None
    utilization: Timeline | None = None  # 0..1
    ecc_corrected: Timeline | None = None  # cumulative counts
    ecc_uncorrected: Timeline | None = None
    clock_event_reasons: tuple[tuple[float, tuple[str, ...]], ...] = ()  # (from t, reasons)
    compute_mode: str | None = None  # default | exclusive_process | prohibited
    product_name: str | None = None  # NVML name when the scenario named a variant (e.g. "... PCIe")


@dataclass(frozen=True)
class PodSpec:
    """The Kubernetes container a simulated process runs in (see exporter.sim.scenario_pods)."""

    namespace: str
    name: str
    container: str
    uid: str  # dashed UUID, or 32 hex characters for a static pod
    runtime: str  # containerd | cri-o | docker
    cgroup_driver: str  # systemd | cgroupfs
    cgroup_version: int  # 1 | 2
    qos: str  # guaranteed | burstable | besteffort
    resource: str | None = None  # extended resource; None = nvidia.com/gpu or nvidia.com/mig-<profile>
    node: str = "sim-node"

    @property
    def container_id(self) -> str:
        """64 hex characters, stable for (uid, container), as a runtime would assign."""
        import hashlib

        return hashlib.sha256(f"{self.uid}/{self.container}".encode()).hexdigest()


@dataclass(frozen=True)
class ProcessSpec:
    pid: int
    name: str
    cmdline: str
    gpu: int  # GPU index
    mig: int | None  # index into the GPU's mig list active at ``start``
    start: float
    end: float | None
    memory: Timeline  # bytes
    activity: Mapping[str, Timeline] = field(default_factory=dict)  # sm_active, tensor_active, ...
    env: Mapping[str, str] = field(default_factory=dict)
    mps_client: bool | None = None  # None: client iff its device runs an MPS server
    pod: PodSpec | None = None  # the Kubernetes container it runs in; None: a host process


@dataclass(frozen=True)
class FaultSpec:
    call: str  # NVML C symbol or pynvml name, e.g. "nvmlDeviceGetPowerUsage"; "*" = every call
    gpu: int | None  # None = every GPU
    error: str  # NVMLError class suffix, e.g. "GpuIsLost", "Timeout", "NotFound"
    until: float | None  # virtual time the fault ends; None = forever
    delay_seconds: float = 0.0  # real seconds the call blocks before failing/returning (hangs)


@dataclass(frozen=True)
class EventSpec:
    at: float
    kind: str  # "fault" | "mig_reconfigure" | "xid" | "mps_restart" | "gpu_lost"
    gpu: int | None = None
    fault: FaultSpec | None = None
    mig: tuple[MigSpec, ...] | None = None  # for mig_reconfigure: the new layout
    xid: int | None = None
    gi: int | None = None  # for xid attributed to a MIG instance (list index into mig)


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str  # file path, for error messages
    duration: float | None
    gpus: tuple[GpuSpec, ...]
    processes: tuple[ProcessSpec, ...]
    events: tuple[EventSpec, ...]
    driver_version: str = "580.95.05"
    cuda_driver_version: int = 13000
