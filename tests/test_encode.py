"""The exporter's own encoders write the same bytes as prometheus_client's, only faster."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest as library_text
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.openmetrics.exposition import generate_latest as library_openmetrics
from prometheus_client.samples import Exemplar

from exporter import encode
from exporter.backend.sim import SimBackend
from exporter.collectors.base import Family
from exporter.poller import Poller
from tests.conftest import SCENARIOS


class Replay:
    """Registry stand-in holding fixed families; lean families (exporter.collectors.base.Family)
    are handed to the library as the prometheus_client families they stand for."""

    def __init__(self, families):
        self.families = tuple(f.metric() if isinstance(f, Family) else f for f in families)

    def collect(self):
        return iter(self.families)


def assert_same_bytes(families) -> None:
    families = tuple(families)
    assert encode.text(families) == library_text(Replay(families))
    assert encode.openmetrics(families) == library_openmetrics(Replay(families))


@pytest.fixture
def no_fallback(monkeypatch):
    """Fail the test if the encoder hands the families to the library instead of writing them itself."""
    def refuse(registry):
        raise AssertionError("fell back to prometheus_client's encoder")

    monkeypatch.setattr(encode, "_library_text", refuse)
    monkeypatch.setattr(encode, "_library_openmetrics", refuse)


def scenario_families(name: str, at: int) -> tuple[Metric, ...]:
    backend = SimBackend(SCENARIOS / f"{name}.yaml")
    poller = Poller(backend, interval=1.0)
    backend.open()
    try:
        backend.step_to(at - 1)
        poller.poll_once()
        backend.step_to(at)
        poller.poll_once()
        return tuple(poller._registry.collect())
    finally:
        backend.close()


@pytest.mark.parametrize("name,at", [
    ("h100-mixed-node", 600), ("faults-demo", 185), ("faults-demo", 500), ("wan22-h100-mps-together", 541),
    ("h200-mig", 300),
])
def test_shipped_scenarios_encode_byte_identical(name, at, no_fallback):
    """Every family the exporter serves for a shipped scenario encodes exactly as the library does, in both formats."""
    families = scenario_families(name, at)
    assert sum(len(f.samples) for f in families) > 20
    assert_same_bytes(families)


def test_values_labels_and_help_that_need_escaping_match_the_library(no_fallback):
    """Backslashes, quotes and newlines in label values and help, and special floats, come out as the library writes them."""
    gauge = GaugeMetricFamily("gpushare_test_ratio", 'help with "quotes", a \\ and\na newline', labels=["a", "b"],
                              unit="ratio")
    for i, value in enumerate([0.0, -0.0, 1.0, 1e6, 1234567.0, 1e-7, 123456.789, -5e20, math.inf, -math.inf,
                               math.nan, 2**53, 7]):
        gauge.add_metric([f'v{i}"\\\n', "é ✓"], value)
    counter = CounterMetricFamily("gpushare_test_events", "events", labels=["kind"])
    counter.add_metric(["x"], 3)
    info = InfoMetricFamily("gpushare_test", "identity", labels=["model"])
    info.add_metric(["H100"], {"driver": "580.1"})
    stamped = GaugeMetricFamily("gpushare_test_stamped", "with a timestamp")
    stamped.add_metric([], 1.5, timestamp=1_700_000_000.25)
    assert_same_bytes([gauge, counter, info, stamped])


@pytest.mark.parametrize("family", [
    GaugeMetricFamily("gpushare:colon", "a colon, which OpenMetrics sample names replace", value=1),
    GaugeMetricFamily("gpushare_reserved", "a __ label", labels=["__inner"]),
    CounterMetricFamily("gpushare_created_things", "counter with _created", value=2, created=1_700_000_000.0),
    HistogramMetricFamily("gpushare_hist_seconds", "histogram", buckets=[("1.0", 2), ("+Inf", 3)], sum_value=4),
    SummaryMetricFamily("gpushare_summary_seconds", "summary", count_value=2, sum_value=1.0),
    StateSetMetricFamily("gpushare_state", "stateset", value={"a": True, "b": False}),
], ids=["colon", "reserved-label", "created", "histogram", "summary", "stateset"])
def test_families_outside_the_simple_case_still_match_the_library(family):
    """Names the library rewrites and types with extra samples fall back to (or match) the library's encoder."""
    if family.name == "gpushare_reserved":
        family.add_metric(["x"], 1)
    assert_same_bytes([GaugeMetricFamily("gpushare_before", "a plain one first", value=1), family])


def test_exemplars_fall_back_to_the_library():
    """A counter sample with an exemplar is written with it, as the library does."""
    counter = CounterMetricFamily("gpushare_exemplar", "counter", labels=["k"])
    counter.add_metric(["v"], 1, exemplar=Exemplar({"trace_id": "abc"}, 1.0))
    assert_same_bytes([counter])
    assert b"# {trace_id=\"abc\"} 1.0" in encode.openmetrics([counter])


label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
sample_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**60, 2**60))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(label_values, label_values, sample_values), max_size=8), st.text(max_size=30))
def test_any_label_values_and_floats_match_the_library(rows, help_text):
    """For arbitrary label values, help text and sample values the bytes equal the library's."""
    family = GaugeMetricFamily("gpushare_any", help_text, labels=["first", "second"])
    for first, second, value in rows:
        family.add_metric([first, second], value)
    assert_same_bytes([family])


def test_go_float_uses_exponents_like_go():
    """Large positive values switch to Go's exponent form; small ones keep Python's repr."""
    assert encode.go_float(1e6) == "1e+06"
    assert encode.go_float(1234567) == "1.234567e+06"
    assert encode.go_float(123456) == "123456.0"
    assert encode.go_float(0.25) == "0.25"
    assert (encode.go_float(math.inf), encode.go_float(-math.inf), encode.go_float(math.nan)) == ("+Inf", "-Inf", "NaN")
