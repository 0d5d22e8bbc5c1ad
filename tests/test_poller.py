"""Poller: schedule, publication of expositions, failure handling, lazy formats, health."""

from __future__ import annotations

import gzip
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import poller as poller_module
from exporter import render as render_module
from exporter.errors import NoGpuError
from exporter.prerender import FORGET_AFTER_SECONDS
from exporter.poller import Poller, next_deadline
from snapshot_samples import UUID0, rich_snapshot


class Clock:
    """A monotonic clock that only moves when told to."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeBackend:
    """Returns queued results (a Snapshot or an exception to raise) and records calls."""

    name = "fake"

    def __init__(self, *results, clock: Clock | None = None, poll_seconds: float = 0.0) -> None:
        self.results = list(results)
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.opened = self.closed = 0
        self.polls = 0

    def open(self):
        self.opened += 1

    def close(self):
        self.closed += 1

    def poll(self):
        self.polls += 1
        if self.clock is not None:
            self.clock.t += self.poll_seconds
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, BaseException):
            raise result
        return result


def sample(exposition, name, labels=None):
    for family in text_string_to_metric_families(exposition.text.decode()):
        for s in family.samples:
            if s.name == name and s.labels == (labels or {}):
                return s.value
    return None


GPU0 = {"gpu": "0", "uuid": UUID0}


def test_next_deadline_stays_on_the_grid():
    """Deadlines are start + k*interval: on time -> next tick; overran 2.2 intervals -> skip to the 4th tick."""
    assert next_deadline(0.0, 0.5, 1.0) == 1.0
    assert next_deadline(0.0, 3.2, 1.0) == 4.0
    assert next_deadline(10.0, 11.0, 1.0) == 12.0  # a deadline equal to now is already due, so not returned


def test_no_exposition_before_first_poll():
    """Nothing is published until a poll has run."""
    assert Poller(FakeBackend(rich_snapshot()), 5.0).exposition is None


def test_successful_poll_publishes_new_exposition():
    """Each poll swaps in a new Exposition object; the old one keeps its bytes."""
    poller = Poller(FakeBackend(rich_snapshot()), 5.0)
    assert poller.poll_once() is True
    first = poller.exposition
    first_text = first.text
    poller.poll_once()
    assert poller.exposition is not first
    assert first.text == first_text
    assert sample(poller.exposition, "gpushare_gpu_up", GPU0) == 1
    assert sample(poller.exposition, "gpushare_exporter_polls_total", {"result": "ok"}) == 2


def test_poll_duration_is_measured_around_the_backend_call():
    """gpushare_exporter_poll_duration_seconds is the monotonic time the backend's poll took."""
    clock = Clock()
    poller = Poller(FakeBackend(rich_snapshot(), clock=clock, poll_seconds=0.25), 5.0, monotonic=clock)
    poller.poll_once()
    assert sample(poller.exposition, "gpushare_exporter_poll_duration_seconds") == 0.25


def test_failed_poll_keeps_previous_gpu_series_and_counts_error(caplog):
    """A raising poll is logged and counted; the last good snapshot's series stay, self-metrics move."""
    wall = iter([1000.0, 2000.0])
    backend = FakeBackend(rich_snapshot(), RuntimeError("driver hiccup"))
    poller = Poller(backend, 5.0, wall_clock=lambda: next(wall))
    poller.poll_once()
    assert poller.poll_once() is False
    exposition = poller.exposition
    assert sample(exposition, "gpushare_gpu_up", GPU0) == 1
    assert sample(exposition, "gpushare_exporter_polls_total", {"result": "error"}) == 1
    assert sample(exposition, "gpushare_exporter_polls_total", {"result": "ok"}) == 1
    assert sample(exposition, "gpushare_exporter_last_poll_timestamp_seconds") == 1000.0
    assert poller.stats.last_error == "RuntimeError: driver hiccup"
    assert any("driver hiccup" in r.getMessage() for r in caplog.records)


def test_first_poll_failing_serves_self_metrics_only():
    """With no good poll yet, a failed poll still publishes the exporter's own series, no GPU series."""
    poller = Poller(FakeBackend(RuntimeError("no luck")), 5.0)
    poller.poll_once()
    exposition = poller.exposition
    assert exposition is not None and exposition.snapshot is None
    assert sample(exposition, "gpushare_exporter_polls_total", {"result": "error"}) == 1
    assert sample(exposition, "gpushare_gpu_up", GPU0) is None
    assert sample(exposition, "gpushare_exporter_collector_success", {"collector": "gpu"}) == 0


