"""Pure forecast arithmetic: expected peaks, time-aware peak demand, headroom, exhaustion ETA.

Peak demand of a device (a GPU, or a MIG instance) is the maximum over future time of the
memory its processes are expected to hold *at the same moment*:

    demand = max over tau in [0, horizon] of  other + sum_p m_p(tau)

where ``other`` is memory in use that no listed process accounts for, and ``m_p(tau)`` is
process p's expected memory ``tau`` seconds from now. How m_p is obtained is its *basis*:

- ``learned`` / ``scaled``: its workload's learned timeline (learned on a device of another
  size and scaled to this one, for ``scaled``), read from the run's position on it (see
  exporter.foresight.progress) and stretched by the run's slowdown. The step the run is in
  holds at least what it uses now; later steps follow the timeline, so a spike in progress
  ends when its profile says it ends. It drops to zero when the learned run ended; a run
  already past that is expected to last as long again as it is late (bounded by evidence,
  not for ever). A run late for a peak its workload's runs reach at no fixed age (a test
  suite's largest test) holds that peak until its learned end instead (unscheduled_top;
  exporter.foresight.unscheduled).
- ``declared``: a size the process declared (GPUSHARE_EXPECTED_PEAK: bytes, or parameters
  through the LLM sizing rule), held for the run's life.
- ``trend``: the run's own steady growth, extrapolated for a quarter of its age (at most
  5 minutes; exporter.foresight.basis.trend).
- ``current``: none of these; counted at what it uses now, for ever.

This is why three jobs that peak in their last 30 s collide when started together but not
when started a minute apart, while the plain sum of expected peaks (also exported, as
``peak_sum_bytes``) cannot tell the two apart.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Sequence

from exporter.foresight.demand import HORIZON_SECONDS, Curve, curve_value, demand_profile  # noqa: F401 - their home before
from exporter.foresight.exhaustion import exhaustion_eta  # noqa: F401 - its home before the window kept sums
from exporter.foresight.profiles import PEAK_BAND, WorkloadProfile, timeline_level
from exporter.foresight.progress import LATE_FACTOR
from exporter.foresight.unscheduled import unscheduled

STAGGER_STEP_SECONDS = 5.0  # resolution of the stagger advice
MATCH_TOLERANCE = 1.3  # a run more than this above (or below) its profile is another kind of run
TREND_STEPS = 8  # a trend is held as this many steps
STEADY_SECONDS = 30.0  # a run whose use held level this long is steady ...
STEADY_BAND = 0.02  # ... within this share of its use now
BASES = ("learned", "scaled", "declared", "trend", "current")  # the ``basis`` label's values


@dataclass(frozen=True)
class ProcessState:
    """What the forecast needs to know about one live process (bytes, seconds)."""

    pid: int
    used_bytes: int  # memory in use now
    age_seconds: float  # since it started
    profile: WorkloadProfile | None = None  # learned (or scaled) profile that this run follows
    position: float = 0.0  # where on the profile's timeline the run is (learned seconds)
    slowdown: float = 1.0  # learned seconds x slowdown = seconds of this run
    basis: str = "current"  # see BASES and the module docstring
    floor_bytes: int = 0  # declared: expected to hold at least this for the rest of its life
    trend_bytes_per_second: float = 0.0  # trend: recent growth
    trend_seconds: float = 0.0  # trend: how long the growth is extrapolated
    steady: bool = False  # its use has held level (within STEADY_BAND) for the last STEADY_SECONDS
    adjust: float = 1.0  # learned/scaled: what outcomes taught its workload (exporter.foresight.calibration)
    swing_bytes: int = 0  # without a profile: what it holds above its recent low, if it gave memory back lately
    unscheduled_top: int = 0  # its workload peaks at no fixed age: the most it may still reach, held until its end (unscheduled.py)


@dataclass(frozen=True)
class DeviceForecast:
    """Forecast for one device; all sizes in bytes, all times in seconds from now."""

    capacity_bytes: int | None
    peak_demand_bytes: int  # time-aware maximum (see module docstring)
    peak_sum_bytes: int  # other + sum of expected peaks, as if all peaked together
    contention_in_seconds: float | None  # first moment demand exceeds capacity; None if never
    at_contention_bytes: dict[int, int] = field(default_factory=dict)  # pid -> expected bytes then
    stagger_seconds: float | None = None  # start spacing that avoids the contention, plus one poll of margin
    slowdown: float = 1.0  # stretch applied to learned timelines
    ends_in: dict[int, float] = field(default_factory=dict)  # pid -> seconds until its expected end (when known)
    peaks: dict[int, int] = field(default_factory=dict)  # pid -> the most its curve holds (expected_peak)

    @property
    def headroom_bytes(self) -> int | None:
        """Capacity minus peak demand; negative means contention is coming; None without capacity."""
        if self.capacity_bytes is None:
            return None
        return self.capacity_bytes - self.peak_demand_bytes


def expected_peak(p: ProcessState, curve: Curve | None = None) -> int:
    """The most the process is expected to hold over the rest of its life (bytes).

    ``curve``: its process_curve() when already computed (forecast_device has them all).
    """
    steps, _end = curve if curve is not None else process_curve(p)
    return max(p.used_bytes, max(map(_value, steps), default=p.used_bytes))  # the first of equals, as max([used, ...])


def follows(profile: WorkloadProfile, run_max_bytes: int, age: float, slowdown: float = 1.0) -> bool:
    """True when a run so far looks like the runs its profile was learned from.

    A run well above the learned peak, or well below what the learned timeline held by
    the time the run reached (allowing it to be LATE_FACTOR times later than the device's
    slowdown), is another kind of run under the same command line (another input, another
    batch size, another model): its profile says nothing about it. Lateness says nothing of a
    run whose workload peaks at no fixed age (exporter.foresight.unscheduled).
    """
    if run_max_bytes > profile.peak_bytes * MATCH_TOLERANCE:
        return False
    if unscheduled(profile):  # its runs peak at no fixed age: one that has not peaked yet is not late
        return True
    reached = age / (max(1.0, slowdown) * LATE_FACTOR)
    return run_max_bytes * MATCH_TOLERANCE >= _held_by(profile, reached)


def _held_by(profile: WorkloadProfile, reached: float) -> int:
    """The most the profile's scaled timeline holds in steps that start by ``reached``, 0 if none.

    Asked for every run every poll: the timeline's starts and running maxima are kept on the
    (frozen) profile, and the answer is found by bisection where the starts ascend (they do in
    every timeline the foresight makes; any other timeline is searched step by step).
    """
    kept = profile.__dict__.get("_held_by")
    if kept is None:
        timeline = profile.scaled_timeline()
        starts = [start for start, _ in timeline]
        highest, top = [], None
        for _, value in timeline:
            top = value if top is None or value > top else top
            highest.append(top)
        ascending = all(a <= b for a, b in zip(starts, starts[1:])) and all(a == a for a in starts)  # no NaN
        kept = profile.__dict__["_held_by"] = (starts, highest, ascending)
    starts, highest, ascending = kept
    if not ascending or reached != reached:  # NaN: no step starts by it
        return max((v for start, v in profile.scaled_timeline() if start <= reached), default=0)
    found = bisect_right(starts, reached)
    return highest[found - 1] if found else 0


def process_curve(p: ProcessState, grace: float = 0.0) -> Curve:
    """Expected memory of a live process over future time (see module docstring).

    ``grace`` (one poll interval): a run up to that late past its learned end is about to exit.
    """
    profile = p.profile
    if profile is None or not profile.usable:
        return _unprofiled_curve(p)
    duration = float(profile.duration_seconds)
    position, slowdown = p.position, max(p.slowdown, 1e-6)
    if position >= duration:
        late = max(0.0, p.age_seconds - duration * slowdown)
        return ((0.0, max(p.used_bytes, p.floor_bytes)),), max(grace - late, late, grace / 2)
    if p.unscheduled_top:  # its peaks come when they come before the run's end (exporter.foresight.unscheduled)
        top = int(p.unscheduled_top * p.adjust) if p.unscheduled_top > p.used_bytes else p.used_bytes
        return ((0.0, max(p.used_bytes, top)),), (duration - position) * slowdown
    timeline = profile.scaled_timeline()
    ends = [age for age, _ in timeline[1:]] + [duration]
    ratio = _level_ratio(profile, timeline, position, p.used_bytes, p.steady) * p.adjust
    steps: list[tuple[float, int]] = []
    for (age, value), end in zip(timeline, ends):
        if end <= position:
            continue
        if not steps:  # the step the run is in now: at least what it uses
            if age > position:  # the timeline starts after the run's age: hold what it uses till then
                steps.append((0.0, p.used_bytes))
            steps.append((max(0.0, (age - position) * slowdown), max(int(value * ratio), p.used_bytes)))
            continue
        steps.append(((age - position) * slowdown, int(value * ratio)))
    return tuple(steps), (duration - position) * slowdown


def _level_ratio(profile: WorkloadProfile, timeline, position: float, used: int, steady: bool) -> float:
    """How much smaller than its profile a run holds, where it is (1 when not smaller).

    Runs of one workload differ by a few percent (input sizes, allocator rounding); the
    profile keeps the highest of recent runs. A run that holds less than its learned level
    at the same point of its life is expected to stay that much smaller (down to
    1 / MATCH_TOLERANCE): five replicas at 97 % of their learned plateau are not predicted to
    overflow a device they fill to 98 %. Only a run on its peak level (PEAK_BAND of the peak)
    is compared: a plateau before a rise says little about how high the rise goes. The level
    is read just before the run's position (a run waiting for a rise is compared with the
    level it is on), and only for a run whose use is steady (a run still loading, later than
    its position says, is not smaller). Nor is a run more than MATCH_TOLERANCE below that level:
    runs of one workload differ by a few percent, not by a third; one that holds what an earlier
    step held is late for its rise (a server loading its next model, a notebook its next cell),
    and the rise is still to come (follows() drops the profile once it is LATE_FACTOR late).
    """
    level = timeline_level(timeline, position, before=True)
    if not steady or level < PEAK_BAND * profile.peak_bytes or not level / MATCH_TOLERANCE <= used < level:
        return 1.0
    return used / level


def _unprofiled_curve(p: ProcessState) -> Curve:
    """Declared, trend or current basis: no learned timeline to read."""
    base = max(p.used_bytes, p.floor_bytes)
    if p.trend_bytes_per_second <= 0 or p.trend_seconds <= 0:
        return ((0.0, base),), None
    step = p.trend_seconds / TREND_STEPS
    return tuple((i * step, max(base, int(p.used_bytes + p.trend_bytes_per_second * i * step)))
                 for i in range(TREND_STEPS + 1)), None


def fresh_curve(profile: WorkloadProfile, start_in: float) -> Curve:
    """Expected memory of a run of ``profile`` that starts ``start_in`` seconds from now."""
    steps = tuple((start_in + age, value) for age, value in profile.scaled_timeline())
    return steps, start_in + float(profile.duration_seconds)


_value = itemgetter(1)  # a step's bytes


def forecast_device(
    processes: Sequence[ProcessState], capacity_bytes: int | None, other_bytes: int = 0, grace: float = 0.0,
    slowdown: float = 1.0,
) -> DeviceForecast:
    """Peak demand, headroom inputs, contention time and stagger advice for one device.

    ``grace`` (seconds, normally one poll interval) is how late a run may be before its end
    is considered unknown (see process_curve); ``slowdown`` is reported as measured upstream.
    """
    other_bytes = max(0, other_bytes)
    curves = [process_curve(p, grace) for p in processes]
    totals = demand_profile(curves, other_bytes)
    peak_demand = max(map(_value, totals))
    peaks = {p.pid: expected_peak(p, c) for p, c in zip(processes, curves)}
    peak_sum = other_bytes + sum(peaks.values())
    contention_in = None
    at_contention: dict[int, int] = {}
    if capacity_bytes is not None:
        for tau, total in totals:
            if total > capacity_bytes:
                contention_in = tau
                at_contention = {p.pid: curve_value(c, tau) for p, c in zip(processes, curves)}
                break
    stagger = None
    if contention_in is not None:
        stagger = stagger_needed(processes, capacity_bytes, other_bytes)
        if stagger is not None:  # learned timings are only known to a poll: add one as margin
            stagger = math.ceil((stagger + grace) / STAGGER_STEP_SECONDS) * STAGGER_STEP_SECONDS
    return DeviceForecast(
        capacity_bytes=capacity_bytes,
        peak_demand_bytes=peak_demand,
        peak_sum_bytes=peak_sum,
        contention_in_seconds=contention_in,
        at_contention_bytes=at_contention,
        stagger_seconds=stagger,
        slowdown=slowdown,
        ends_in={p.pid: c[1] for p, c in zip(processes, curves) if c[1] is not None and p.profile is not None},
        peaks=peaks,
    )


def stagger_needed(processes: Sequence[ProcessState], capacity_bytes: int, other_bytes: int = 0) -> float | None:
    """Smallest spacing (seconds) between starts that lets these runs fit; None if none does.

    The processes with usable profiles are replayed as fresh runs started one after the other
    (oldest first) ``spacing`` seconds apart; processes without a profile and the ``other``
    memory stay constant. The answer is rounded up to STAGGER_STEP_SECONDS.
    """
    profiled = sorted((p for p in processes if p.profile is not None and p.profile.usable),
                      key=lambda p: -p.age_seconds)
    fixed = other_bytes + sum(max(p.used_bytes, p.floor_bytes) for p in processes
                              if p.profile is None or not p.profile.usable)
    if len(profiled) < 2:
        return None
    longest = max(float(p.profile.duration_seconds) for p in profiled)
    spacing = STAGGER_STEP_SECONDS
    while spacing <= longest + STAGGER_STEP_SECONDS:
        curves = [fresh_curve(p.profile, i * spacing) for i, p in enumerate(profiled)]
        if max(total for _, total in demand_profile(curves, fixed)) <= capacity_bytes:
            return spacing
        spacing += STAGGER_STEP_SECONDS
    return None
