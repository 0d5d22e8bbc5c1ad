"""Shared pieces of the snapshot collectors: metric specs and a family builder.

Every collector reads one :class:`~exporter.snapshot.Snapshot` and writes its series into a
:class:`Families`. The builder enforces the rules that all of them share: ``None`` is skipped
(never exported as 0), a label set is exported at most once per family (first value wins),
and families without samples are dropped.

A poll's series stay in a lean form, a :class:`Family` per spec holding ``{label values:
value}``, which exporter.encode writes straight out: building the ~1,900 prometheus_client
``Sample`` objects (each with a label dict) a poll of an 8-GPU node makes was most of its
collect time (docs/performance.md, "Collect path redesign"). ``collect()`` still gives
prometheus_client families for anything that wants them (a registry, the tests).
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
_new_object = object.__new__

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
        # and unit again every time.
        prototype = self.prototype()
        family = object.__new__(type(prototype))
        family.__dict__.update(prototype.__dict__)
        family.samples = []
        return family

    def prototype(self) -> Metric:
        """The prometheus_client family of this spec with no samples; shared, do not modify.

        Its ``name``, ``type``, ``documentation`` and ``unit`` are what the headers of a scrape
        show (a counter's name without ``_total``, an info's without ``_info``)."""
        prototype = _PROTOTYPES.get(self)
        if prototype is None:
            prototype = _PROTOTYPES[self] = self._build_family()
        return prototype

    def _build_family(self) -> Metric:
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=self.labels, unit=self.unit)
        if self.kind == "counter":
            # CounterMetricFamily strips the "_total" and adds it back on the sample.
            return CounterMetricFamily(self.name, self.help, labels=self.labels, unit=self.unit)
        if self.kind == "info":
            return InfoMetricFamily(self.name[: -len("_info")], self.help, labels=self.labels)
        raise ValueError(f"unknown metric kind {self.kind!r}")


# Spec -> its family with no samples (see Spec.prototype); bounded: specs are made by the code.
_PROTOTYPES: dict[Spec, Metric] = {}


class Family:
    """One spec's series of a poll: ``rows`` maps label values (``str``s in ``spec.labels``
    order) to a float, in first-added order. Every sample is named ``spec.name``."""

    __slots__ = ("spec", "rows")

    def __init__(self, spec: Spec, rows: dict[tuple[str, ...], float]) -> None:
        self.spec = spec
        self.rows = rows

    def metric(self) -> Metric:
        """The same family as a prometheus_client one (for registries, tests, the library encoder)."""
        spec = self.spec
        family = spec.new_family()
        name, labels = spec.name, spec.labels
        family.samples = [_new_tuple(Sample, (name, dict(zip(labels, values)), value, None, None, None))
                          for values, value in self.rows.items()]
        return family

    def value(self, labels: dict[str, str] | None = None) -> float | None:
        """The value of the series with these labels (all of them), None when absent."""
        labels = labels or {}
        if set(labels) != set(self.spec.labels):
            return None
        return self.rows.get(tuple(labels[name] for name in self.spec.labels))

    def __repr__(self) -> str:
        return f"Family({self.spec.name!r}, {len(self.rows)} series)"


class Block:
    """Specs whose series a collector writes together for one label set, in this order (see
    :meth:`Families.put`). Gauges and counters only: an info's value is not the one given."""

    __slots__ = ("specs", "width")

    def __init__(self, *specs: Spec) -> None:
        if not specs or len({len(spec.labels) for spec in specs}) != 1 or any(s.kind == "info" for s in specs):
            raise ValueError("a block is one or more non-info specs with the same number of labels")
        self.specs = specs
        self.width = len(specs[0].labels)

    def __repr__(self) -> str:
        return f"Block({', '.join(spec.name for spec in self.specs)})"


