"""Which format variants the poll thread should encode ahead of the scrapes that will want them.

A scrape that finds its variant already encoded is answered from memory in about a
millisecond; one that does not encodes it on the event loop first (a few ms on a busy node,
more while a poll holds the GIL). Encoding every variant every poll would buy that for all
scrapes, but Prometheus usually scrapes every 15-60 s while the exporter polls every second,
so most of those encodings would never be read: on the 8-GPU node they would be the largest
cost of a poll.

So each variant's asks are remembered (as the times of the polls that noticed them) and the
smallest gap between consecutive asks is taken as its scrape period: the smallest, because
two Prometheus servers scraping out of phase (an HA pair) make gaps shorter than either
period, and erring short only encodes more often. A variant is encoded in the polls whose
exposition may be the one read by a scrape due at ``last ask + k * period`` (k >= 1, so a
missed scrape does not lose the rhythm), with a poll interval of slack for jitter. Until a
period is known, and for scrapers that ask about every poll, it is encoded every poll. A
variant not asked for FORGET_AFTER_SECONDS is no longer encoded ahead at all.
"""

from __future__ import annotations

from collections import deque

Variant = tuple[bool, bool]  # (openmetrics, gzip)

# Longer than any usual scrape interval; a one-off curl stops costing CPU after this.
FORGET_AFTER_SECONDS = 300.0
_ASKS_KEPT = 4


class PrerenderPlan:
    """Remembers when each variant was asked for and says which to encode at a poll."""

    def __init__(self) -> None:
        self._asks: dict[Variant, deque[float]] = {}
        self._expected: dict[Variant, float] = {}  # variant -> since when, until it is first asked

    def expect(self, variant: Variant, now: float) -> None:
        """Encode ``variant`` every poll from ``now`` until it is first asked for (or forgotten):
        the poller expects Prometheus' format, so even its first scrape finds the bytes ready."""
        if variant not in self._asks:
            self._expected[variant] = now

    def asked(self, variants, now: float) -> None:
        """``variants`` were asked of the exposition that the poll at ``now`` is replacing."""
        for variant in variants:
            self._expected.pop(variant, None)
            times = self._asks.setdefault(variant, deque(maxlen=_ASKS_KEPT))
            if not times or times[-1] != now:
                times.append(now)

    def due(self, now: float, interval: float) -> list[Variant]:
        """Variants to encode in the poll at ``now`` (polls ``interval`` seconds apart)."""
        due = []
        for variant, since in list(self._expected.items()):
            if now - since > FORGET_AFTER_SECONDS:
                del self._expected[variant]
            else:
                due.append(variant)
        for variant, times in list(self._asks.items()):
            last = times[-1]
            if now - last > FORGET_AFTER_SECONDS:
                del self._asks[variant]
                continue
            period = min((b - a for a, b in zip(times, list(times)[1:])), default=None)
            if period is None or period <= 4 * interval:
                due.append(variant)  # unknown rhythm, or every poll is near an ask anyway
                continue
            # An ask is noticed by the poll after it, so it came up to one interval before the
            # recorded time, and the period is known to about an interval either way; the poll
            # at ``now`` serves asks until the next poll. That puts the polls serving the next
            # ask between 3 intervals before and 1 after ``last + period``.
            since = now - last
            phase = since % period
            if since >= period - 3 * interval and (phase >= period - 3 * interval or phase <= interval):
                due.append(variant)
        return due
