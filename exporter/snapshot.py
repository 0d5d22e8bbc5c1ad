"""Frozen snapshot of one poll: the only thing that travels from a backend to the collectors.

Units are base units throughout (bytes, seconds, watts, joules, hertz, ratios in 0..1).
``None`` always means "not available on this device/driver", never zero. Collectors
skip ``None`` values instead of exporting a made-up number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# Sharing modes, as exported in the ``sharing`` label.
SHARING_MODES = ("exclusive", "time_slicing", "mps", "mig", "mig+mps", "idle")

# Activity pipes, in the order they appear on /metrics. Each becomes
# gpushare_gpu_<name>_ratio and gpushare_mig_<name>_ratio.
ACTIVITY_FIELDS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "fp64_active",
    "fp32_active",
    "fp16_active",
    "dram_active",
    "graphics_active",
)


@dataclass(frozen=True)
class Activity:
    """Pipe activity over the last poll interval, each a ratio in 0..1 or None."""

    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    dram_active: float | None = None
    graphics_active: float | None = None

    def items(self):
        """(name, value) pairs in ACTIVITY_FIELDS order, None values included."""
        return [(name, getattr(self, name)) for name in ACTIVITY_FIELDS]


@dataclass(frozen=True)
class ProcessInfo:
    """One process holding a context on a GPU or on a MIG instance."""

    pid: int
    name: str  # executable basename, e.g. "python3"; "" when unknown
    cmdline: str  # command line from /proc, secrets redacted (exporter.redact); "" when unknown
    gpu_index: int
    gi: int | None  # GPU instance id; None when the GPU is not in MIG mode
    ci: int | None  # compute instance id; None when the GPU is not in MIG mode
    used_memory_bytes: int | None  # None when NVML reports N/A
    sm_utilization_ratio: float | None = None  # None under MIG (not supported) or without samples
    is_mps_client: bool = False
    is_mps_server: bool = False
    mps_memory_limit_bytes: int | None = None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for this device
    mps_active_thread_ratio: float | None = None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100
    environ: Mapping[str, str] = field(default_factory=dict)  # only the vars the exporter uses (procinfo.ENV_VARS)
    # When the process started, Unix seconds on the same clock as Snapshot.timestamp; None when
    # unknown. Used by foresight to place a run on its workload's learned timeline.
    start_time: float | None = None
    # Identity (exporter.identity), resolved once per process by the backend. ``workload`` is the
    # full workload key (exporter.foresight.workload; "" when not resolved); the pod fields are ""
    # outside Kubernetes or when the pod is unknown.
    workload: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    # Lowest free slot among the live processes of this workload on this device (GPU or GPU
    # instance), kept for the process's life (exporter.backend.replicas); None when not assigned.
    replica: int | None = None


@dataclass(frozen=True)
class MigInstance:
    """One MIG device: a GPU instance and, within it, one compute instance."""

    gi: int  # GPU instance id
    ci: int  # compute instance id
    mig_index: int  # index accepted by nvmlDeviceGetMigDeviceHandleByIndex (may be sparse)
    mig_uuid: str
    profile: str  # GPU-instance profile name without the "MIG " prefix, e.g. "3g.40gb"
    profile_id: int  # NVML profile id (e.g. 9 for 3g on 8-slice GPUs)
    placement_start: int  # first memory slice
    placement_size: int  # number of memory slices
    sm_count: int
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    activity: Activity = Activity()


@dataclass(frozen=True)
class MpsServer:
    """An nvidia-cuda-mps-server process on a GPU (gi None) or a MIG instance."""

    pid: int
    gi: int | None


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU (issue 21)."""

    link: int  # NVML link index
    active: bool | None = None
    tx_bytes: int | None = None  # cumulative data bytes since driver load
    rx_bytes: int | None = None
    # keys: "crc_flit", "crc_data", "replay", "recovery" -> cumulative count
    errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceHealth:
    """Health and I/O reads of one GPU (issue 21). None / empty = not reported: no series."""

    memory_temperature_celsius: float | None = None
    pcie_replay_errors: int | None = None  # cumulative
    pcie_tx_bytes: int | None = None  # cumulative since driver load (may wrap)
    pcie_rx_bytes: int | None = None
    # derived from two polls' byte counters on NVML (absent on the first poll)
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    encoder_utilization_ratio: float | None = None
    decoder_utilization_ratio: float | None = None
    encoder_sessions: int | None = None
    nvlinks: tuple[NvLink, ...] = ()  # () when the board has no NVLink
    remapped_rows: Mapping[str, int] = field(default_factory=dict)  # "correctable", "uncorrectable"
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    retired_pages: Mapping[str, int] = field(default_factory=dict)  # "single_bit_ecc", "double_bit_ecc"
    retired_pages_pending: bool | None = None
    # cumulative seconds the clocks were held down, keys: "power", "thermal", "sync_boost",
    # "board_limit", "low_utilization", "reliability" (what DCGM_FI_DEV_*_VIOLATION report)
    clock_event_seconds: Mapping[str, float] = field(default_factory=dict)
    vgpu_license_status: int | None = None  # None unless a vGPU driver runs
    last_xid: int | None = None
    last_xid_timestamp: float | None = None  # Unix seconds


