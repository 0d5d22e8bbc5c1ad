"""The collect path without prometheus_client objects (exporter.collectors.base.Family): the same
rules as prometheus_client families (None absent, first label set wins, empty families dropped) and
the same bytes as the library's encoders, poll after poll (the encoder remembers label prefixes and
value texts between polls)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import encode
from exporter.backend.sim import SimBackend
from exporter.collectors import GuardedCollectors
from exporter.collectors.base import Families, Family, Spec, sample_value
from exporter.poller import Poller
from tests.conftest import SCENARIOS
from tests.test_encode import Replay, assert_same_bytes, library_text, no_fallback  # noqa: F401 - a fixture


def assert_same_as_library(families) -> None:
    assert_same_bytes(list(families))


GAUGE = Spec("gpushare_lean_test_bytes", "gauge", 'help with "quotes", a \\ and\na newline', ("zeta", "alpha"),
             "bytes")
COUNTER = Spec("gpushare_lean_test_events_total", "counter", "events", ("kind",))
INFO = Spec("gpushare_lean_test_info", "info", "identity", ("model", "driver"))
BARE = Spec("gpushare_lean_test_seconds", "gauge", "no labels", (), "seconds")


def test_families_skip_none_keep_the_first_label_set_and_drop_empty_families():
    out = Families()
    out.add(GAUGE, ("a", "b"), None)
    out.add(COUNTER, ("x",), 3)
    out.add(COUNTER, ("x",), 5)  # the same label set again: the first value stays
    out.add(COUNTER, (7,), 1)  # a non-str label value is written as str
    out.add(INFO, ("H100", "580"), 42)  # an info sample is always 1
    out.add(BARE, (), True)
    assert [f.spec.name for f in out.series()] == [COUNTER.name, INFO.name, BARE.name]
    assert sample_value(out.series(), COUNTER.name, {"kind": "x"}) == 3.0
    assert sample_value(out.series(), COUNTER.name, {"kind": "7"}) == 1.0
    assert sample_value(out.series(), INFO.name, {"model": "H100", "driver": "580"}) == 1.0
    assert sample_value(out.series(), BARE.name) == 1.0
    assert sample_value(out.series(), GAUGE.name, {"zeta": "a", "alpha": "b"}) is None
    with pytest.raises(ValueError):
        out.add(COUNTER, ("x", "y"), 1)
    # The prometheus_client view holds the same samples.
    metrics = list(out)
    assert [(s.name, s.labels, s.value) for m in metrics for s in m.samples] == [
        (COUNTER.name, {"kind": "x"}, 3.0), (COUNTER.name, {"kind": "7"}, 1.0),
        (INFO.name, {"model": "H100", "driver": "580"}, 1.0), (BARE.name, {}, 1.0)]


def test_special_values_escaping_and_unsorted_labels_match_the_library(no_fallback):
    """Label names out of order, values needing escapes, and every float class, in both formats,
    twice (the second time from the encoder's remembered prefixes and value texts)."""
    out = Families()
    values = [0.0, -0.0, 1.0, 999999.9, 1e6, 1234567.0, 1e-7, 123456.789, -5e20, math.inf, -math.inf, math.nan,
              2.0**53, 1e16, 7]
    for i, value in enumerate(values):
        out.add(GAUGE, (f'v{i}"\\\n', "é ✓"), value)
        out.add(COUNTER, (str(i),), value)
    out.add(INFO, ("H100", "580.95.05"), 1)
    out.add(BARE, (), 1.5)
    for _ in range(2):
        assert_same_as_library(out.series())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8),
                          st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**60, 2**60))),
                max_size=8))
def test_any_lean_rows_match_the_library(rows):
    out = Families()
    for zeta, alpha, value in rows:
        out.add(GAUGE, (zeta, alpha), value)
    assert_same_as_library(out.series())


def test_a_name_the_library_rewrites_falls_back_for_the_whole_exposition():
    out = Families()
    out.add(Spec("gpushare:lean_colon", "gauge", "a colon", ("k",)), ("v",), 1)
    out.add(BARE, (), 2)
    assert_same_as_library(out.series())


@pytest.mark.parametrize("name,at", [("h100-mixed-node", 600), ("faults-demo", 185), ("h200-mig", 300)])
def test_poll_after_poll_the_lean_exposition_is_the_librarys(name, at, no_fallback):
    """What the poller renders, for several polls in a row, equals the library's encoding of the
    same families as prometheus_client objects."""
    backend = SimBackend(SCENARIOS / f"{name}.yaml")
    poller = Poller(backend, interval=1.0)
    backend.open()
    try:
        for t in range(at - 3, at + 1):
            backend.step_to(t)
            poller.poll_once()
            families = poller.exposition._families  # what this poll rendered
            assert families and all(isinstance(f, Family) for f in families)
            assert poller.exposition.text == library_text(Replay(families))
            assert_same_as_library(families)
    finally:
        backend.close()


def test_a_failing_collector_keeps_the_others_and_reads_back_per_name_and_labels():
    class Exploding:
        name = "exploding"

        def collect_series(self):
            raise RuntimeError("boom")

        def section_ok(self):
            return True

    class Working:
        name = "working"

        def collect_series(self):
            out = Families()
            out.add(COUNTER, ("x",), 2)
            return out.series()

        def collect(self):
            return [f.metric() for f in self.collect_series()]

        def section_ok(self):
            return True

    guard = GuardedCollectors([Exploding(), Working()])
    assert guard.get_sample_value(COUNTER.name, {"kind": "x"}) == 2.0
    assert guard.get_sample_value("gpushare_exporter_collector_success", {"collector": "exploding"}) == 0.0
    assert guard.get_sample_value("gpushare_exporter_collector_success", {"collector": "working"}) == 1.0
    assert [m.name for m in guard.collect()][:1] == ["gpushare_lean_test_events"]
