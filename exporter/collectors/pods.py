"""Per-pod series (gpushare_pod_*, gpushare_namespace_*): shares of each device and accounting.

Exported for the GPUs on which a Kubernetes pod has been seen (by its processes or by a
kubelet allocation), each with its unattributed row (namespace "" and pod "") so the rows of
a device add up to the device's value. Rules: exporter.podshare (shares) and
exporter.accounting (counters); docs/kubernetes.md explains them.

The collector integrates each new snapshot once, when it is collected (the poller collects
once per poll); collecting the same snapshot again exports the same values.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.metrics_core import Metric

from exporter.accounting import Accounting
from exporter.collectors.base import Families, SnapshotCollector, Spec, gi_label, gpu_labels
from exporter.snapshot import Snapshot

POD = ("gpu", "uuid", "gi", "namespace", "pod")
NAMESPACE = ("gpu", "uuid", "namespace")

DEVICE = ("gpu", "uuid", "gi", "namespace", "pod", "container", "resource")
DEVICE_INFO = Spec(
    "gpushare_pod_device_info",
    "info",
    "The kubelet allocated this GPU (gi \"\") or MIG instance to the container (pod-resources API); always 1.",
    DEVICE,
)
DEVICE_REPLICAS = Spec(
    "gpushare_pod_device_replicas",
    "gauge",
    "Device ids of this device the container holds (replicas of a time-sliced or MPS-shared GPU; 1 otherwise).",
    DEVICE,
)
MEMORY_USED = Spec("gpushare_pod_memory_used_bytes", "gauge",
                   "Device memory used by the pod's processes on this GPU or MIG instance (pod \"\": the rest).",
                   POD, "bytes")
SM_SHARE = Spec("gpushare_pod_sm_share_ratio", "gauge",
                "Share of the physical GPU's SM time the pod used over the last poll interval (pod \"\": unattributed).",
                POD, "ratio")
MEMORY_BYTE_SECONDS = Spec("gpushare_pod_memory_byte_seconds_total", "counter",
                           "Integral of the pod's device memory over time.", POD, "byte_seconds")
SM_SECONDS = Spec("gpushare_pod_sm_seconds_total", "counter",
                  "Integral of the pod's SM share of the physical GPU over time.", POD, "seconds")
ENERGY = Spec("gpushare_pod_energy_joules_total", "counter",
              "GPU energy booked to the pod by its SM share (pod \"\": idle and unattributed energy).", POD, "joules")
NS_MEMORY_BYTE_SECONDS = Spec("gpushare_namespace_memory_byte_seconds_total", "counter",
                              "Integral of the namespace's pods' device memory over time, on this GPU.", NAMESPACE,
                              "byte_seconds")
NS_SM_SECONDS = Spec("gpushare_namespace_sm_seconds_total", "counter",
                     "Integral of the namespace's pods' SM share over time, on this GPU.", NAMESPACE, "seconds")
NS_ENERGY = Spec("gpushare_namespace_energy_joules_total", "counter",
                 "GPU energy booked to the namespace's pods by SM share, on this GPU.", NAMESPACE, "joules")


class PodCollector(SnapshotCollector):
    """Exports the per-pod and per-namespace families listed in docs/metrics.md."""

    name = "pod"
    section = "process"  # the shares come from the process lists

    def __init__(self, source, accounting: Accounting | None = None) -> None:
        super().__init__(source)
        self.accounting = accounting or Accounting()

    def families(self, snapshot: Snapshot) -> Iterable[Metric]:
        accounting = self.accounting
        accounting.observe(snapshot)
        out = Families()
        for device in snapshot.pod_devices:
            labels = gpu_labels(device.gpu_index, device.uuid) + (
                gi_label(device.gi), device.namespace, device.pod, device.container, device.resource)
            out.add(DEVICE_INFO, labels, 1)
            out.add(DEVICE_REPLICAS, labels, device.count)
        shown = accounting.pod_gpus
        for row in accounting.shares:
            if row.uuid in shown:
                labels = gpu_labels(row.gpu, row.uuid) + (gi_label(row.gi), row.namespace, row.pod)
                out.add(MEMORY_USED, labels, row.memory_bytes)
                out.add(SM_SHARE, labels, row.sm_share)
        for (index, uuid, gi, namespace, pod), totals in sorted(accounting.rows.items(), key=_row_order):
            if uuid in shown:
                labels = gpu_labels(index, uuid) + (gi_label(gi), namespace, pod)
                out.add(MEMORY_BYTE_SECONDS, labels, totals.memory_byte_seconds)
                out.add(SM_SECONDS, labels, totals.sm_seconds)
                out.add(ENERGY, labels, totals.energy_joules)
        for (index, uuid, namespace), totals in sorted(accounting.namespaces.items()):
            if uuid in shown:
                labels = gpu_labels(index, uuid) + (namespace,)
                out.add(NS_MEMORY_BYTE_SECONDS, labels, totals.memory_byte_seconds)
                out.add(NS_SM_SECONDS, labels, totals.sm_seconds)
                out.add(NS_ENERGY, labels, totals.energy_joules)
        return out


def _row_order(item):
    (index, uuid, gi, namespace, pod), _ = item
    return (index, -1 if gi is None else gi, namespace, pod)
