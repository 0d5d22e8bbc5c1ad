"""Pure forecast arithmetic: expected peaks, time-aware peak demand, headroom, exhaustion ETA.

Peak demand of a device (a GPU, or a MIG instance) is the maximum over future time of the
memory its processes are expected to hold *at the same moment*:

    demand = max over tau in [0, horizon] of  other + sum_p m_p(tau)

where ``other`` is memory in use that no listed process accounts for, and ``m_p(tau)`` is
process p's expected memory ``tau`` seconds from now: its learned timeline read at its
current age plus tau, never below what it uses now, and zero once its learned duration is
over. A process without a usable profile counts with what it uses now, for ever.

This is why three jobs that peak in their last 30 s collide when started together but not
when started a minute apart, while the plain sum of expected peaks (also exported, as
``peak_sum_bytes``) cannot tell the two apart.

Co-located processes slow each other down, so a run can be later than its learned timeline.
When a process is past the age at which its workload peaks without having peaked, the whole
device is assumed to run slower by ``age / peak_offset`` (at most MAX_SLOWDOWN): every
process's remaining timeline is stretched by that factor, which keeps the gaps between
processes that started apart, and the late process's peak is expected now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from exporter.foresight.profiles import WorkloadProfile

HORIZON_SECONDS = 6 * 3600.0  # ignore anything predicted further ahead
MAX_SLOWDOWN = 4.0  # never stretch learned timelines by more than this
MIN_PEAK_OFFSET_FOR_SLOWDOWN = 60.0  # peaks this early say nothing about the device's speed
LATE_PEAK_FRACTION = 0.5  # only profiles peaking in the second half of their life measure speed
STAGGER_STEP_SECONDS = 5.0  # resolution of the stagger advice
MATCH_FROM = 0.25  # a run is compared with its profile once the profile holds this share of its peak
MATCH_TOLERANCE = 1.3  # ... and follows it while within this factor of what the profile held


@dataclass(frozen=True)
class ProcessState:
    """What the forecast needs to know about one live process."""

    pid: int
    used_bytes: int  # memory in use now, bytes
    age_seconds: float  # seconds since it started
    profile: WorkloadProfile | None  # its workload's profile, if any
    peak_reached_age: float | None = None  # age when it first came within PEAK_BAND of the learned peak


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

    @property
    def headroom_bytes(self) -> int | None:
        """Capacity minus peak demand; negative means contention is coming; None without capacity."""
        if self.capacity_bytes is None:
            return None
        return self.capacity_bytes - self.peak_demand_bytes


def expected_peak(used_bytes: int, profile: WorkloadProfile | None) -> int:
    """The learned peak of the process's workload, but at least what it uses now (bytes)."""
    if profile is None or not profile.usable:
        return used_bytes
    return max(used_bytes, profile.peak_bytes)


def profile_matches(profile: WorkloadProfile, run_max_bytes: int, age: float, peaked: bool) -> bool:
    """True when a run so far looks like the runs its profile was learned from.

    Compares the most the run has used so far with the most the learned timeline holds at
    the ages the run has gone through (up to, not including, the learned peak while the run
    has not peaked, so a late run is compared with the part it did go through). A run
    within a factor MATCH_TOLERANCE of it follows its profile; one that is far smaller or
    larger is another kind of run under the same command line (another input, another
    batch size, a device shared by more tenants), and its profile says nothing about it.
    While the learned timeline is still below MATCH_FROM of its peak (the run is loading),
    there is nothing to compare yet and the profile is not used either.
    """
    until = age if peaked else min(age, profile.peak_offset_seconds)
    learned = max((v for start, v in profile.scaled_timeline() if start < until), default=0)
    if peaked:  # the step it is in now counts too
        learned = max([learned] + [v for start, v in profile.scaled_timeline() if start <= until])
    if learned < MATCH_FROM * profile.peak_bytes:
        return False
    return learned / MATCH_TOLERANCE <= run_max_bytes <= learned * MATCH_TOLERANCE


def has_peaked(process: ProcessState) -> bool:
    """True when this run already came within PEAK_BAND of its workload's learned peak."""
    return process.peak_reached_age is not None


def device_slowdown(processes: Iterable[ProcessState]) -> float:
    """How much slower than learned the device runs (>= 1, at most MAX_SLOWDOWN).

    A run that reached its peak at age r, where its profile peaks at age P, measures r / P;
    a run older than P that has not peaked yet shows the slowdown is at least age / P.
    The largest such figure on the device wins. Profiles that peak in their first minute
    are ignored, and so are profiles that peak in the first half of their life (servers whose
    load spikes come at random, training with periodic evaluation): their peak time says
    nothing about speed.
    """
    slowdown = 1.0
    for p in processes:
        profile = p.profile
        if profile is None or not profile.usable or profile.peak_offset_seconds < MIN_PEAK_OFFSET_FOR_SLOWDOWN:
            continue
        if (profile.peak_at_fraction or 0.0) < LATE_PEAK_FRACTION:
            continue  # an early or recurring peak (servers, batches) is no clock to read
        late = p.peak_reached_age if has_peaked(p) else p.age_seconds
        slowdown = max(slowdown, late / profile.peak_offset_seconds)
    return min(slowdown, MAX_SLOWDOWN)


# A curve is (steps, end): steps ((tau, bytes), ...) from tau 0, end = tau it drops to 0 or None.
Curve = tuple[tuple[tuple[float, int], ...], float | None]


