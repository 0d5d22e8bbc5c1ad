"""Writes metric families in the Prometheus text format (0.0.4) and OpenMetrics 1.0.

The bytes are the same as prometheus_client's ``generate_latest`` of each format; only the
work differs. The library checks and escapes every label *name* of every sample and formats
through ``str.format``; it was the largest cost of a poll (docs/performance.md, F2). Our
metric and label names are fixed at import and valid, so a name is checked once per process
and only label values are escaped, and only when they hold a backslash, quote or newline.

Anything outside that simple case (a name that needs escaping, exemplars, native
histograms, OpenMetrics-only samples in the text format) goes to prometheus_client's own
encoder for the whole exposition, so the output is always what the library would write.

The poller's families come lean (exporter.collectors.base.Family: a ``spec`` and ``rows``, a
``{label values: float}`` map): their header and sample-line template are made once per spec
and each series is one ``%`` of that template, with no Sample, label dict or per-sample name
check. prometheus_client families (anything that is a ``Metric``) may be mixed in.
"""

from __future__ import annotations

import math
import re
from array import array
from operator import itemgetter
from typing import Callable, Iterable, Sequence

from prometheus_client.exposition import generate_latest as _library_text
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as _library_openmetrics

# Names written as they are. prometheus_client rewrites anything else: a colon in an
# OpenMetrics sample name, a label name starting with "__" (those go to the library).
_PLAIN_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PLAIN_SAMPLE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_PLAIN_LABEL_NAME = re.compile(r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*")
# The text format has no info/stateset/... types; prometheus_client maps them so.
_TEXT_TYPE = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_TEXT_NAME_SUFFIX = {"counter": "_total", "info": "_info"}
# Samples the text format moves into gauges of their own (prometheus_client's behaviour).
_OPENMETRICS_ONLY_SUFFIXES = ("_created", "_gsum", "_gcount")
# Names already checked, per pattern, so each is matched once per process. Bounded: names
# come from the code, not from the data (label values do, and are never cached).
_checked: dict[re.Pattern, set[str]] = {
    _PLAIN_METRIC_NAME: set(), _PLAIN_SAMPLE_NAME: set(), _PLAIN_LABEL_NAME: set()}
_CHECKED_LIMIT = 10_000
_plain_labels = _checked[_PLAIN_LABEL_NAME]
# Label names in a sample's order -> how to write its label block (see _label_plan).
_label_plans: dict[tuple[str, ...], tuple] = {}
# Spec of a lean family -> how to write it (see _series_plan); bounded like the names.
_series_plans: dict[object, tuple] = {}
_plans_by_id: dict[int, tuple] = {}  # id(spec) -> (spec, its plan): the same plans, found faster
_NEG_INF = -math.inf
_EXPONENT_FROM = 1e6  # from here up (or not finite) Go's formatting differs from repr's: see go_float
# A value -> its text and newline, shared by every family; cleared when full (values of
# counters and timestamps are new each poll).
_value_lines: dict[float, str] = {}
_VALUES_KEPT = 20_000


class _NotSimple(Exception):
    """The families need something only the library's encoder does."""


class _Replay:
    """Registry stand-in for the library's encoders (they only call collect())."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


def go_float(value: float) -> str:
    """A sample value as Go prints it (what Prometheus writes): +Inf, NaN, 1e+06 style exponents."""
    d = float(value)
    if d - d != 0.0:  # inf - inf and nan - nan are nan: only those leave the common path
        return "+Inf" if d == math.inf else "-Inf" if d == -math.inf else "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to an exponent sooner than Python's repr
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _check_name(name: str, pattern: re.Pattern) -> None:
    checked = _checked[pattern]
    if name not in checked:
        if pattern.fullmatch(name) is None:
            raise _NotSimple(name)
        if len(checked) < _CHECKED_LIMIT:
            checked.add(name)


def _label_plan(keys: tuple[str, ...]) -> tuple[Callable, str, bool]:
    """(getter of the values in sorted-name order, %-template of the block, one label?) for
    samples whose labels have these names in this order; each name is checked here, once."""
    for key in keys:
        if key not in _plain_labels:
            _check_name(key, _PLAIN_LABEL_NAME)
    order = sorted(keys)
    # Checked names hold only [a-zA-Z0-9_], so no "%" reaches the template but the slots.
    template = "{" + ",".join(f'{key}="%s"' for key in order) + "}"
    plan = (itemgetter(*order), template, len(order) == 1)
    if len(_label_plans) < _CHECKED_LIMIT:
        _label_plans[keys] = plan
    return plan


def _label_block(labels: dict[str, str]) -> str:
    # Every sample of a family has the same label names: the sorting, the name checks and the
    # formatting plan are done once per set of names, not once per sample (the block is the
    # largest cost of an encode on a node with thousands of series).
    if not labels:
        return ""
    keys = tuple(labels)
    plan = _label_plans.get(keys) or _label_plan(keys)
    getter, template, single = plan
    values = (getter(labels),) if single else getter(labels)
    try:
        joined = "".join(values)
    except TypeError:  # a value that is not a str: the library's encoder decides
        raise _NotSimple(keys) from None
    if "\\" in joined or "\n" in joined or '"' in joined:
        values = tuple([_escape_value(value) for value in values])
    return template % values


def _series_plan(spec) -> tuple:
    """(text header, OpenMetrics header, line-prefix template, label reorder, prefixes, last) of a
    lean family.

    A header is None where that format needs the library's encoder (a name it would rewrite).
    The template takes the label values in sorted-name order and gives a series' line up to its
    value; ``prefixes`` keeps each label set's prefix from poll to poll, ``last`` the family's
    previous lines with what they were written from (see _write_series)."""
    # Found by the spec's identity first: a Spec's hash is the dataclass's, made in Python over
    # its fields, and an exposition looks up every family's plan.
    entry = _plans_by_id.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    plan = _series_plans.get(spec)
    if plan is not None:
        if len(_plans_by_id) < _CHECKED_LIMIT:
            _plans_by_id[id(spec)] = (spec, plan)  # holding the spec keeps its id from being reused
        return plan
    metric = spec.prototype()  # the names, type, help and unit the library would write
    kind, name, sample = metric.type, metric.name, spec.name
    try:
        for key in spec.labels:
            _check_name(key, _PLAIN_LABEL_NAME)
    except _NotSimple:
        plan = (None, None, "", None, {}, [None])
    else:
        text_head = om_head = None
        shown = name + _TEXT_NAME_SUFFIX.get(kind, "")
        if _PLAIN_METRIC_NAME.fullmatch(shown) and _PLAIN_METRIC_NAME.fullmatch(sample) and not sample.endswith(
                _OPENMETRICS_ONLY_SUFFIXES):
            doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
            text_head = f"# HELP {shown} {doc}\n# TYPE {shown} {_TEXT_TYPE.get(kind, kind)}\n"
        if _PLAIN_METRIC_NAME.fullmatch(name) and _PLAIN_SAMPLE_NAME.fullmatch(sample):
            om_head = f"# HELP {name} {_escape_value(metric.documentation)}\n# TYPE {name} {kind}\n"
            if metric.unit:
                om_head += f"# UNIT {name} {metric.unit}\n"
        order = sorted(range(len(spec.labels)), key=spec.labels.__getitem__)
        block = ",".join(f'{spec.labels[i]}="%s"' for i in order)
        # Checked names hold only [a-zA-Z0-9_], so no "%" reaches the template but the slots.
        template = f"{sample}{{{block}}} " if block else f"{sample} "
        reorder = None if order == sorted(order) else itemgetter(*order)
        plan = (text_head, om_head, template, reorder, {}, [None])
    if len(_series_plans) < _CHECKED_LIMIT:
        _series_plans[spec] = plan
        _plans_by_id[id(spec)] = (spec, plan)
    return plan


def _write_series(family, plan: tuple, append: Callable[[str], None]) -> None:
    """The sample lines of a lean family (the same in both formats), as prefix and value pieces.

    Both pieces are looked up, not formatted: a series' labels, and most of its values (a
    memory total, a limit, 1.0 of an info), are the same poll after poll, and formatting them
    (a ten-slot ``%`` and Go's float text) was two thirds of an encode."""
    rows = family.rows
    # Most families of a node are the same as in the previous poll (identities, limits, idle
    # engines, error counters): their lines are written again as one piece. "The same" is
    # exact: the same label values in the same order (tuples of str compare exactly) and the
    # same bits of every value (an array of doubles), so 0.0 and -0.0, equal as floats, differ.
    # The previous lines are one (keys, bits, text) tuple, read and replaced in one step: a
    # scrape's encode on the event loop may run beside the poll thread's.
    memo = plan[5]
    last = memo[0]
    keys = tuple(rows)
    try:
        bits = array("d", rows.values()).tobytes()
    except (TypeError, OverflowError):  # not all floats: written one by one, not remembered
        bits = None
    if last is not None and bits is not None and bits == last[1] and keys == last[0]:
        append(last[2])
        return
    prefixes = plan[4]
    if len(prefixes) > 2 * len(rows) + 256:  # mostly series that went away (processes come and go)
        prefixes.clear()
    prefix_of, line_of, copysign = prefixes.get, _value_lines.get, math.copysign
    lines: list[str] = []
    add = lines.append
    for values, value in rows.items():
        add(prefix_of(values) or _prefix(plan, values))
        # 0.0 cannot be remembered (-0.0 is the same key) and is about half the values of a
        # node (error counters, idle engines): it is written here, without a call.
        add(line_of(value) or ("0.0\n" if value == 0.0 and copysign(1.0, value) > 0 else _value_line(value)))
    text = "".join(lines)
    if bits is not None:
        memo[0] = (keys, bits, text)
    append(text)


def _prefix(plan: tuple, values: tuple[str, ...]) -> str:
    template, reorder, prefixes = plan[2], plan[3], plan[4]
    ordered = reorder(values) if reorder is not None else values
    joined = "".join(ordered)
    if "\\" in joined or "\n" in joined or '"' in joined:
        ordered = tuple([_escape_value(value) for value in ordered])
    prefix = prefixes[values] = template % ordered
    return prefix


def _value_line(value: float) -> str:
    """A value's text and the newline; remembered except for 0.0 (the same key as -0.0) and NaN."""
    # Values are floats (Families.add makes them so): repr is Go's text for finite ones below 1e6.
    line = (repr(value) if _NEG_INF < value < _EXPONENT_FROM else go_float(value)) + "\n"
    if value and value == value:
        if len(_value_lines) >= _VALUES_KEPT:
            _value_lines.clear()
        _value_lines[value] = line
    return line


def _write_lean(family, header: int, append) -> None:
    """A lean family's header (``header``: 0 text, 1 OpenMetrics) and series; _NotSimple where
    that format needs the library (a name or unit it would rewrite)."""
    plan = _series_plan(family.spec)
    if plan[header] is None:
        raise _NotSimple(family.spec.name)
    append(plan[header])
    _write_series(family, plan, append)


def _text(families: Sequence[Metric]) -> str:
    out: list[str] = []
    append = out.append
    for metric in families:
        if not isinstance(metric, Metric):  # a lean family
            _write_lean(metric, 0, append)
            continue
        kind = metric.type
        shown = metric.name + _TEXT_NAME_SUFFIX.get(kind, "")
        _check_name(shown, _PLAIN_METRIC_NAME)
        doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        append(f"# HELP {shown} {doc}\n# TYPE {shown} {_TEXT_TYPE.get(kind, kind)}\n")
        checked = None  # a family's samples mostly share one name: check each new one only
        for name, labels, value, timestamp, exemplar, native in metric.samples:
            if native is not None:
                raise _NotSimple(name)
            if name != checked:
                if name.endswith(_OPENMETRICS_ONLY_SUFFIXES):
                    raise _NotSimple(name)
                _check_name(name, _PLAIN_METRIC_NAME)
                checked = name
            stamp = "" if timestamp is None else f" {int(float(timestamp) * 1000):d}"
            append(f"{name}{_label_block(labels)} {go_float(value)}{stamp}\n")
    return "".join(out)


def _openmetrics(families: Sequence[Metric]) -> str:
    out: list[str] = []
    append = out.append
    for metric in families:
        if not isinstance(metric, Metric):  # a lean family
            _write_lean(metric, 1, append)
            continue
        name = metric.name
        _check_name(name, _PLAIN_METRIC_NAME)
        doc = metric.documentation
        if "\\" in doc or "\n" in doc or '"' in doc:
            doc = _escape_value(doc)
        append(f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n")
        if metric.unit:
            append(f"# UNIT {name} {metric.unit}\n")
        checked = None  # a family's samples mostly share one name: check each new one only
        for sample_name, labels, value, timestamp, exemplar, native in metric.samples:
            if exemplar is not None or native is not None:
                raise _NotSimple(sample_name)
            if sample_name != checked:
                _check_name(sample_name, _PLAIN_SAMPLE_NAME)
                checked = sample_name
            stamp = "" if timestamp is None else f" {timestamp}"
            shown = "" if value is None else go_float(value)
            append(f"{sample_name}{_label_block(labels)} {shown}{stamp}\n")
    append("# EOF\n")
    return "".join(out)


def text(families: Iterable[Metric]) -> bytes:
    """The Prometheus text format 0.0.4 of ``families``, as prometheus_client writes it."""
    families = tuple(families)
    try:
        return _text(families).encode("utf-8")
    except _NotSimple:
        return _library_text(_Replay(_metrics(families)))


def openmetrics(families: Iterable[Metric]) -> bytes:
    """OpenMetrics 1.0 text of ``families`` (ending in ``# EOF``), as prometheus_client writes it."""
    families = tuple(families)
    try:
        return _openmetrics(families).encode("utf-8")
    except _NotSimple:
        return _library_openmetrics(_Replay(_metrics(families)))


def _metrics(families: Sequence) -> list[Metric]:
    """The families as prometheus_client ones, for the library's encoders."""
    return [family if isinstance(family, Metric) else family.metric() for family in families]
