"""Hand-built snapshots shared by the collector, poller, server and metrics-doc tests.

Numbers are chosen so that mistakes show: GPU 1's own memory reading differs from the
sum of its MIG instances, every process has a distinct memory size, and GPU 2 is lost
but still carries (stale) values that must not be exported.
"""

from __future__ import annotations

import dataclasses

from exporter.snapshot import (
    Activity,
    DeviceHealth,
    GpuInfo,
    MigInstance,
    NvLink,
    MpsServer,
    PodDevice,
    ProcessInfo,
    SimulationInfo,
    Snapshot,
    SourceStatus,
)

GIB = 1024**3
MIB = 1024**2

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"
UUID2 = "GPU-22222222-2222-2222-2222-222222222222"


def mps_gpu() -> GpuInfo:
    """GPU 0: whole-GPU MPS with one server and two clients."""
    return GpuInfo(
        index=0,
        uuid=UUID0,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:17:00.0",
        up=True,
        mig_mode=False,
        compute_mode="exclusive_process",
        sharing="mps",
        memory_total_bytes=80 * GIB,
        memory_used_bytes=30 * GIB,
        memory_free_bytes=49 * GIB,
        memory_reserved_bytes=1 * GIB,
        utilization_ratio=0.75,
        memory_utilization_ratio=0.4,
        activity=Activity(
            sm_active=0.6, sm_occupancy=0.3, tensor_active=0.2, fp64_active=0.01,
            fp32_active=0.15, fp16_active=0.05, dram_active=0.5, graphics_active=0.8,
        ),
        power_watts=450.5,
        power_limit_watts=700.0,
        energy_joules=1_234_567.0,
        temperature_celsius=61.0,
        clocks_hertz={"graphics": 1_755e6, "sm": 1_755e6, "memory": 2_619e6, "video": 1_500e6},
        clock_event_reasons={"sw_power_cap": True, "hw_slowdown": False},
        ecc_errors={"corrected": 3, "uncorrected": 0},
        xid_errors={79: 1},
        # Every health field set, as a vGPU guest on an SXM board would report them (the
        # combination is for coverage: real vGPU guests see no NVLink counters).
        health=DeviceHealth(
            memory_temperature_celsius=72.0, pcie_replay_errors=4, pcie_tx_bytes=2_500_000_000_000, pcie_rx_bytes=6_000_000_000_000,
            pcie_tx_bytes_per_second=2.5e9,
            pcie_rx_bytes_per_second=6.0e9, encoder_utilization_ratio=0.1, decoder_utilization_ratio=0.25,
            encoder_sessions=2,
            nvlinks=(NvLink(link=0, active=True, tx_bytes=10 * GIB, rx_bytes=12 * GIB,
                            errors={"crc_flit": 1, "crc_data": 0, "replay": 2, "recovery": 0}),
                     NvLink(link=1, active=False)),
            remapped_rows={"correctable": 2, "uncorrectable": 1}, row_remap_pending=True, row_remap_failure=False,
            retired_pages={"single_bit_ecc": 0, "double_bit_ecc": 1}, retired_pages_pending=False,
            clock_event_seconds={"power": 61.5, "thermal": 3.0, "sync_boost": 0.0, "board_limit": 0.0,
                                 "low_utilization": 120.0, "reliability": 0.0},
            vgpu_license_status=1, last_xid=79, last_xid_timestamp=1_700_000_100.0,
        ),
        processes=(
            ProcessInfo(100, "nvidia-cuda-mps-server", "", 0, None, None, 60 * MIB, is_mps_server=True),
            ProcessInfo(
                201, "python3", "python3 train.py --lr 3e-4", 0, None, None, 20 * GIB, 0.35,
                is_mps_client=True, mps_memory_limit_bytes=40 * GIB, mps_active_thread_ratio=0.5,
            ),
            ProcessInfo(
                202, "python3", "python3 serve.py", 0, None, None, 9 * GIB, None,
                is_mps_client=True, mps_memory_limit_bytes=None, mps_active_thread_ratio=0.25,
            ),
        ),
        mps_servers=(MpsServer(pid=100, gi=None),),
    )