def process_curve(p: ProcessState, slowdown: float = 1.0, grace: float = 0.0) -> Curve:
    """Expected memory of a live process over future time (see module docstring).

    A run up to ``grace`` seconds (one poll interval) past its learned duration is expected
    to exit by the end of that grace; a run later than that holds its memory for ever.
    """
    profile = p.profile
    if profile is None or not profile.usable:
        return ((0.0, p.used_bytes),), None
    duration = float(profile.duration_seconds)
    position = p.age_seconds / slowdown  # where on the learned timeline the run is now
    if has_peaked(p):
        position = max(position, profile.peak_offset_seconds)
    else:
        position = min(position, profile.peak_offset_seconds)  # its peak is still to come
    if position >= duration:
        late = (position - duration) * slowdown
        if late < grace:  # about to exit: the learned duration is only poll-accurate
            return ((0.0, p.used_bytes),), grace - late
        return ((0.0, p.used_bytes),), None  # outlived its profile: end unknown
    timeline = profile.scaled_timeline()
    ends = [age for age, _ in timeline[1:]] + [duration]
    steps = []
    for (age, value), end in zip(timeline, ends):
        if end <= position:
            continue
        steps.append((max(0.0, (age - position) * slowdown), max(value, p.used_bytes)))
    if not steps or steps[0][0] > 0.0:  # timeline starts after the run's age 0: hold what it uses
        steps.insert(0, (0.0, p.used_bytes))
    return tuple(steps), (duration - position) * slowdown


def fresh_curve(profile: WorkloadProfile, start_in: float) -> Curve:
    """Expected memory of a run of ``profile`` that starts ``start_in`` seconds from now."""
    steps = tuple((start_in + age, value) for age, value in profile.scaled_timeline())
    return steps, start_in + float(profile.duration_seconds)


def curve_value(curve: Curve, tau: float) -> int:
    """Value of a curve at tau seconds from now (bytes)."""
    steps, end = curve
    if end is not None and tau >= end:
        return 0
    value = 0
    for start, v in steps:
        if start > tau:
            break
        value = v
    return value


def demand_profile(curves: Sequence[Curve], other_bytes: int = 0) -> list[tuple[float, int]]:
    """(tau, total expected bytes) at every moment any curve changes, within the horizon."""
    moments = {0.0}
    for steps, end in curves:
        moments.update(t for t, _ in steps)
        if end is not None:
            moments.add(end)
    return [
        (tau, other_bytes + sum(curve_value(c, tau) for c in curves))
        for tau in sorted(moments)
        if 0.0 <= tau <= HORIZON_SECONDS
    ]


def forecast_device(
    processes: Sequence[ProcessState], capacity_bytes: int | None, other_bytes: int = 0, grace: float = 0.0
) -> DeviceForecast:
    """Peak demand, headroom inputs, contention time and stagger advice for one device.

    ``grace`` (seconds, normally one poll interval) is how late a run may be before its end
    is considered unknown (see process_curve).
    """
    other_bytes = max(0, other_bytes)
    slowdown = device_slowdown(processes)
    curves = [process_curve(p, slowdown, grace) for p in processes]
    totals = demand_profile(curves, other_bytes)
    peak_demand = max(total for _, total in totals)
    peak_sum = other_bytes + sum(expected_peak(p.used_bytes, p.profile) for p in processes)
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
    )


def stagger_needed(processes: Sequence[ProcessState], capacity_bytes: int, other_bytes: int = 0) -> float | None:
    """Smallest spacing (seconds) between starts that lets these runs fit; None if none does.

    The processes with usable profiles are replayed as fresh runs started one after the other
    (oldest first) ``spacing`` seconds apart; processes without a profile and the ``other``
    memory stay constant. The answer is rounded up to STAGGER_STEP_SECONDS.
    """
    profiled = sorted((p for p in processes if p.profile is not None and p.profile.usable),
                      key=lambda p: -p.age_seconds)
    fixed = other_bytes + sum(p.used_bytes for p in processes if p.profile is None or not p.profile.usable)
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


def exhaustion_eta(
    window: Sequence[tuple[float, int]],
    capacity_bytes: int | None,
    min_points: int = 5,
    min_span_seconds: float = 30.0,
    min_growth_bytes: int = 64 * 2**20,
) -> float | None:
    """Seconds until memory use reaches capacity at the least-squares trend of ``window``.

    ``window`` holds (Unix seconds, used bytes). None when there is no capacity, too few
    points or too short a span to judge, or use is not growing: the fitted growth over the
    window must be at least ``min_growth_bytes``, so noise around a flat line is not a trend.
    0 when use is already at or above capacity and growing.
    """
    if capacity_bytes is None or len(window) < min_points:
        return None
    times = [t for t, _ in window]
    span = max(times) - min(times)
    if span < min_span_seconds:
        return None
    n = len(window)
    mean_t = sum(times) / n
    mean_u = sum(u for _, u in window) / n
    sxx = sum((t - mean_t) ** 2 for t in times)
    sxy = sum((t - mean_t) * (u - mean_u) for t, u in window)
    slope = sxy / sxx  # bytes per second
    if slope * span < min_growth_bytes:
        return None
    last_used = window[-1][1]
    return max(0.0, (capacity_bytes - last_used) / slope)
