"""Shared pieces of the snapshot collectors: metric specs and a family builder.

Every collector reads one :class:`~exporter.snapshot.Snapshot` and turns it into
prometheus_client metric families. The builder here enforces the rules that all of
them share: ``None`` is skipped (never exported as 0), a label set is exported at
most once per family (first value wins), and families without samples are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from exporter.snapshot import Snapshot

_new_tuple = tuple.__new__

SnapshotSource = Callable[[], "Snapshot | None"]


@dataclass(frozen=True)
class Spec:
    """One metric family as exposed in the text format.

    ``name`` is the exposed name: counters end in ``_total`` and info metrics in
    ``_info`` exactly as a scrape shows them; ``unit`` is the OpenMetrics unit.
    """

    name: str
    kind: str  # "gauge" | "counter" | "info"
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""

    def new_family(self) -> Metric:
        """An empty prometheus_client family for this spec."""
        # A copy of one checked prototype per spec: the family constructors validate the name
        # and unit again every time, and every poll makes each family anew.
        prototype = _PROTOTYPES.get(self)
        if prototype is None:
            prototype = _PROTOTYPES[self] = self._build_family()
        family = object.__new__(type(prototype))
        family.__dict__.update(prototype.__dict__)
        family.samples = []
        return family

    def _build_family(self) -> Metric:
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=self.labels, unit=self.unit)
        if self.kind == "counter":
            # CounterMetricFamily strips the "_total" and adds it back on the sample.
            return CounterMetricFamily(self.name, self.help, labels=self.labels, unit=self.unit)
        if self.kind == "info":
            return InfoMetricFamily(self.name[: -len("_info")], self.help, labels=self.labels)
        raise ValueError(f"unknown metric kind {self.kind!r}")


# Spec -> its family with no samples (see Spec.new_family); bounded: specs are made by the code.
_PROTOTYPES: dict[Spec, Metric] = {}


class Families:
    """Collects samples per spec, in first-use order."""

    def __init__(self) -> None:
        # name -> (family, label sets seen, the family's sample list, label names, info?)
        self._families: dict[str, tuple[Metric, set, list, tuple[str, ...], bool]] = {}

    def add(self, spec: Spec, label_values: Iterable[object], value: float | bool | None) -> None:
        """Add one sample; ``None`` values and repeated label sets are ignored."""
        if value is None:
            return
        values = label_values
        try:
            if type(values) is not tuple:
                raise TypeError
            "".join(values)  # raises unless every value is already a str: the common case, in C
        except TypeError:
            values = tuple([v if type(v) is str else "" if v is None else str(v) for v in label_values])
        name = spec.name
        entry = self._families.get(name)
        if entry is None:
            family = spec.new_family()
            # The spec's fields, read once per family instead of once per sample: this runs
            # for every series of every poll (about 1,900 on the 8-GPU mixed node).
            entry = (family, set(), family.samples, spec.labels, spec.kind == "info")
            self._families[name] = entry
        _, seen, samples, labels, info = entry
        if len(values) != len(labels):
            raise ValueError(f"{name}: {len(values)} label values for labels {labels}")
        if values in seen:
            return
        seen.add(values)
        # The sample exactly as the family's add_metric() would make it (spec.name is the exposed
        # name: counters already end in _total, info in _info), built directly, and through
        # tuple.__new__ rather than the namedtuple's Python-level __new__.
        samples.append(_new_tuple(Sample, (name, dict(zip(labels, values)), 1.0 if info else float(value),
                                           None, None, None)))

    def __iter__(self) -> Iterator[Metric]:
        return (entry[0] for entry in self._families.values() if entry[2])


class SnapshotCollector:
    """Base of the collectors that turn the current snapshot into families.

    ``name`` is the value of the ``collector`` label in the self-metrics and
    ``section`` the key of :attr:`Snapshot.section_ok` whose failure marks this
    collector unsuccessful.
    """

    name = ""
    section: str | None = None

    def __init__(self, source: SnapshotSource) -> None:
        self._source = source

    def collect(self) -> list[Metric]:
        """prometheus_client entry point: families for the current snapshot."""
        snapshot = self._source()
        if snapshot is None:
            return []
        return list(self.families(snapshot))

    def section_ok(self) -> bool:
        """False when there is no snapshot or the backend marked our section failed."""
        snapshot = self._source()
        if snapshot is None:
            return False
        if self.section is None:
            return True
        return bool(snapshot.section_ok.get(self.section, True))

    def families(self, snapshot: Snapshot) -> Iterable[Metric]:  # pragma: no cover - abstract
        raise NotImplementedError


def gpu_labels(index: int, uuid: str) -> tuple[str, str]:
    """The (gpu, uuid) label values every per-GPU series starts with."""
    return (str(index), uuid)


def gi_label(gi: int | None) -> str:
    """GPU-instance label value: the id, or "" outside MIG."""
    return "" if gi is None else str(gi)