def mig_gpu() -> GpuInfo:
    """GPU 1: MIG with two 3g instances; GI 2 runs MPS (MIG+MPS), GI 1 a plain process."""
    return GpuInfo(
        index=1,
        uuid=UUID1,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:2A:00.0",
        up=True,
        mig_mode=True,
        compute_mode="default",
        sharing="mig+mps",
        memory_total_bytes=80 * GIB,
        memory_used_bytes=7 * GIB,  # the parent's own reading: not 12 + 3 (the instances' sum)
        memory_free_bytes=72 * GIB,
        utilization_ratio=None,  # NotSupported on MIG-enabled GPUs
        power_watts=300.0,
        temperature_celsius=55.0,
        mig_instances=(
            MigInstance(
                gi=1, ci=0, mig_index=0, mig_uuid="MIG-aaaaaaaa-0000-0000-0000-000000000001",
                profile="3g.40gb", profile_id=9, placement_start=4, placement_size=4, sm_count=60,
                memory_total_bytes=40448 * MIB, memory_used_bytes=12 * GIB, memory_free_bytes=27 * GIB,
                activity=Activity(
                    sm_active=0.9, sm_occupancy=0.45, tensor_active=0.7, fp64_active=0.0,
                    fp32_active=0.1, fp16_active=0.2, dram_active=0.6, graphics_active=0.95,
                ),
            ),
            MigInstance(
                gi=2, ci=0, mig_index=1, mig_uuid="MIG-aaaaaaaa-0000-0000-0000-000000000002",
                profile="3g.40gb", profile_id=9, placement_start=0, placement_size=4, sm_count=60,
                memory_total_bytes=40448 * MIB, memory_used_bytes=3 * GIB, memory_free_bytes=36 * GIB,
                activity=Activity(sm_active=0.1),
            ),
        ),
        mig_free_capacity={"1g.10gb": 0, "3g.40gb": 0, "7g.80gb": 0},
        processes=(
            ProcessInfo(300, "nvidia-cuda-mps-server", "", 1, 2, 0, 50 * MIB, is_mps_server=True),
            ProcessInfo(
                301, "python3", "python3 infer.py", 1, 2, 0, 2 * GIB,
                is_mps_client=True, mps_memory_limit_bytes=10 * GIB, mps_active_thread_ratio=1.0,
            ),
            ProcessInfo(400, "train", "/opt/train", 1, 1, 0, 11 * GIB),
        ),
        mps_servers=(MpsServer(pid=300, gi=2),),
    )


def lost_gpu() -> GpuInfo:
    """GPU 2: fell off the bus this poll; its other fields are stale and must not be exported."""
    return GpuInfo(
        index=2,
        uuid=UUID2,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:3D:00.0",
        up=False,
        error="GpuIsLost",
        sharing="time_slicing",
        memory_total_bytes=80 * GIB,
        memory_used_bytes=1 * GIB,
        power_watts=100.0,
        processes=(ProcessInfo(500, "python3", "", 2, None, None, 1 * GIB),),
    )


def rich_snapshot(simulated: bool = True) -> Snapshot:
    """MPS GPU, MIG+MPS GPU, lost GPU, driver call errors and (optionally) simulation info."""
    return Snapshot(
        timestamp=1_700_000_000.0,
        backend="nvml",
        driver_version="580.95.05",
        poll_duration_seconds=0.05,
        gpus=(mps_gpu(), mig_gpu(), lost_gpu()),
        call_errors={("nvmlDeviceGetPowerUsage", "GpuIsLost"): 2, ("nvmlDeviceGetMemoryInfo", "Timeout"): 1},
        section_ok={"gpu": True, "mig": True, "process": True, "mps": True},
        simulation=SimulationInfo(time_seconds=120.0, oom_kills={(0, ""): 1, (1, "2"): 0}) if simulated else None,
        # As a DCGM backend reports them while another tool holds the profiling counters.
        sources={"nvml": SourceStatus(True), "dcgm": SourceStatus(True),
                 "dcgm_profiling": SourceStatus(False, "profiling module busy (-37)")},
    )


# Pods of rich_snapshot_with_pods(): (namespace, pod, container) by pid.
PODS = {201: ("ml", "trainer-0", "train"), 202: ("ml", "serve-7d9f8b6c4-x2k9p", "server"),
        400: ("research", "finetune-x7k2q", "main")}


def rich_snapshot_with_pods() -> Snapshot:
    """rich_snapshot() on Kubernetes: GPU 0's MPS clients and GPU 1's GI 1 process run in pods, and
    the kubelet gave GPU 0's replicas to those pods and GPU 1's GI 2 (no pod process visible) to a
    third pod."""
    snapshot = rich_snapshot()
    gpus = []
    for gpu in snapshot.gpus:
        procs = tuple(dataclasses.replace(p, namespace=PODS[p.pid][0], pod=PODS[p.pid][1], container=PODS[p.pid][2])
                      if p.pid in PODS else p for p in gpu.processes)
        gpus.append(dataclasses.replace(gpu, processes=procs))
    devices = (
        PodDevice("ml", "trainer-0", "train", "nvidia.com/gpu", 0, UUID0, None, 1),
        PodDevice("ml", "serve-7d9f8b6c4-x2k9p", "server", "nvidia.com/gpu", 0, UUID0, None, 2),
        PodDevice("research", "finetune-x7k2q", "main", "nvidia.com/mig-3g.40gb", 1, UUID1, 1, 1),
        PodDevice("vision", "detect-5f6g7", "main", "nvidia.com/mig-3g.40gb", 1, UUID1, 2, 1),
    )
    return dataclasses.replace(snapshot, gpus=tuple(gpus), pod_devices=devices)
