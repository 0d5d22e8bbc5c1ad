"""The exhaustion ETA: when a memory domain's use reaches its capacity at the trend of its recent use.

exhaustion_eta() fits a window given as (time, bytes) pairs. The foresight keeps each memory
domain's (Unix seconds, used bytes) samples of the last five minutes (TrendWindow) and asks
every poll when use reaches capacity at the window's trend.
Refitting the line from scratch walked the whole window (300 points at a 1 s poll) per
domain per poll, the largest part of foresight's per-poll cost on an 8-GPU node. The window
keeps the fit's sums instead, exactly: every time is a binary fraction, so ``t * 2**scale`` is
an integer for a large enough ``scale``, and sums of such integers and of byte counts are
Python ints, updated as samples come and go. The slope is then the exact least-squares slope,
rounded once (int / int), so the ETA is the same whether the sums were kept poll by poll or
made from scratch, on any machine; it can differ from the former float fit in the last digits
(the float sums rounded at every step). A window with a time or use that is no such number
(not finite, not integral bytes) falls back to the float fit.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterable, Sequence

MIN_POINTS = 5  # too few samples to judge a trend
MIN_SPAN_SECONDS = 30.0  # too short a span to judge
MIN_GROWTH_BYTES = 64 * 2**20  # the fitted growth over the window must be at least this: noise is not a trend


def exhaustion_eta(
    window: Sequence[tuple[float, int]],
    capacity_bytes: int | None,
    min_points: int = MIN_POINTS,
    min_span_seconds: float = MIN_SPAN_SECONDS,
    min_growth_bytes: int = MIN_GROWTH_BYTES,
) -> float | None:
    """Seconds until memory use reaches capacity at the least-squares trend of ``window``.

    ``window`` holds (Unix seconds, used bytes). None when there is no capacity, too few
    points or too short a span to judge, or use is not growing: the fitted growth over the
    window must be at least ``min_growth_bytes``, so noise around a flat line is not a trend.
    0 when use is already at or above capacity and growing. The foresight keeps its windows
    as TrendWindow, which gives the same answer poll by poll.
    """
    return TrendWindow(samples=window).eta(capacity_bytes, min_points, min_span_seconds, min_growth_bytes)


class TrendWindow:
    """One memory domain's (Unix seconds, used bytes) samples of the last ``seconds``, oldest first,
    with the exact sums of their least-squares fit (module docstring)."""

    __slots__ = ("seconds", "times", "used", "_scale", "_st", "_stt", "_su", "_stu", "_inexact", "_ordered")

    def __init__(self, seconds: float = math.inf, samples: Iterable[tuple[float, int]] = ()) -> None:
        self.seconds = seconds
        self.times: deque = deque()
        self.used: deque = deque()
        self._scale = 0  # times are held as t * 2**scale (integers) in the sums
        self._st = self._stt = self._su = self._stu = 0  # sums of T, T*T, u, T*u (T = t * 2**scale)
        self._inexact = 0  # samples in the window that the sums cannot hold (then the float fit)
        self._ordered = True  # every time so far at or after the one before: the span is last - first
        for t, u in samples:
            self._push(t, u)

    def add(self, now: float, used: int | None) -> None:
        """This poll's use (None: unread, not added); samples older than ``seconds`` before ``now`` leave."""
        if used is not None:
            self._push(now, used)
        times = self.times
        while times and now - times[0] > self.seconds:
            self._pop()

    def eta(self, capacity_bytes: int | None, min_points: int = MIN_POINTS,
            min_span_seconds: float = MIN_SPAN_SECONDS, min_growth_bytes: int = MIN_GROWTH_BYTES) -> float | None:
        """Seconds until use reaches ``capacity_bytes`` at the window's least-squares trend
        (exporter.foresight.forecast.exhaustion_eta says when it is None, and 0)."""
        times = self.times
        n = len(times)
        if capacity_bytes is None or n < min_points:
            return None
        # asked every poll of every domain: the ends of a window of ascending times, not a walk over it
        span = times[-1] - times[0] if self._ordered else max(times) - min(times)
        if span < min_span_seconds:
            return None
        if self._inexact:
            slope = _float_slope(times, self.used)
        else:  # sum((T - mean T) * (u - mean u)) * 2**scale / sum((T - mean T) ** 2), each times n
            st = self._st
            slope = ((n * self._stu - st * self._su) << self._scale) / (n * self._stt - st * st)
        if slope * span < min_growth_bytes:
            return None
        return max(0.0, (capacity_bytes - self.used[-1]) / slope)

    def _push(self, t: float, u: int) -> None:
        if self.times and not t >= self.times[-1]:  # NaN too
            self._ordered = False
        self.times.append(t)
        self.used.append(u)
        held = _held(t, u)
        if held is None:
            self._inexact += 1
            return
        (num, k), u = held
        if k > self._scale:  # a finer binary fraction than any so far: rescale the sums
            shift, self._scale = k - self._scale, k
            self._st <<= shift
            self._stt <<= 2 * shift
            self._stu <<= shift
        big = num << (self._scale - k)
        self._st += big
        self._stt += big * big
        self._su += u
        self._stu += big * u

    def _pop(self) -> None:
        t, u = self.times.popleft(), self.used.popleft()
        held = _held(t, u)
        if held is None:
            self._inexact -= 1
            return
        (num, k), u = held
        big = num << (self._scale - k)
        self._st -= big
        self._stt -= big * big
        self._su -= u
        self._stu -= big * u


def _held(t: float, u: int) -> tuple[tuple[int, int], int] | None:
    """((numerator, k) with t = numerator / 2**k, u as an int); None when the exact sums cannot hold them."""
    if type(u) is not int:
        if not (isinstance(u, float) and u.is_integer()):
            return None
        u = int(u)
    if type(t) is int:
        return (t, 0), u
    if not math.isfinite(t):
        return None
    num, den = t.as_integer_ratio()  # den is a power of two
    return (num, den.bit_length() - 1), u


def _float_slope(times, used) -> float:
    """The least-squares slope by the float two-pass fit (the fall-back; see module docstring)."""
    n = len(times)
    mean_t = sum(times) / n
    mean_u = sum(used) / n
    sxx = sum((t - mean_t) ** 2 for t in times)
    sxy = sum((t - mean_t) * (u - mean_u) for t, u in zip(times, used))
    return sxy / sxx
