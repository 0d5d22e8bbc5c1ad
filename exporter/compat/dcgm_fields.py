"""dcgm-exporter's default counters: each enabled row of its etc/default-counters.csv, with the
snapshot value it is made from and the unit conversion (docs/dcgm-exporter.md has the table).

The rows, their order and their Prometheus types are those of default-counters.csv in
NVIDIA/dcgm-exporter at d5e5f51 (2026-05-12). Values are written as dcgm-exporter writes them:
INT64 fields as integers (``%d``), DOUBLE fields with six decimals (``%f``). A value the
snapshot does not have (None) gives no sample, as DCGM's blank values give none there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from exporter.snapshot import Activity, GpuInfo

MIB = 1024 * 1024
DRIVER_VERSION_LABEL = "DCGM_FI_DRIVER_VERSION"  # the one `label` row of the CSV


@dataclass(frozen=True)
class Entity:
    """What one dcgm-exporter entity (a GPU, or a GPU instance of a MIG GPU) reports: the GPU's
    readings, and for a GPU instance its own memory and activity."""

    gpu: GpuInfo
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    memory_reserved_bytes: int | None
    activity: Activity
    nvlink_mb_per_second: float | None  # from two polls' byte counters; None on the first


@dataclass(frozen=True)
class Field:
    """One enabled row: series name, Prometheus type, HELP text, how its value is written and read."""

    name: str
    type: str  # "gauge" | "counter", as the CSV declares it
    help: str
    double: bool  # DCGM_FT_DOUBLE (written %f) rather than INT64 (%d)
    read: Callable[[Entity], float | None]


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _percent(ratio: float | None) -> float | None:
    return None if ratio is None else ratio * 100.0


def _mib(value: int | None) -> float | None:
    return None if value is None else value // MIB


def _flag(value: bool | None) -> float | None:
    return None if value is None else (1 if value else 0)


def _clock_mhz(name: str) -> Callable[[Entity], float | None]:
    return lambda e: _scaled(e.gpu.clocks_hertz.get(name), 1e-6)


FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", False, _clock_mhz("sm")),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", False, _clock_mhz("memory")),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", False,
          lambda e: e.gpu.health.memory_temperature_celsius),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", False, lambda e: e.gpu.temperature_celsius),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", True, lambda e: e.gpu.power_watts),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy consumed since the driver loaded (in mJ).",
          False, lambda e: _scaled(e.gpu.energy_joules, 1000.0)),
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe replays (retries) since the driver loaded.", False,
          lambda e: e.gpu.health.pcie_replay_errors),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", False,
          lambda e: _percent(e.gpu.utilization_ratio)),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", False,
          lambda e: _percent(e.gpu.memory_utilization_ratio)),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", False,
          lambda e: _percent(e.gpu.health.encoder_utilization_ratio)),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", False,
          lambda e: _percent(e.gpu.health.decoder_utilization_ratio)),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "The last XID error seen on the GPU.", False,
          lambda e: e.gpu.health.last_xid),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", False,
          lambda e: _mib(e.memory_free_bytes)),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", False,
          lambda e: _mib(e.memory_used_bytes)),
    Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", False,
          lambda e: _mib(e.memory_reserved_bytes)),
    Field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink data throughput of all links, TX plus RX "
          "(in MB/s).", False, lambda e: e.nvlink_mb_per_second),
    Field("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license status.", False,
          lambda e: e.gpu.health.vgpu_license_status),
    Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors.", False,
          lambda e: e.gpu.health.remapped_rows.get("uncorrectable")),
    Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors.", False,
          lambda e: e.gpu.health.remapped_rows.get("correctable")),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 when a row remapping has failed.", False,
          lambda e: _flag(e.gpu.health.row_remap_failure)),
    Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", True,
          lambda e: e.activity.graphics_active),
    Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", True,
          lambda e: e.activity.tensor_active),
    Field("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active.", True,
          lambda e: e.activity.dram_active),
    Field("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe transmit rate, headers and payload (in bytes per second).",
          False, lambda e: e.gpu.health.pcie_tx_bytes_per_second),
    Field("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe receive rate, headers and payload (in bytes per second).",
          False, lambda e: e.gpu.health.pcie_rx_bytes_per_second),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
# Fields dcgm-exporter (PR #594, --kubernetes-virtual-gpus) also gives per pod on a shared GPU.
PER_POD_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL")

# Names of XIDs in NVIDIA's XID catalogue (https://docs.nvidia.com/deploy/xid-errors/), for the
# err_msg label dcgm-exporter puts on DCGM_FI_DEV_XID_ERRORS; the codes alerts/ classifies.
XID_NAMES = {
    13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors", 48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning", 62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 68: "NVDEC0 Exception",
    74: "NVLINK Error", 79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate",
    94: "Contained ECC error", 95: "Uncontained ECC error", 119: "GSP RPC Timeout", 120: "GSP Error",
    140: "Unrecovered ECC Error",
}
UNKNOWN_XID = "Unknown Error"


def format_value(value: float, double: bool) -> str:
    """As dcgm-exporter prints a DCGM value: ``%f`` for doubles, ``%d`` for integers (DCGM's integers
    are whole units; a unit conversion here is rounded, so 1.41e9 Hz is 1410 MHz, not 1409)."""
    return f"{value:f}" if double else f"{round(value):d}"