def test_backend_returning_none_is_a_failed_poll():
    """A backend that returns no snapshot counts as an error rather than crashing the renderer."""
    poller = Poller(FakeBackend(None), 5.0)
    assert poller.poll_once() is False
    assert poller.stats.polls_error == 1


def test_render_failure_keeps_previous_exposition(monkeypatch):
    """If rendering raises, the previously published exposition stays in place."""
    poller = Poller(FakeBackend(rich_snapshot()), 5.0)
    poller.poll_once()
    before = poller.exposition

    def broken(*args, **kwargs):
        raise ValueError("encoder bug")

    monkeypatch.setattr(poller_module, "render", broken)
    poller.poll_once()
    assert poller.exposition is before


def test_formats_are_lazy_and_memoised():
    """Before any scrape only Prometheus' format is encoded; each other is made on first request, then reused."""
    poller = Poller(FakeBackend(rich_snapshot()), 5.0)
    poller.poll_once()
    exposition = poller.exposition
    assert poller_module.PROMETHEUS_VARIANT == (True, True)
    assert exposition.rendered_variants() == {(True, True), (True, False)}  # OpenMetrics+gzip and what it compresses
    assert (False, False) not in exposition.rendered_variants()
    zipped = exposition.body(openmetrics_format=False, gzipped=True)
    assert gzip.decompress(zipped) == exposition.text
    assert exposition.rendered_variants() == {(True, True), (False, False), (True, False), (False, True)}
    assert exposition.requested_variants() == {(False, True)}  # .text is not a scrape


def test_next_poll_prerenders_the_variants_scrapers_asked_for():
    """After a scrape asked for OpenMetrics+gzip, the next poll renders that variant before the swap."""
    poller = Poller(FakeBackend(rich_snapshot()), 5.0)
    poller.poll_once()
    poller.exposition.body(openmetrics_format=True, gzipped=True)
    poller.poll_once()
    fresh = poller.exposition
    assert (True, True) in fresh.rendered_variants()
    assert (False, True) not in fresh.rendered_variants()  # nobody asked for text+gzip
    poller.poll_once()  # no scrape in between: still pre-rendered, the ask is recent
    assert (True, True) in poller.exposition.rendered_variants()


def test_variant_nobody_asks_for_any_more_stops_being_prerendered():
    """A variant last asked for longer than FORGET_AFTER_SECONDS ago is no longer encoded ahead."""
    clock = [1000.0]
    poller = Poller(FakeBackend(rich_snapshot()), 5.0, monotonic=lambda: clock[0])
    poller.poll_once()
    poller.exposition.body(openmetrics_format=False, gzipped=False)
    poller.poll_once()
    clock[0] += FORGET_AFTER_SECONDS - 1
    poller.poll_once()
    assert (False, False) in poller.exposition.rendered_variants()
    clock[0] += 2
    poller.poll_once()
    assert poller.exposition.rendered_variants() == set()  # Prometheus' format too: nobody asked for it


def test_concurrent_first_requests_render_once(monkeypatch):
    """Many threads asking for gzipped text at once trigger a single render."""
    poller = Poller(FakeBackend(rich_snapshot()), 5.0)
    poller.poll_once()
    exposition = poller.exposition
    calls = []
    real = render_module.encode.text

    def counting(families):
        calls.append(1)
        return real(families)

    monkeypatch.setattr(render_module.encode, "text", counting)
    barrier = threading.Barrier(16)
    results = []

    def ask():
        barrier.wait()
        results.append(exposition.body(openmetrics_format=False, gzipped=True))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len({id(r) for r in results}) == 1


def test_health_ages_out_after_three_intervals():
    """Healthy below 3 intervals since the last good poll, unhealthy at 3 intervals, with age and error."""
    clock = Clock(100.0)
    backend = FakeBackend(rich_snapshot(), TimeoutError("gpu 0 timed out"))
    poller = Poller(backend, 5.0, monotonic=clock)
    assert poller.health().ok is False
    assert "no successful poll yet" in poller.health().reason
    poller.poll_once()  # good poll at t=100
    clock.t = 114.9
    assert poller.health().ok is True
    poller.poll_once()  # fails; still within the window
    assert poller.health().ok is True
    clock.t = 115.0
    health = poller.health()
    assert health.ok is False
    assert "15.0s ago" in health.reason and "TimeoutError: gpu 0 timed out" in health.reason


