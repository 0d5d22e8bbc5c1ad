"""Validated, immutable form of a scenario file (see docs/scenarios.md).

The loader (exporter.sim.scenario) turns YAML into these; the simulation engine
(exporter.sim.engine) reads only these. All times are virtual seconds from the scenario
start, all sizes bytes, all ratios 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

# Timeline: defined with its arithmetic (exporter.sim.piecewise), which the scenario's field parsers
# use without the model; re-exported here as the model's type.
from exporter.sim.piecewise import Timeline, timeline_value

if TYPE_CHECKING:
    from exporter.sim.fakedcgm.spec import DcgmSpec


DEFAULT_DRIVER_VERSION = "580.95.05"  # what a scenario without driver_version simulates

@dataclass(frozen=True)
class MigSpec:
    profile: str  # e.g. "3g.40gb" (validated against the GPU model's catalog)
    start: int  # placement start in memory slices (resolved by the loader when omitted)
    mps: bool = False  # an MPS server runs on this instance (MIG+MPS)
    # MIG device index to use instead of the next free one (makes indices sparse on purpose,
    # as after destroying instances on a real GPU); must be < the model's max_mig_devices.
    device_index: int | None = None
    # False: a GPU instance without its compute instance (a half-done "nvidia-smi mig -cgi"
    # without -C): it holds its slices but has no MIG device, so no processes run on it.
    compute_instance: bool = True
    # GPU-instance id the driver gave it, instead of the placement rule (mig_layout.gi_id_for):
    # real drivers also number by creation history (an A100-80GB 2g.20gb seen as GI 6).
    gpu_instance_id: int | None = None


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
    # Board variant key of the catalog model ("SXM4", "PCIe", "NVL"); None: the model's default.
    variant: str | None = None
    power_limit_watts: float | None = None  # enforced power limit; None: the board's default
    # The scenario's driver: MIG sizes and BAR1 differ by branch (exporter.catalog.board).
    driver_version: str = DEFAULT_DRIVER_VERSION
    persistence_mode: bool = True  # nvidia-persistenced runs (data-center default)
    present: bool = True  # False: not on the bus at t = 0 (appears with a gpu_attached event)
    pcie_tx_bytes_per_second: Timeline | None = None  # nvmlDeviceGetPcieThroughput; None: 0
    pcie_rx_bytes_per_second: Timeline | None = None
    # Health (docs/scenarios.md "Health"); None: 0 where the board has the counter.
    pcie_replays: Timeline | None = None  # cumulative PCIe replays
    remapped_rows_correctable: Timeline | None = None  # cumulative rows (HBM boards only)
    remapped_rows_uncorrectable: Timeline | None = None
    row_remap_pending: Timeline | None = None  # 0/1
    row_remap_failure: Timeline | None = None  # 0/1
    power_violation_seconds: Timeline | None = None  # cumulative seconds held down by power
    thermal_violation_seconds: Timeline | None = None  # cumulative seconds held down by temperature


@dataclass(frozen=True)
class PodSpec:
    """The Kubernetes container a simulated process runs in (see exporter.sim.scenario_pods)."""

    namespace: str
    name: str
    container: str
    uid: str  # dashed UUID, or 32 hex characters for a static pod
    runtime: str  # containerd | cri-o | docker
    cgroup_driver: str  # systemd | cgroupfs | systemd-literal
    cgroup_version: int  # 1 | 2
    qos: str  # guaranteed | burstable | besteffort
    resource: str | None = None  # extended resource; None = nvidia.com/gpu or nvidia.com/mig-<profile>
    node: str = "sim-node"
    allocation: str = "device-plugin"  # device-plugin | dra (a ResourceClaim of gpu.nvidia.com)
    claim: str | None = None  # the ResourceClaim's name under dra; None = "<pod>-gpu"

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
    # NVML reports its usedGpuMemory as N/A (NVML_VALUE_NOT_AVAILABLE -> None in pynvml); its
    # memory still counts on the device.
    memory_na: bool = False
    uid: int = 0  # owner (/proc/<pid>/status Uid:)
    host_memory: int | None = None  # resident host memory in bytes (/proc); None: 512 MiB
    pod: PodSpec | None = None  # the Kubernetes container it runs in; None: a host process


@dataclass(frozen=True)
class FaultSpec:
    call: str  # NVML C symbol or pynvml name, e.g. "nvmlDeviceGetPowerUsage"; "*" = every call
    gpu: int | None  # None = every GPU
    error: str  # NVMLError class suffix, e.g. "GpuIsLost", "Timeout", "NotFound"; "Success": delay only
    until: float | None  # virtual time the fault ends; None = forever
    delay_seconds: float = 0.0  # real seconds the call blocks before failing/returning (hangs)
    probability: float = 1.0  # chance that one matching call fails (seeded by Scenario.seed)
    mig: int | None = None  # only calls on this MIG instance (index into the layout at the event)


@dataclass(frozen=True)
class EventSpec:
    # "fault" | "mig_reconfigure" | "xid" | "mps_restart" | "gpu_lost", and (fault model, see
    # docs/scenarios.md) "gpu_reset" | "gpu_removed" | "gpu_attached" | "nvml_init_failure" |
    # "driver_mismatch" | "mps_server_death"
    at: float
    kind: str
    gpu: int | None = None
    fault: FaultSpec | None = None
    # mig_reconfigure: the new layout, as created (a failed one: only what got created);
    # gpu_reset: the layout recreated after the reset (() = instances gone, MIG still on)
    mig: tuple[MigSpec, ...] | None = None
    xid: int | None = None
    gi: int | None = None  # for xid attributed to a MIG instance (list index into mig)
    requested: tuple[MigSpec, ...] | None = None  # mig_reconfigure that failed: the full request
    version: str | None = None  # driver_mismatch: the newly installed driver version
    until: float | None = None  # driver_mismatch: when the new module is loaded (None: never)


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str  # file path, for error messages
    duration: float | None
    gpus: tuple[GpuSpec, ...]
    processes: tuple[ProcessSpec, ...]
    events: tuple[EventSpec, ...]
    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_driver_version: int = 13000
    seed: int = 0  # seeds per-call fault probabilities (same seed, same failures)
    # The optional ``dcgm`` section (exporter/sim/fakedcgm/spec.py); None when absent.
    dcgm: DcgmSpec | None = None


def gpu_model(spec: GpuSpec):
    """The catalog GpuModel of ``spec`` as its board (variant) with its enforced power limit,
    its MIG sizes those of the scenario's driver branch."""
    from exporter.catalog import board  # the catalog is data; imported late to keep this module plain

    return board(spec.model, spec.variant, spec.power_limit_watts, spec.driver_version)
