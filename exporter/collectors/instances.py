"""What one per-process series stands for, by ``--process-series`` mode (bounded cardinality).

- ``pid``: one series per process (label ``pid``). Every process that ever ran leaves a
  series behind: a node running short jobs creates series without bound.
- ``pod`` (default): one series per (device, namespace, pod, container), the sum over the
  container's processes on that device, ``pid`` and ``process`` empty; processes outside
  Kubernetes keep one series per pid. Series come and go with containers, which the
  cluster's own metrics (kube-state-metrics, cAdvisor) already track one series each.
- ``workload``: one series per (device, workload, ``replica``), where ``replica`` is the
  process's slot among the live processes of its workload on the device (lowest free,
  reused after exit; exporter.backend.replicas). Series ever created = peak concurrency.

In every mode a series is one running instance (a process, a container, a replica slot), so
counting series per (node, uuid, gi, workload) counts instances, and max/quantiles over a
workload's series are per-instance peaks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence, TypeVar

from exporter.collectors.base import Spec

PID, POD, WORKLOAD = "pid", "pod", "workload"
MODES = (PID, POD, WORKLOAD)

T = TypeVar("T")
# The values one item contributes to its series key, in PROCESS label order after (gpu, uuid):
# (gi, pid, process, sharing, workload, namespace, pod, container, replica)
Fields = tuple[str, str, str, str, str, str, str, str, "int | None"]


def with_mode_labels(spec: Spec, mode: str) -> Spec:
    """``spec`` with the label names of ``mode`` (workload mode adds ``replica``)."""
    return replace(spec, labels=spec.labels + ("replica",)) if mode == WORKLOAD else spec


def group(items: Iterable[T], ids: tuple[str, str], fields: Callable[[T], Fields],
          mode: str) -> list[tuple[tuple[str, ...], list[T]]]:
    """(label values, members) per series, in first-seen order; ``ids`` are the (gpu, uuid) values."""
    if mode not in MODES:
        raise ValueError(f"unknown process series mode {mode!r}")
    rows = [(item, fields(item)) for item in items]
    if mode == PID or (mode == POD and not any(f[6] for _, f in rows)):
        # One series per process (every series in pid mode; pod mode on a host without pods).
        return [(ids + f[:8], [item]) for item, f in rows]
    if mode == WORKLOAD:
        rows = _fill_replicas(rows)
    series: dict[tuple[str, ...], list[T]] = {}
    for item, (gi, pid, process, sharing, workload, namespace, pod, container, replica) in rows:
        if mode == PID or (mode == POD and not pod):
            labels = (gi, pid, process, sharing, workload, namespace, pod, container)
        elif mode == POD:
            labels = (gi, "", "", sharing, workload, namespace, pod, container)
        else:
            labels = (gi, "", "", sharing, workload, "", "", "", str(replica))
        series.setdefault(ids + labels, []).append(item)
    return list(series.items())


def _fill_replicas(rows: list) -> list:
    """Items without a slot (hand-built snapshots) take the lowest slots free in their (gi, workload)."""
    if all(f[8] is not None for _, f in rows):
        return rows
    taken: dict[tuple[str, str], set[int]] = {}
    for _, f in rows:
        if f[8] is not None:
            taken.setdefault((f[0], f[4]), set()).add(f[8])
    out = []
    for item, f in sorted(rows, key=lambda r: (r[1][0], r[1][4], int(r[1][1]) if r[1][1].isdigit() else 0)):
        if f[8] is None:
            used = taken.setdefault((f[0], f[4]), set())
            slot = 0
            while slot in used:
                slot += 1
            used.add(slot)
            f = f[:8] + (slot,)
        out.append((item, f))
    return out


def total(values: Sequence[float | None]) -> float | None:
    """Sum over a series' members; None (absent) when any member's value is unknown."""
    if any(v is None for v in values):
        return None
    return float(sum(values))


def known_total(values: Sequence[float | None]) -> float | None:
    """Sum of the members' known values; None when none is known."""
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None


def share_total(values: Sequence[float | None]) -> float | None:
    """A sum of ratios capped at 1 (members of one container cannot use more than the device)."""
    value = known_total(values)
    return None if value is None else min(1.0, value)