class Families:
    """Collects series per spec, in first-use order."""

    def __init__(self) -> None:
        # name -> (family, its rows, number of labels, info?)
        self._families: dict[str, tuple[Family, dict, int, bool]] = {}
        self._blocks: dict[Block, list] = {}  # block -> its families' rows (see put)

    def _entry(self, spec: Spec) -> tuple[Family, dict, int, bool]:
        entry = self._families.get(spec.name)
        if entry is None:
            family = Family(spec, {})
            entry = self._families[spec.name] = (family, family.rows, len(spec.labels), spec.kind == "info")
        return entry

    def add(self, spec: Spec, label_values: Iterable[object], value: float | bool | None) -> None:
        """Add one sample; ``None`` values and repeated label sets are ignored."""
        if value is None:
            return
        values = label_values
        try:  # _label_tuple inline: a call less per series
            if type(values) is not tuple:
                raise TypeError
            "".join(values)  # raises unless every value is already a str: the common case, in C
        except TypeError:
            values = _label_tuple(label_values)
        # This runs for most series of every poll (about 1,900 on the 8-GPU mixed node): one
        # dict look-up for the family, one for the label set, and the value kept as a float.
        _, rows, width, info = self._families.get(spec.name) or self._entry(spec)
        if len(values) != width:
            raise ValueError(f"{spec.name}: {len(values)} label values for labels {spec.labels}")
        if values not in rows:
            rows[values] = 1.0 if info else float(value)

    def add_all(self, label_values: Iterable[object], pairs: Iterable[tuple[Spec, float | bool | None]]) -> None:
        """``add(spec, label_values, value)`` for each (spec, value) in order, the label values
        checked once: a GPU's dozens of series share their (gpu, uuid)."""
        values = _label_tuple(label_values)  # once per label set: a call costs nothing here
        families, width = self._families, len(values)
        for spec, value in pairs:
            if value is None:
                continue
            _, rows, expected, info = families.get(spec.name) or self._entry(spec)
            if width != expected:
                raise ValueError(f"{spec.name}: {width} label values for labels {spec.labels}")
            if values not in rows:
                rows[values] = 1.0 if info else float(value)

    def add_each(self, spec: Spec, label_values: Iterable[object],
                 items: Iterable[tuple[object, float | bool | None]]) -> None:
        """``add(spec, label_values + (key,), value)`` for each (key, value) in order: the series
        of a per-GPU map (clocks, clock events, ECC and XID counts, per-link errors)."""
        values = _label_tuple(label_values)
        rows = None
        for key, value in items:
            if value is None:
                continue
            if rows is None:
                _, rows, width, info = self._families.get(spec.name) or self._entry(spec)
                if len(values) + 1 != width:
                    raise ValueError(f"{spec.name}: {len(values) + 1} label values for labels {spec.labels}")
            labels = values + (key if type(key) is str else "" if key is None else str(key),)
            if labels not in rows:
                rows[labels] = 1.0 if info else float(value)

    def put(self, block: "Block", label_values: tuple[str, ...], values: tuple[float | bool | None, ...]) -> None:
        """``add_all(label_values, zip(block.specs, values))``, the same series in the same order,
        each family looked up once per poll instead of once per series: a GPU's or a MIG
        instance's dozen-odd gauges, ``values`` taken in one step (``operator.attrgetter``) from
        the snapshot record."""
        label_values = _label_tuple(label_values)
        if len(label_values) != block.width:
            spec = block.specs[0]
            raise ValueError(f"{spec.name}: {len(label_values)} label values for labels {spec.labels}")
        rows_of = self._blocks.get(block)
        if rows_of is None:  # this block's families as far as they exist yet (None: not yet used)
            families = self._families
            rows_of = self._blocks[block] = [entry[1] if (entry := families.get(spec.name)) else None
                                             for spec in block.specs]
        # Per series: a None test, a membership test and a store, nothing else. A family is made
        # when its first value arrives, as add_all makes it, so families keep first-use order.
        index = 0
        for rows, value in zip(rows_of, values):
            if value is not None:
                if rows is None:
                    # _entry inlined, Family.__init__ too (a block holds no info; block.width
                    # labels): every poll makes its families anew, and a DCGM poll of a one-GPU
                    # MIG node makes 31 of its 64 here (the activity gauges: 16 of them).
                    spec = block.specs[index]
                    entry = self._families.get(spec.name)
                    if entry is None:
                        family = _new_object(Family)
                        family.spec, family.rows = spec, (rows := {})
                        self._families[spec.name] = (family, rows, block.width, False)
                    else:
                        rows = entry[1]
                    rows_of[index] = rows
                if label_values not in rows:
                    rows[label_values] = float(value)
            index += 1

    def put_column(self, spec: Spec, labels: tuple[tuple[str, ...], ...], values: tuple[float | bool, ...]) -> None:
        """``add(spec, labels[i], values[i])`` for every i, in order, for a caller that knows the
        ``labels`` are distinct tuples of ``str`` of the right width and no value is None: one
        family's series of a GPU's NVLinks, stored in one step where none was there before."""
        if not labels:
            return
        _, rows, width, info = self._families.get(spec.name) or self._entry(spec)
        if len(labels[0]) != width or info:
            raise ValueError(f"{spec.name}: {len(labels[0])} label values for labels {spec.labels}")
        if rows.keys().isdisjoint(labels):
            rows.update(zip(labels, map(float, values)))
            return
        for label_values, value in zip(labels, values):  # first value wins, as in add
            if label_values not in rows:
                rows[label_values] = float(value)

    def rows(self, spec: Spec) -> dict[tuple[str, ...], float]:
        """The label values -> value map of ``spec``'s family, for a caller whose label sets are
        unique by construction and whose values are floats, all ``str`` label values, in
        ``spec.labels`` order (nothing is checked)."""
        return self._entry(spec)[1]

    def series(self) -> list[Family]:
        """The families with at least one series, in first-use order (what exporter.encode writes)."""
        return [entry[0] for entry in self._families.values() if entry[1]]

    def __iter__(self) -> Iterator[Metric]:
        """The non-empty families as prometheus_client families."""
        return (family.metric() for family in self.series())