def test_health_waits_for_the_first_page_not_only_the_first_poll(monkeypatch):
    """A good poll whose page is still rendering is not ready: /health and /metrics agree (both 503)."""
    clock = Clock(100.0)
    poller = Poller(FakeBackend(rich_snapshot()), 5.0, monotonic=clock)
    seen = []

    def render_while_checking(*args, **kwargs):
        seen.append(poller.health())  # what /health answers while the first render runs
        return real_render(*args, **kwargs)

    real_render = poller_module.render
    monkeypatch.setattr(poller_module, "render", render_while_checking)
    poller.poll_once()
    assert seen and seen[0].ok is False and "still being rendered" in seen[0].reason
    assert poller.exposition is not None and poller.health().ok is True


def test_worker_thread_polls_and_stops_cleanly():
    """start() opens the backend and polls repeatedly; stop() ends the thread and closes the backend."""
    done = threading.Event()

    class Counting(FakeBackend):
        def poll(self):
            snapshot = super().poll()
            if self.polls >= 3:
                done.set()
            return snapshot

    backend = Counting(rich_snapshot())
    poller = Poller(backend, 0.01)
    poller.start()
    try:
        assert done.wait(10), "the worker did not poll three times"
    finally:
        poller.stop(timeout=10)
    assert backend.opened == 1 and backend.closed == 1
    assert not any(t.name == "gpushare-poller" and t.is_alive() for t in threading.enumerate())


def test_slow_polls_never_overlap():
    """A poll slower than the interval delays the next one instead of running two at once."""
    active, peak, done = [0], [0], threading.Event()
    lock = threading.Lock()

    class Slow(FakeBackend):
        def poll(self):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            done.wait(0.02)  # longer than the 0.005 s interval
            with lock:
                active[0] -= 1
            if self.polls >= 4:
                done.set()
            return super().poll()

    poller = Poller(Slow(rich_snapshot()), 0.005)
    poller.start()
    try:
        assert done.wait(10)
    finally:
        poller.stop(timeout=10)
    assert peak[0] == 1


def test_start_propagates_no_gpu_and_starts_no_thread():
    """A backend that cannot open raises from start(); no worker is left running."""

    class NoGpu(FakeBackend):
        def open(self):
            raise NoGpuError("no NVIDIA driver")

    poller = Poller(NoGpu(rich_snapshot()), 5.0)
    with pytest.raises(NoGpuError):
        poller.start()
    poller.stop()
    assert not any(t.name == "gpushare-poller" for t in threading.enumerate())


def test_interval_must_be_positive():
    """A zero interval is refused at construction."""
    with pytest.raises(ValueError):
        Poller(FakeBackend(rich_snapshot()), 0)


def test_observers_and_extra_collectors_plug_in():
    """An observer sees each good snapshot before rendering; an extra collector's families are served."""
    from prometheus_client.metrics_core import GaugeMetricFamily

    seen = []

    class Extra:
        name = "extra"

        def collect(self):
            family = GaugeMetricFamily("gpushare_test_polls_seen", "Snapshots the observer saw.")
            family.add_metric([], len(seen))
            return [family]

        def section_ok(self):
            return True

    def broken_observer(snapshot):
        raise RuntimeError("observer bug")

    poller = Poller(
        FakeBackend(rich_snapshot()), 5.0, extra_collectors=[Extra()], observers=[broken_observer, seen.append]
    )
    poller.poll_once()
    assert len(seen) == 1 and seen[0].gpus[0].uuid == UUID0
    assert sample(poller.exposition, "gpushare_test_polls_seen") == 1
    assert sample(poller.exposition, "gpushare_exporter_collector_success", {"collector": "extra"}) == 1


def test_repeated_failure_logged_once_then_recovery(caplog):
    """The same poll error every interval is one warning; the recovery is logged once."""
    import logging

    boom = RuntimeError("still broken")
    poller = Poller(FakeBackend(boom, boom, boom, rich_snapshot()), 5.0)
    with caplog.at_level(logging.INFO, logger="exporter.poller"):
        for _ in range(4):
            poller.poll_once()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "still broken" in warnings[0].getMessage()
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_poller_encodes_a_periodic_scrapers_format_just_before_its_scrapes():
    """With a 15 s scraper and 1 s polls, scrapes after the first period find their bytes ready and most polls encode nothing."""
    clock = [0.0]
    poller = Poller(FakeBackend(rich_snapshot()), 1.0, monotonic=lambda: clock[0])
    ready_at_scrape, encoding_polls = [], 0
    for second in range(150):
        clock[0] = float(second)
        poller.poll_once()
        encoding_polls += bool(poller.exposition.rendered_variants())
        if second % 15 == 7:
            ready_at_scrape.append((True, True) in poller.exposition.rendered_variants())
            poller.exposition.body(openmetrics_format=True, gzipped=True)
    assert all(ready_at_scrape[2:])  # the first two asks teach the period
    assert encoding_polls < 150 / 2
