"""Per physical GPU series (gpushare_gpu_*).

Values come straight from :class:`GpuInfo`: the parent device's own readings. MIG
instance values are never summed in here (they have their own gpushare_mig_* series),
so a query that adds GPU and MIG memory does not count anything twice.
A GPU that could not be read this poll (``up`` False) exports its info and up=0 only.
"""

from __future__ import annotations

from operator import attrgetter

from exporter.collectors.base import Block, Families, SnapshotCollector, Spec, gpu_labels
from exporter.snapshot import ACTIVITY_FIELDS, GpuInfo, Snapshot

GPU = ("gpu", "uuid")

INFO = Spec(
    "gpushare_gpu_info",
    "info",
    "Identity and sharing mode of a physical GPU; always 1.",
    GPU + ("name", "pci_bus_id", "driver_version", "mig_mode", "compute_mode", "sharing"),
)
UP = Spec(
    "gpushare_gpu_up", "gauge", "1 if the GPU was read this poll, 0 if it was lost or timed out.", GPU
)
MEMORY_TOTAL = Spec("gpushare_gpu_memory_total_bytes", "gauge", "Total framebuffer memory.", GPU, "bytes")
MEMORY_USED = Spec(
    "gpushare_gpu_memory_used_bytes",
    "gauge",
    "Framebuffer memory allocated (reserved excluded when known).",
    GPU,
    "bytes",
)
MEMORY_FREE = Spec("gpushare_gpu_memory_free_bytes", "gauge", "Framebuffer memory free.", GPU, "bytes")
MEMORY_RESERVED = Spec(
    "gpushare_gpu_memory_reserved_bytes",
    "gauge",
    "Framebuffer memory reserved by the driver and firmware.",
    GPU,
    "bytes",
)
UTILIZATION = Spec(
    "gpushare_gpu_utilization_ratio",
    "gauge",
    "Fraction of the last sample period in which a kernel ran (absent under MIG).",
    GPU,
    "ratio",
)
MEMORY_UTILIZATION = Spec(
    "gpushare_gpu_memory_utilization_ratio",
    "gauge",
    "Fraction of the last sample period in which device memory was read or written.",
    GPU,
    "ratio",
)
ACTIVITY_HELP = {
    "sm_active": "Fraction of time at least one warp was resident on an SM, averaged over SMs.",
    "sm_occupancy": "Resident warps as a fraction of the theoretical maximum, averaged over SMs.",
    "tensor_active": "Fraction of cycles the tensor pipes were active.",
    "fp64_active": "Fraction of cycles the FP64 pipes were active.",
    "fp32_active": "Fraction of cycles the FP32 pipes were active.",
    "fp16_active": "Fraction of cycles the FP16 pipes were active.",
    "dram_active": "Fraction of cycles device memory was being read or written.",
    "graphics_active": "Fraction of time the graphics or compute engine was active.",
}
ACTIVITY = {
    name: Spec(f"gpushare_gpu_{name}_ratio", "gauge", ACTIVITY_HELP[name], GPU, "ratio") for name in ACTIVITY_FIELDS
}
POWER = Spec("gpushare_gpu_power_watts", "gauge", "Board power draw.", GPU, "watts")
POWER_LIMIT = Spec("gpushare_gpu_power_limit_watts", "gauge", "Enforced power limit.", GPU, "watts")
ENERGY = Spec(
    "gpushare_gpu_energy_joules_total", "counter", "Energy consumed since the driver was loaded.", GPU, "joules"
)
TEMPERATURE = Spec("gpushare_gpu_temperature_celsius", "gauge", "GPU core temperature.", GPU, "celsius")
CLOCK = Spec(
    "gpushare_gpu_clock_hertz", "gauge", "Current clock frequency, by clock domain.", GPU + ("clock",), "hertz"
)
CLOCK_EVENT = Spec(
    "gpushare_gpu_clock_event_active",
    "gauge",
    "1 while a clock event (throttle) reason is active, else 0.",
    GPU + ("reason",),
)
ECC = Spec(
    "gpushare_gpu_ecc_errors_total",
    "counter",
    "Volatile ECC memory errors since the last driver load.",
    GPU + ("type",),
)
XID = Spec("gpushare_gpu_xid_errors_total", "counter", "XID errors seen since the exporter started.", GPU + ("xid",))


# Written per up GPU in this order (see GpuCollector._add_gpu).
_GAUGES = Block(MEMORY_TOTAL, MEMORY_USED, MEMORY_FREE, MEMORY_RESERVED, UTILIZATION, MEMORY_UTILIZATION,
                *(ACTIVITY[name] for name in ACTIVITY_FIELDS), POWER, POWER_LIMIT, ENERGY, TEMPERATURE)
_memory_values = attrgetter("memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes",
                            "utilization_ratio", "memory_utilization_ratio")
_activity_values = attrgetter(*ACTIVITY_FIELDS)  # what Activity.items() gives, values only
_power_values = attrgetter("power_watts", "power_limit_watts", "energy_joules", "temperature_celsius")


def mig_mode_label(mig_mode: bool | None) -> str:
    """Label value for the current MIG mode: enabled, disabled or unknown (not MIG-capable or unread)."""
    if mig_mode is None:
        return "unknown"
    return "enabled" if mig_mode else "disabled"


class GpuCollector(SnapshotCollector):
    """Exports the physical-GPU families listed in docs/metrics.md."""

    name = "gpu"
    section = "gpu"

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        for gpu in snapshot.gpus:
            self._add_gpu(out, snapshot, gpu)
        return out

    @staticmethod
    def _add_gpu(out: Families, snapshot: Snapshot, gpu: GpuInfo) -> None:
        ids = gpu_labels(gpu.index, gpu.uuid)
        info = (
            gpu.name,
            gpu.pci_bus_id,
            snapshot.driver_version,
            mig_mode_label(gpu.mig_mode),
            gpu.compute_mode,
            gpu.sharing,
        )
        out.add(INFO, ids + info, 1)
        out.add(UP, ids, 1 if gpu.up else 0)
        if not gpu.up:
            return  # whatever else the backend left in GpuInfo is stale or partial
        # The GPU's gauges in one block, their values taken in three C-level steps.
        out.put(_GAUGES, ids, _memory_values(gpu) + _activity_values(gpu.activity) + _power_values(gpu))
        out.add_each(CLOCK, ids, sorted(gpu.clocks_hertz.items()))
        out.add_each(CLOCK_EVENT, ids, [(reason, None if active is None else (1 if active else 0))
                                        for reason, active in sorted(gpu.clock_event_reasons.items())])
        out.add_each(ECC, ids, sorted(gpu.ecc_errors.items()))
        out.add_each(XID, ids, sorted(gpu.xid_errors.items()))  # int codes, written as str