def _label_tuple(label_values: Iterable[object]) -> tuple[str, ...]:
    """The label values as a tuple of ``str`` (None as "")."""
    try:
        if type(label_values) is tuple:
            "".join(label_values)  # raises unless every value is already a str: the common case, in C
            return label_values
    except TypeError:
        pass
    return tuple([v if type(v) is str else "" if v is None else str(v) for v in label_values])


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

    def collect_series(self) -> list[Family]:
        """The current snapshot's families, lean (what the poller renders)."""
        snapshot = self._source()
        if snapshot is None:
            return []
        return self.families(snapshot).series()

    def collect(self) -> list[Metric]:
        """prometheus_client entry point: families for the current snapshot."""
        return [family.metric() for family in self.collect_series()]

    def section_ok(self) -> bool:
        """False when there is no snapshot or the backend marked our section failed."""
        snapshot = self._source()
        if snapshot is None:
            return False
        if self.section is None:
            return True
        return bool(snapshot.section_ok.get(self.section, True))

    def families(self, snapshot: Snapshot) -> Families:  # pragma: no cover - abstract
        raise NotImplementedError


def sample_value(families: Iterable["Family | Metric"], name: str,
                 labels: dict[str, str] | None = None) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` among ``families`` (lean or
    prometheus_client), None when absent: what ``CollectorRegistry.get_sample_value`` says."""
    labels = labels or {}
    for family in families:
        if isinstance(family, Family):
            if family.spec.name == name:
                value = family.value(labels)
                if value is not None:
                    return value
            continue
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def gpu_labels(index: int, uuid: str) -> tuple[str, str]:
    """The (gpu, uuid) label values every per-GPU series starts with."""
    return (str(index), uuid)


def gi_label(gi: int | None) -> str:
    """GPU-instance label value: the id, or "" outside MIG."""
    return "" if gi is None else str(gi)