@dataclass(frozen=True)
class GpuInfo:
    """Everything read from one physical GPU in one poll."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    up: bool  # False when the GPU could not be read this poll (lost, timed out)
    error: str | None = None  # why ``up`` is False, e.g. "GpuIsLost" or "timeout"
    mig_mode: bool | None = None
    compute_mode: str = "unknown"  # default | exclusive_process | prohibited | unknown
    sharing: str = "idle"  # one of SHARING_MODES
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    activity: Activity = Activity()
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None  # since driver load
    temperature_celsius: float | None = None
    clocks_hertz: Mapping[str, float] = field(default_factory=dict)  # graphics, sm, memory, video
    clock_event_reasons: Mapping[str, bool] = field(default_factory=dict)  # reason -> active
    ecc_errors: Mapping[str, int] = field(default_factory=dict)  # corrected, uncorrected (volatile)
    xid_errors: Mapping[int, int] = field(default_factory=dict)  # XID code -> count since exporter start
    mig_instances: tuple[MigInstance, ...] = ()
    mig_free_capacity: Mapping[str, int] = field(default_factory=dict)  # profile -> instances that still fit
    processes: tuple[ProcessInfo, ...] = ()
    mps_servers: tuple[MpsServer, ...] = ()
    health: DeviceHealth = DeviceHealth()  # issue 21: health and I/O reads
    # DCGM's gpuId of this GPU (the backend dcgm matches it by UUID; it need not equal ``index``);
    # None under the nvml backend. The dcgm-exporter output's ``gpu`` label (exporter.compat).
    dcgm_gpu_id: int | None = None


@dataclass(frozen=True)
class PodDevice:
    """A device the kubelet allocated to a container (pod-resources API): a GPU, a MIG instance,
    or ``count`` replicas of a shared (time-sliced / MPS) GPU."""

    namespace: str
    pod: str
    container: str
    resource: str  # extended resource name, e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    gpu_index: int
    uuid: str  # the physical GPU's UUID
    gi: int | None  # GPU instance id of a MIG device; None for a whole GPU
    count: int = 1  # device ids of this device held (replicas of a shared GPU)


@dataclass(frozen=True)
class SimulationInfo:
    """Present only in --simulate mode."""

    time_seconds: float
    oom_kills: Mapping[tuple[int, str], int]  # (gpu index, gi as str or "") -> kills so far
    epoch: float = 0.0  # Unix time that virtual time 0 stands for (the fake /proc's btime)

    @property
    def clock(self) -> float:
        """Virtual time as Unix seconds: the clock process start times in the fake /proc use."""
        return self.epoch + self.time_seconds


@dataclass(frozen=True)
class SourceStatus:
    """Whether a data source (nvml, dcgm, dcgm_profiling) delivered this poll, and if not, why."""

    available: bool
    reason: str = ""  # one line; "" when available


@dataclass(frozen=True)
class Snapshot:
    """One complete poll of every GPU on the host."""

    timestamp: float  # wall clock (Unix seconds) when the poll finished
    backend: str  # "nvml" | "dcgm"
    driver_version: str
    poll_duration_seconds: float
    gpus: tuple[GpuInfo, ...]
    # Cumulative count of failed NVML calls since start, by (call name, error class short name),
    # e.g. ("nvmlDeviceGetPowerUsage", "GpuIsLost"). NotSupported is not an error.
    call_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Per collector section (gpu, mig, process, mps): False when a read it depends on failed this poll.
    section_ok: Mapping[str, bool] = field(default_factory=dict)
    simulation: SimulationInfo | None = None
    # Data sources behind this poll (exported as gpushare_exporter_source_available); a source
    # whose state is not known yet (e.g. DCGM profiling before its first watch) is left out.
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    backend_reason: str = ""  # why this backend reads the GPUs, e.g. "--backend auto: DCGM not installed"
    # Kubernetes device allocations on this node (pod-resources); empty outside Kubernetes.
    pod_devices: tuple[PodDevice, ...] = ()
