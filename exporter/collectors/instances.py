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
from operator import itemgetter
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


class GroupPlans:
    """:func:`group`'s answer for one device's items, worked out once per set of series keys.

    Which series a device's processes make, under which labels and with which members, depends
    only on a few fields of each process that stay put for its life (pid, gi, name, identity,
    replica...) and on the device; a poll mostly sees the processes of the poll before. So the
    answer is kept as label values and member positions, keyed by those fields read in C
    (``key``), and a poll that sees the same keys in the same order reuses it: the same series,
    labels and members as group() gives, without working out labels, sorting or grouping
    again. ``fields(key, context)`` gives group() an item's Fields from its key and the
    device's ``context`` (the GPU's sharing mode for processes); ``order(key)``, when given,
    sorts the items before they are grouped."""

    KEPT = 256  # plans kept (about one per device and process set); all are forgotten when full

    def __init__(self, key: Callable[[T], tuple], fields: Callable[[tuple, object], Fields], mode: str,
                 order: Callable[[tuple], object] | None = None) -> None:
        self._key, self._fields, self._mode, self._order = key, fields, mode, order
        self._plans: dict[tuple, tuple] = {}

    def series(self, items: Sequence[T], ids: tuple[str, str], context: object = None,
               ) -> list[tuple[tuple[str, ...], tuple[T, ...]]]:
        """(label values, members) per series of ``items`` on the device ``ids``, as group()."""
        if not items:
            self._check_mode()
            return []
        entries, _ = self._plan_of(items, ids, context)
        return [((labels, (pick(items),)) if single else (labels, pick(items))) for labels, pick, single in entries]

    def singles(self, items: Sequence[T], ids: tuple[str, str], context: object = None,
                ) -> tuple[tuple[tuple[str, ...], ...], tuple[T, ...]] | None:
        """(every series' label values, its one member) when each series of ``items`` has one
        member (pid mode, and pod mode outside Kubernetes), in series() order; else None."""
        if not items:
            self._check_mode()
            return (), ()
        _, singles = self._plan_of(items, ids, context)
        return None if singles is None else (singles[0], singles[1](items))

    def _check_mode(self) -> None:
        if self._mode not in MODES:  # as group(), at every call
            raise ValueError(f"unknown process series mode {self._mode!r}")

    def _plan_of(self, items: Sequence[T], ids: tuple[str, str], context: object) -> tuple:
        self._check_mode()
        keys = tuple(map(self._key, items))
        plan_key = (ids, context, keys)
        plan = self._plans.get(plan_key)
        if plan is None:
            plan = self._plan(keys, ids, context)
            if len(self._plans) >= self.KEPT:
                self._plans.clear()
            self._plans[plan_key] = plan
        return plan

    def _plan(self, keys: tuple, ids: tuple[str, str], context: object) -> tuple:
        """((label values, member getter, one member?) per series, (labels, getter of the members)
        when every series has one member, else None)."""
        positions = range(len(keys))
        if self._order is not None:
            order = self._order
            positions = sorted(positions, key=lambda i: order(keys[i]))
        fields = self._fields
        grouped = group(positions, ids, lambda i: fields(keys[i], context), self._mode)
        entries = tuple((labels, itemgetter(*members), len(members) == 1) for labels, members in grouped)
        singles = None
        if all(len(members) == 1 for _, members in grouped):
            firsts = [members[0] for _, members in grouped]
            pick = itemgetter(*firsts)
            singles = (tuple(labels for labels, _ in grouped),
                       pick if len(firsts) > 1 else (lambda items, one=pick: (one(items),)))
        return entries, singles


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
