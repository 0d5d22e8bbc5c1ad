"""MigCollector: per GPU-instance series from hand-built snapshots."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from exporter.collectors.mig import MigCollector
from exporter.snapshot import Activity, MigInstance
from snapshot_samples import GIB, MIB, UUID1, mig_gpu, rich_snapshot


def registry_for(snapshot) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MigCollector(lambda: snapshot))
    return registry


def gi(n: int, profile: str = "3g.40gb") -> dict[str, str]:
    return {"gpu": "1", "uuid": UUID1, "gi": str(n), "profile": profile}


def test_info_has_placement_and_uuids():
    """mig_info names the compute instance, its MIG UUID, placement and SM count, under the parent uuid."""
    labels = gi(1) | {
        "ci": "0",
        "mig_uuid": "MIG-aaaaaaaa-0000-0000-0000-000000000001",
        "placement_start": "4",
        "placement_size": "4",
        "sm_count": "60",
    }
    assert registry_for(rich_snapshot()).get_sample_value("gpushare_mig_info", labels) == 1


def test_memory_per_instance_not_mixed():
    """Each GI reports its own memory; GI 1 and GI 2 differ as in the snapshot."""
    registry = registry_for(rich_snapshot())
    assert registry.get_sample_value("gpushare_mig_memory_used_bytes", gi(1)) == 12 * GIB
    assert registry.get_sample_value("gpushare_mig_memory_used_bytes", gi(2)) == 3 * GIB
    assert registry.get_sample_value("gpushare_mig_memory_total_bytes", gi(2)) == 40448 * MIB
    assert registry.get_sample_value("gpushare_mig_memory_free_bytes", gi(1)) == 27 * GIB


def test_activity_ratios_per_instance_and_none_skipped():
    """sm_active is per instance; tensor_active exists only where the instance reported it."""
    registry = registry_for(rich_snapshot())
    assert registry.get_sample_value("gpushare_mig_sm_active_ratio", gi(1)) == 0.9
    assert registry.get_sample_value("gpushare_mig_sm_active_ratio", gi(2)) == 0.1
    assert registry.get_sample_value("gpushare_mig_tensor_active_ratio", gi(1)) == 0.7
    assert registry.get_sample_value("gpushare_mig_tensor_active_ratio", gi(2)) is None


def test_free_capacity_per_profile():
    """Free capacity is exported per profile on the parent GPU, zeros included."""
    registry = registry_for(rich_snapshot())
    labels = {"gpu": "1", "uuid": UUID1, "profile": "1g.10gb"}
    assert registry.get_sample_value("gpushare_mig_free_capacity", labels) == 0
    snapshot = rich_snapshot()
    gpu = dataclasses.replace(mig_gpu(), mig_free_capacity={"1g.10gb": 3})
    snapshot = dataclasses.replace(snapshot, gpus=(gpu,))
    assert registry_for(snapshot).get_sample_value("gpushare_mig_free_capacity", labels) == 3


def test_two_compute_instances_share_one_gi_series():
    """A GI split in two compute instances has two info samples but one memory sample."""
    base = mig_gpu().mig_instances[0]
    second_ci = dataclasses.replace(base, ci=1, mig_index=2, mig_uuid="MIG-second", activity=Activity(sm_active=0.2))
    gpu = dataclasses.replace(mig_gpu(), mig_instances=(base, second_ci))
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    families = {f.name: f for f in MigCollector(lambda: snapshot).collect()}
    assert len(families["gpushare_mig"].samples) == 2  # info family; samples are gpushare_mig_info
    assert [s.value for s in families["gpushare_mig_memory_used_bytes"].samples] == [12 * GIB]


def test_non_mig_and_lost_gpus_export_no_mig_series():
    """GPUs without instances (MPS GPU 0, lost GPU 2) contribute no gpushare_mig_* samples."""
    uuids = {s.labels["uuid"] for f in MigCollector(rich_snapshot).collect() for s in f.samples}
    assert uuids == {UUID1}


def test_lost_mig_gpu_exports_nothing():
    """A MIG GPU that is down exports no MIG series even if stale instances are present."""
    gpu = dataclasses.replace(mig_gpu(), up=False, error="Timeout")
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    assert MigCollector(lambda: snapshot).collect() == []


def test_instance_with_unknown_memory_skips_memory_only():
    """memory None on an instance drops its memory samples but keeps its info sample."""
    inst = MigInstance(
        gi=7, ci=0, mig_index=0, mig_uuid="MIG-x", profile="1g.10gb", profile_id=19,
        placement_start=0, placement_size=1, sm_count=16,
        memory_total_bytes=None, memory_used_bytes=None, memory_free_bytes=None,
    )
    gpu = dataclasses.replace(mig_gpu(), mig_instances=(inst,), mig_free_capacity={})
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    names = {f.name for f in MigCollector(lambda: snapshot).collect()}
    assert names == {"gpushare_mig"}  # InfoMetricFamily's base name; its sample is gpushare_mig_info
