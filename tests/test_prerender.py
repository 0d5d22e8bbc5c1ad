"""The poll thread encodes a format just before the scrapes that want it, not every poll."""

from __future__ import annotations

import pytest

from exporter.prerender import FORGET_AFTER_SECONDS, PrerenderPlan

OM_GZIP = (True, True)


def replay(scrape_times, polls: int, interval: float = 1.0, poll_offset: float = 0.0):
    """Run a plan over ``polls`` polls; returns (scrapes that found bytes ready, scrapes, polls that encoded)."""
    plan = PrerenderPlan()
    ready: set = set()  # variants encoded for the exposition currently served
    asked: set = set()
    hits = total = encoded = 0
    scrapes = sorted(scrape_times)
    i = 0
    for k in range(polls):
        now = poll_offset + k * interval
        while i < len(scrapes) and scrapes[i] < now:  # scrapes served by the previous exposition
            total += 1
            hits += OM_GZIP in ready
            asked.add(OM_GZIP)
            i += 1
        plan.asked(asked, now)
        asked = set()
        ready = set(plan.due(now, interval))
        encoded += OM_GZIP in ready
    return hits, total, encoded


@pytest.mark.parametrize("period,phase", [(15, 0.3), (15, 7.9), (30, 12.5), (60, 0.99), (10, 4.2)])
def test_steady_scraper_finds_its_bytes_ready_and_most_polls_skip_encoding(period, phase):
    """A Prometheus scraping every PERIOD s is served pre-encoded bytes after learning its rhythm; polls between skip."""
    polls = 20 * period
    hits, total, encoded = replay([phase + k * period for k in range(polls // period)], polls)
    assert total - hits <= 2  # only while the rhythm is being learnt
    # every poll until the second ask shows the period, then about 5 polls per period
    assert encoded <= period + 5 * total
    assert encoded < polls / 2


def test_ha_pair_out_of_phase_is_served_from_ready_bytes():
    """Two scrapers at the same period but out of phase both find their bytes ready."""
    scrapes = [3.5 + 15 * k for k in range(40)] + [10.2 + 15 * k for k in range(40)]
    hits, total, _ = replay(scrapes, 600)
    assert total - hits <= 3


def test_scraper_asking_every_poll_gets_every_poll_encoded():
    """A variant asked for about every poll is encoded every poll."""
    hits, total, encoded = replay([k + 0.5 for k in range(100)], 100)
    assert total - hits <= 1 and encoded >= 99


def test_missed_scrape_keeps_the_rhythm():
    """After Prometheus skips a scrape, the next one on its grid still finds its bytes ready."""
    scrapes = [2.2 + 15 * k for k in range(30) if k != 12]
    hits, total, _ = replay(scrapes, 450)
    assert total - hits <= 2


def test_variant_not_asked_for_is_forgotten():
    """After FORGET_AFTER_SECONDS without an ask a variant is no longer encoded at all."""
    plan = PrerenderPlan()
    plan.asked({OM_GZIP}, 10.0)
    assert plan.due(11.0, 1.0) == [OM_GZIP]  # rhythm unknown: encoded every poll meanwhile
    assert plan.due(10.0 + FORGET_AFTER_SECONDS - 1, 1.0) == [OM_GZIP]
    assert plan.due(10.0 + FORGET_AFTER_SECONDS + 1, 1.0) == []
    assert plan.due(10.0 + FORGET_AFTER_SECONDS + 2, 1.0) == []


def test_expected_variant_is_encoded_every_poll_until_first_asked():
    """The variant the poller expects is encoded from the start; the first real ask replaces the expectation."""
    plan = PrerenderPlan()
    plan.expect(OM_GZIP, 0.0)
    assert all(plan.due(float(t), 1.0) == [OM_GZIP] for t in range(1, 20))
    plan.asked({OM_GZIP}, 20.0)
    plan.asked({OM_GZIP}, 35.0)  # period 15 s, learnt from real asks only
    assert plan.due(36.0, 1.0) == []
    assert plan.due(47.0, 1.0) == [OM_GZIP]


def test_expected_variant_nobody_asks_for_is_dropped():
    """Without any scrape the expected variant stops being encoded after FORGET_AFTER_SECONDS."""
    plan = PrerenderPlan()
    plan.expect(OM_GZIP, 0.0)
    assert plan.due(FORGET_AFTER_SECONDS + 1, 1.0) == []
