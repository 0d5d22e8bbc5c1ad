"""The activity of a device at an instant, summed from rows that stay fixed while the processes' timelines do.

Telemetry.device_activity's rule (exporter/sim/telemetry.py): per pipe, min(1, the sum over the
device's processes alive at t of each one's timeline value at t; 0 without a timeline, and
graphics_active falls back to sm_active). A GPM or DCGM average asks it at 32 instants per device
and window, every poll, so it is worked out here with the same floats and less Python:

- a process's values at t form one *row* (one float per pipe, in ACTIVITY_FIELDS order);
- a row is the same object over a *stretch* of time where each of its timelines returns the same
  float at every instant: before the first point (the first value), strictly inside a flat
  segment of finite values (``v0 + (v1 - v0) * (t - t0) / (t1 - t0)`` is ``v0 + 0.0`` there),
  strictly after the last point (the last value). Such rows are kept for the engine's life;
- the sums of a sequence of kept rows are kept too (by the rows' ids, which stay theirs since the
  rows are kept), so an instant that sees the same processes in the same stretches as an earlier
  one costs a look-up. Rows at instants outside any stretch (on a point, on a slope) are summed
  afresh, as before.

A process's activity is fixed when the engine builds it, and the engine keeps every process for
its life, so ``id(process)`` stays its own. tests/test_fake_dcgm_cost.py compares every path with
the plain sums, bit for bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from exporter.sim.piecewise import timeline_value
from exporter.snapshot import ACTIVITY_FIELDS

if TYPE_CHECKING:
    from exporter.sim.state import DeviceKey, EngineView, Proc

_KEPT_SUMS = 4096  # sums of row sequences kept; cleared when full (ramps: a new sequence per instant)


class ActivityRows:
    """Telemetry's device activity for one engine (see the module's docstring)."""

    def __init__(self, engine: EngineView):
        self.engine = engine
        self._lines: dict[int, tuple] = {}  # id(process) -> (timelines or values per pipe, multi-point ones)
        self._stretch: dict[int, tuple] = {}  # id(process) -> (lo, hi, row) of its last stretch (open interval)
        self._rows: dict[tuple, tuple] = {}  # (id(process), lo, hi) -> its row there (kept: ids stay)
        self._sums: dict[tuple, dict] = {}  # ids of a sequence of kept rows -> the sums

    def device_activity(self, key: DeviceKey, t: float) -> dict[str, float]:
        """Telemetry.device_activity: a dict of the caller's own."""
        return dict(self.sums(key, t))

    def sums(self, key: DeviceKey, t: float) -> dict[str, float]:
        """The same values, read only: the kept dict itself where the rows were kept (one object
        for every instant that sees the same rows, so a caller can tell them apart by id)."""
        rows, kept = [], True
        stretches = self._stretch
        for p in self.engine.alive(t, device=key):
            last = stretches.get(id(p))
            if last is not None and last[0] < t < last[1]:
                rows.append(last[2])
                continue
            row = self._row(p, t)
            kept = kept and row is not None
            rows.append(row if row is not None else self._values(p, t))
        if not kept:
            return {pipe: min(1.0, sum([row[i] for row in rows])) for i, pipe in enumerate(ACTIVITY_FIELDS)}
        ident = tuple([id(row) for row in rows])
        sums = self._sums.get(ident)
        if sums is None:
            if len(self._sums) >= _KEPT_SUMS:
                self._sums.clear()
            sums = self._sums[ident] = {pipe: min(1.0, sum([row[i] for row in rows]))
                                        for i, pipe in enumerate(ACTIVITY_FIELDS)}
        return sums

    def _values(self, p: Proc, t: float) -> tuple:
        """Process ``p``'s value of each pipe at t, as process_activity gives it (p alive at t)."""
        lines = self._lines.get(id(p)) or self._pipe_lines(p)
        return tuple([x if x.__class__ is not tuple else timeline_value(x, t) for x in lines[0]])

    def _row(self, p: Proc, t: float) -> tuple | None:
        """The kept row of ``p``'s stretch around t (now its last stretch), or None when t is in none."""
        lines = self._lines.get(id(p)) or self._pipe_lines(p)
        lo, hi = -math.inf, math.inf
        for timeline in lines[1]:
            found = _flat_around(timeline, t)
            if found is None:
                return None
            lo, hi = max(lo, found[0]), min(hi, found[1])
        key = (id(p), lo, hi)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._values(p, t)
        self._stretch[id(p)] = (lo, hi, row)
        return row

    def _pipe_lines(self, p: Proc) -> tuple:
        """Per pipe, the process's timeline (a tuple) or its value where that is the same at every
        instant (a one-point timeline's value; 0.0 without a timeline); and its multi-point timelines."""
        lines = []
        for pipe in ACTIVITY_FIELDS:
            timeline = p.activity.get(pipe)
            if timeline is None and pipe == "graphics_active":
                timeline = p.activity.get("sm_active")
            if not timeline:
                lines.append(0.0)
            elif len(timeline) == 1:
                lines.append(timeline[0][1])
            else:
                lines.append(tuple(timeline))
        entry = self._lines[id(p)] = (tuple(lines), tuple(x for x in lines if x.__class__ is tuple))
        return entry


def _flat_around(timeline: tuple, t: float) -> tuple[float, float] | None:
    """The open interval around t on which timeline_value(timeline, ·) returns one float, or None.

    timeline_value: t <= t0 gives v0; else the first point i with t < t_i decides, interpolating
    from point i-1 (a step, t_i == t_(i-1), is never reached there: t >= t_(i-1)); past every point,
    the last value. So: t < t0 -> (-inf, t0); t_(i-1) < t < t_i on a segment with equal finite ends
    -> (t_(i-1), t_i); t > t_n -> (t_n, inf). On a point or a slope: None."""
    first = timeline[0][0]
    if t < first:
        return -math.inf, first
    previous_t, previous_v = timeline[0]
    for at, value in timeline[1:]:
        if t < at:
            if previous_t < t and previous_v == value and math.isfinite(value):
                return previous_t, at
            return None
        previous_t, previous_v = at, value
    if t > previous_t:
        return previous_t, math.inf
    return None
