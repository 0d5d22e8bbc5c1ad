"""Per-pod series (gpushare_pod_*, gpushare_namespace_*): shares of each device and accounting.

Exported for the GPUs on which a Kubernetes pod has been seen (by its processes or by a
kubelet allocation), each with its unattributed row (namespace "" and pod "") so the rows of
a device add up to the device's value. Rules: exporter.podshare (shares) and
exporter.accounting (counters); docs/kubernetes.md explains them.

The collector integrates each new snapshot once, when it is collected (the poller collects
once per poll); collecting the same snapshot again exports the same values.
"""

from __future__ import annotations

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
        self._labels: dict[tuple, tuple[str, ...]] = {}  # row key -> its label values, kept across polls

    def families(self, snapshot: Snapshot) -> Families:
        accounting = self.accounting
        accounting.observe(snapshot)
        out = Families()
        for device in snapshot.pod_devices:
            labels = gpu_labels(device.gpu_index, device.uuid) + (
                gi_label(device.gi), device.namespace, device.pod, device.container, device.resource)
            out.add(DEVICE_INFO, labels, 1)
        shown = accounting.pod_gpus
        if not shown:
            return out
        # Hundreds of rows per poll on a busy node, each unique by construction: written into
        # the families' rows directly (Families.add checks for repeats, which cannot happen here).
        memory, share, byte_seconds, sm_seconds, joules, ns_byte_seconds, ns_sm_seconds, ns_joules = (
            out.rows(spec) for spec in (MEMORY_USED, SM_SHARE, MEMORY_BYTE_SECONDS, SM_SECONDS, ENERGY,
                                        NS_MEMORY_BYTE_SECONDS, NS_SM_SECONDS, NS_ENERGY))
        labels_of = self._labels
        for row in accounting.shares:
            if row.uuid in shown:
                labels = labels_of.get(row.key)
                if labels is None:
                    labels = labels_of[row.key] = _row_labels(row.key)
                if row.memory_bytes is not None:
                    memory[labels] = float(row.memory_bytes)
                if row.sm_share is not None:
                    share[labels] = float(row.sm_share)
        # Rows in the order accounting first saw them: deterministic for a given history.
        for key, totals in accounting.rows.items():
            if key[1] in shown:
                labels = labels_of.get(key)
                if labels is None:
                    labels = labels_of[key] = _row_labels(key)
                for rows, value in ((byte_seconds, totals.memory_byte_seconds), (sm_seconds, totals.sm_seconds),
                                    (joules, totals.energy_joules)):
                    if value is not None:  # never known yet: absent, not 0
                        rows[labels] = float(value)
        if len(labels_of) > 2 * len(accounting.rows) + 64:  # rows expired: forget their labels
            self._labels = {k: v for k, v in labels_of.items() if k in accounting.rows}
        for (index, uuid, namespace), totals in accounting.namespaces.items():
            if uuid in shown:
                labels = (str(index), uuid, namespace)
                for rows, value in ((ns_byte_seconds, totals.memory_byte_seconds),
                                    (ns_sm_seconds, totals.sm_seconds), (ns_joules, totals.energy_joules)):
                    if value is not None:
                        rows[labels] = float(value)
        return out


def _row_labels(key) -> tuple[str, str, str, str, str]:
    index, uuid, gi, namespace, pod = key
    return (str(index), uuid, gi_label(gi), namespace, pod)
