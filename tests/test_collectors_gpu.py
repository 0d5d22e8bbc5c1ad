"""GpuCollector: physical-GPU series from hand-built snapshots."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from exporter.collectors.gpu import GpuCollector, mig_mode_label
from exporter.snapshot import Activity
from snapshot_samples import GIB, UUID0, UUID1, UUID2, mig_gpu, mps_gpu, rich_snapshot


def registry_for(snapshot) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(lambda: snapshot))
    return registry


def gpu0(name: str, **labels):
    return registry_for(rich_snapshot()).get_sample_value(name, {"gpu": "0", "uuid": UUID0, **labels})


def test_info_carries_identity_modes_and_driver():
    """gpu_info is 1 and carries name, bus id, driver version, MIG/compute mode and sharing mode."""
    labels = {
        "gpu": "1",
        "uuid": UUID1,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:2A:00.0",
        "driver_version": "580.95.05",
        "mig_mode": "enabled",
        "compute_mode": "default",
        "sharing": "mig+mps",
    }
    assert registry_for(rich_snapshot()).get_sample_value("gpushare_gpu_info", labels) == 1


def test_memory_in_bytes_as_read():
    """Memory families are the GpuInfo byte counts, unconverted."""
    assert gpu0("gpushare_gpu_memory_total_bytes") == 80 * GIB
    assert gpu0("gpushare_gpu_memory_used_bytes") == 30 * GIB
    assert gpu0("gpushare_gpu_memory_free_bytes") == 49 * GIB
    assert gpu0("gpushare_gpu_memory_reserved_bytes") == 1 * GIB


def test_mig_instances_not_summed_into_gpu_memory():
    """A MIG GPU exports the parent's own used-memory reading (7 GiB), not the instances' 12+3 GiB."""
    registry = registry_for(rich_snapshot())
    used = registry.get_sample_value("gpushare_gpu_memory_used_bytes", {"gpu": "1", "uuid": UUID1})
    assert used == 7 * GIB
    assert registry.get_sample_value("gpushare_gpu_sm_active_ratio", {"gpu": "1", "uuid": UUID1}) is None


def test_none_values_are_skipped_not_zero():
    """Utilization None on the MIG GPU leaves no sample at all (rather than a 0)."""
    registry = registry_for(rich_snapshot())
    assert registry.get_sample_value("gpushare_gpu_utilization_ratio", {"gpu": "1", "uuid": UUID1}) is None
    assert registry.get_sample_value("gpushare_gpu_utilization_ratio", {"gpu": "0", "uuid": UUID0}) == 0.75
    partial = dataclasses.replace(mps_gpu(), activity=Activity(sm_active=0.6))
    only_sm = registry_for(dataclasses.replace(rich_snapshot(), gpus=(partial,)))
    assert only_sm.get_sample_value("gpushare_gpu_fp64_active_ratio", {"gpu": "0", "uuid": UUID0}) is None


def test_activity_ratios_each_get_their_family():
    """Each non-None Activity field lands in gpushare_gpu_<field>_ratio with its own value."""
    assert gpu0("gpushare_gpu_sm_active_ratio") == 0.6
    assert gpu0("gpushare_gpu_sm_occupancy_ratio") == 0.3
    assert gpu0("gpushare_gpu_tensor_active_ratio") == 0.2
    assert gpu0("gpushare_gpu_dram_active_ratio") == 0.5
    assert gpu0("gpushare_gpu_fp64_active_ratio") == 0.01
    assert gpu0("gpushare_gpu_graphics_active_ratio") == 0.8


def test_power_energy_temperature_clocks():
    """Power in watts, energy as a _total counter in joules, clocks in hertz by domain."""
    assert gpu0("gpushare_gpu_power_watts") == 450.5
    assert gpu0("gpushare_gpu_power_limit_watts") == 700.0
    assert gpu0("gpushare_gpu_energy_joules_total") == 1_234_567.0
    assert gpu0("gpushare_gpu_temperature_celsius") == 61.0
    assert gpu0("gpushare_gpu_clock_hertz", clock="memory") == 2_619e6
    assert gpu0("gpushare_gpu_clock_hertz", clock="sm") == 1_755e6


def test_clock_events_ecc_and_xid():
    """Clock event reasons are 1/0 per reason; ECC and XID counts are counters by type / code."""
    assert gpu0("gpushare_gpu_clock_event_active", reason="sw_power_cap") == 1
    assert gpu0("gpushare_gpu_clock_event_active", reason="hw_slowdown") == 0
    assert gpu0("gpushare_gpu_ecc_errors_total", type="corrected") == 3
    assert gpu0("gpushare_gpu_ecc_errors_total", type="uncorrected") == 0
    assert gpu0("gpushare_gpu_xid_errors_total", xid="79") == 1


def test_lost_gpu_exports_info_and_up_zero_only():
    """A GPU with up=False keeps its info and up=0; its stale memory and power are not exported."""
    registry = registry_for(rich_snapshot())
    ids = {"gpu": "2", "uuid": UUID2}
    assert registry.get_sample_value("gpushare_gpu_up", ids) == 0
    exported = {
        sample.name
        for family in registry.collect()
        for sample in family.samples
        if sample.labels.get("uuid") == UUID2
    }
    assert exported == {"gpushare_gpu_info", "gpushare_gpu_up"}


def test_up_gpus_report_one():
    """Readable GPUs report up=1."""
    assert gpu0("gpushare_gpu_up") == 1


def test_no_gpus_no_families():
    """A host with no GPUs exports no GPU families at all (not empty HELP/TYPE blocks)."""
    snapshot = dataclasses.replace(rich_snapshot(), gpus=())
    assert list(GpuCollector(lambda: snapshot).collect()) == []


def test_no_snapshot_yet_exports_nothing():
    """Before the first successful poll the collector yields nothing."""
    assert GpuCollector(lambda: None).collect() == []


def test_duplicate_gpu_index_exports_first_only():
    """Two GpuInfo with the same labels do not produce duplicate series (first wins)."""
    first = mps_gpu()
    second = dataclasses.replace(first, memory_used_bytes=1)
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(first, second))
    families = {f.name: f for f in GpuCollector(lambda: snapshot).collect()}
    samples = families["gpushare_gpu_memory_used_bytes"].samples
    assert [s.value for s in samples] == [30 * GIB]


def test_mig_mode_label_values():
    """MIG mode maps to enabled/disabled, and unknown when the driver could not say."""
    assert (mig_mode_label(True), mig_mode_label(False), mig_mode_label(None)) == ("enabled", "disabled", "unknown")


def test_activity_is_not_borrowed_from_mig_instances():
    """GPU activity stays absent on a MIG GPU even when every instance reports sm_active."""
    gpu = dataclasses.replace(mig_gpu(), activity=Activity())
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    names = {f.name for f in GpuCollector(lambda: snapshot).collect()}
    assert names and not any(name.endswith("_active_ratio") for name in names)
