"""Per MIG GPU-instance series (gpushare_mig_*).

Memory and activity belong to a GPU instance (its compute instances share them), so
those series carry one sample per GI even when the GI holds several compute instances;
gpushare_mig_info has one sample per compute instance. The parent ``uuid`` is the
physical GPU's, so MIG series join GPU series on (gpu, uuid).
"""

from __future__ import annotations

from operator import attrgetter

from exporter.collectors.base import Block, Families, SnapshotCollector, Spec, gpu_labels
from exporter.collectors.gpu import ACTIVITY_HELP
from exporter.snapshot import ACTIVITY_FIELDS, Snapshot

GI = ("gpu", "uuid", "gi", "profile")

INFO = Spec(
    "gpushare_mig_info",
    "info",
    "Identity and placement of a MIG device (one compute instance of a GPU instance); always 1.",
    GI + ("ci", "mig_uuid", "placement_start", "placement_size", "sm_count"),
)
MEMORY_TOTAL = Spec("gpushare_mig_memory_total_bytes", "gauge", "Memory of the GPU instance.", GI, "bytes")
MEMORY_USED = Spec("gpushare_mig_memory_used_bytes", "gauge", "Memory allocated in the GPU instance.", GI, "bytes")
MEMORY_FREE = Spec("gpushare_mig_memory_free_bytes", "gauge", "Memory free in the GPU instance.", GI, "bytes")
ACTIVITY = {
    name: Spec(f"gpushare_mig_{name}_ratio", "gauge", ACTIVITY_HELP[name][:-1] + ", in this GPU instance.", GI, "ratio")
    for name in ACTIVITY_FIELDS
}
FREE_CAPACITY = Spec(
    "gpushare_mig_free_capacity",
    "gauge",
    "How many more GPU instances of this profile can be created now, given the current layout.",
    ("gpu", "uuid", "profile"),
)

# Written per GPU instance in this order (see MigCollector.families).
_GAUGES = Block(MEMORY_TOTAL, MEMORY_USED, MEMORY_FREE, *(ACTIVITY[name] for name in ACTIVITY_FIELDS))
_memory_values = attrgetter("memory_total_bytes", "memory_used_bytes", "memory_free_bytes")
_activity_values = attrgetter(*ACTIVITY_FIELDS)  # what Activity.items() gives, values only


class MigCollector(SnapshotCollector):
    """Exports the MIG families listed in docs/metrics.md."""

    name = "mig"
    section = "mig"

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            ids = gpu_labels(gpu.index, gpu.uuid)
            for inst in sorted(gpu.mig_instances, key=lambda m: (m.gi, m.ci)):
                gi = ids + (str(inst.gi), inst.profile)
                placement = (str(inst.placement_start), str(inst.placement_size), str(inst.sm_count))
                out.add(INFO, gi + (str(inst.ci), inst.mig_uuid) + placement, 1)
                # Families keeps the first sample per label set, i.e. one per GI.
                out.put(_GAUGES, gi, _memory_values(inst) + _activity_values(inst.activity))
            out.add_each(FREE_CAPACITY, ids, sorted(gpu.mig_free_capacity.items()))
        return out
