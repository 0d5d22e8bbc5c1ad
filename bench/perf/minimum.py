"""The minimum NVML calls one poll needs for the metric set gpushare exports, from a Snapshot.

Definition (docs/performance.md): per poll in steady state, one NVML call per value that an
exported family needs, per device (GPU or MIG instance) the value is about, where NVML has
no call returning several of those values at once. What does not change while the device
and process exist is *cached identity* and costs nothing per poll: handles, name, UUID,
PCI bus id, driver version, MIG profile table, GPU/compute instance ids and placement,
process names/command lines/environments, the supported clock-event mask, the MIG free
capacity of an unchanged layout, GPM support and sample buffers.

So a GPU needs (health reads: see _health): MIG mode 1, memory 1 (total/used/free/reserved come in one struct), power 1,
power limit 1, temperature 1 (energy: read every 10 s, not per poll), one per exported clock domain, current clock-event
reasons 1, one per exported ECC counter type, XID drain 1 (one wait that answers "none");
outside MIG also utilization 1 and compute mode 1. GPM activity costs a sample + a metrics
computation (2) per GPU and per GPU instance. Processes: one list per device (GPU outside
MIG, each MIG instance), one MPS client list per device that runs an MPS server, one
per-process utilization query per non-MIG GPU with processes. pynvml's size probes (a
list call made twice by the wrapper) are not the exporter's choice and are counted at the
API level (once). Counts are keyed by pynvml function name, as the exporter's NvmlCaller
counts them.
"""

from __future__ import annotations

from collections import Counter

# Calls the exporter makes that the minimum does not need (identity / discovery), for the breakdown.
DISCOVERY = ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID")


def minimum_calls(snapshot) -> Counter:
    """Minimum API calls per pynvml function name for one poll that produced ``snapshot``."""
    need: Counter = Counter()
    for gpu in snapshot.gpus:
        if not gpu.up:
            continue
        _gpu_values(gpu, need)
        if gpu.mig_mode:
            _mig(gpu, need)
        else:
            _plain(gpu, need)
    return need


def _gpu_values(gpu, need: Counter) -> None:
    """Values of the physical GPU, whatever its mode."""
    if gpu.mig_mode is not None:
        need["nvmlDeviceGetMigMode"] += 1
    if gpu.memory_total_bytes is not None:
        need["nvmlDeviceGetMemoryInfo"] += 1
    # The energy counter is not a per-poll value: read every 10 s by design (one read costs ~4 ms
    # on a real H100; exporter/backend/nvml_device.py ENERGY_READ_SECONDS), so not counted here.
    for field, call in (("power_watts", "nvmlDeviceGetPowerUsage"),
                        ("power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit"),
                        ("temperature_celsius", "nvmlDeviceGetTemperature")):
        if getattr(gpu, field) is not None:
            need[call] += 1
    need["nvmlDeviceGetClockInfo"] += len(gpu.clocks_hertz)
    if gpu.clock_event_reasons:
        need["nvmlDeviceGetCurrentClocksEventReasons"] += 1
    need["nvmlDeviceGetTotalEccErrors"] += len(gpu.ecc_errors)
    need["nvmlEventSetWait_v2"] += 1
    if gpu.activity is not None:
        need["nvmlGpmSampleGet"] += 1
        need["nvmlGpmMetricsGet"] += 1
    _health(gpu.health, need)


def _health(h, need: Counter) -> None:
    """Issue 21's health values read every poll (NVLink states/errors and the vGPU license are
    read once a minute: not per poll). Memory temperature, PCIe replays and the NVLink data
    counters, the PCIe byte counters and the violation times share one field-values call."""
    if (h.memory_temperature_celsius is not None or h.pcie_replay_errors is not None or h.nvlinks
            or h.pcie_tx_bytes is not None or h.pcie_rx_bytes is not None or h.clock_event_seconds):
        need["nvmlDeviceGetFieldValues"] += 1
    need["nvmlDeviceGetEncoderUtilization"] += h.encoder_utilization_ratio is not None
    need["nvmlDeviceGetDecoderUtilization"] += h.decoder_utilization_ratio is not None
    need["nvmlDeviceGetEncoderStats"] += h.encoder_sessions is not None
    need["nvmlDeviceGetRemappedRows"] += bool(h.remapped_rows)
    need["nvmlDeviceGetRetiredPages"] += len(h.retired_pages)
    need["nvmlDeviceGetRetiredPagesPendingStatus"] += h.retired_pages_pending is not None


def _plain(gpu, need: Counter) -> None:
    """A GPU outside MIG: utilization, compute mode, its process lists."""
    if gpu.utilization_ratio is not None:
        need["nvmlDeviceGetUtilizationRates"] += 1
    if gpu.compute_mode not in (None, "unknown"):
        need["nvmlDeviceGetComputeMode"] += 1
    need["nvmlDeviceGetComputeRunningProcesses"] += 1
    if gpu.mps_servers:
        need["nvmlDeviceGetMPSComputeRunningProcesses"] += 1
    if gpu.processes:
        need["nvmlDeviceGetProcessUtilization"] += 1


def _mig(gpu, need: Counter) -> None:
    """A GPU in MIG mode: memory and process lists per instance, GPM per GPU instance."""
    servers_on = {s.gi for s in gpu.mps_servers}
    gpm_gis = set()
    for inst in gpu.mig_instances:
        if inst.memory_total_bytes is not None:
            need["nvmlDeviceGetMemoryInfo"] += 1
        need["nvmlDeviceGetComputeRunningProcesses"] += 1
        if inst.gi in servers_on:
            need["nvmlDeviceGetMPSComputeRunningProcesses"] += 1
        if inst.activity is not None and inst.gi not in gpm_gis:
            gpm_gis.add(inst.gi)
            need["nvmlGpmMigSampleGet"] += 1
            need["nvmlGpmMetricsGet"] += 1


def breakdown(actual: Counter, minimum: Counter) -> list[tuple[str, int, int]]:
    """(call, actual, minimum) rows, calls the exporter made first by count."""
    names = set(actual) | set(minimum)
    return sorted(((n, actual.get(n, 0), minimum.get(n, 0)) for n in names), key=lambda r: (-r[1], r[0]))
