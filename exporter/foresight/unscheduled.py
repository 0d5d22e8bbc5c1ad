"""A workload whose peak comes at no fixed age: held as still to come until its run's learned end.

Most workloads peak where their runs always do (a fine-tune's first evaluation, a render's final
decode, a server's warm-up), and exporter.foresight.progress reads a run's place on its learned
timeline from that. Some do not: a GPU test suite whose tests run in another order (or take
other times) each run, a notebook whose user loads the model when they like. Their runs reach
their peak at ages that differ by more than any slowdown explains; the timeline of the newest
run places the peak where that run had it, and a later run that has not peaked by then is
not "late", nor "another kind of run": its peak is still to come, at an age nobody knows.

Such a profile is **unscheduled**: at least two of its recent runs reached PEAK_BAND of the
peak at ages more than UNSCHEDULED_FACTOR times apart (progress.LATE_FACTOR: later than that, a
landmark counts as crossed unseen) and more than UNSCHEDULED_SHARE of the run's duration apart
(two early peaks seconds apart are one schedule). Its timeline is read as any other until a run is
late for the peak its newest run had (the newest run's timing is as good a guess as any); from
then on the old reading took the peak as never coming (forecast.follows dropped the profile as
another kind of run, progress flagged the run "smaller"). Now a run late for an unscheduled peak
keeps its profile and is forecast holding that peak from now until its learned end
(:func:`still_to_come`, ``ProcessState.unscheduled_top``, forecast.process_curve). Of several such
runs on one device only the one that grows most by it is (:func:`one_awaited`): two unknown moments
meeting is not likely.

When, though, is not known. A collision is only likely if it happens *whenever* the peak comes
(:func:`whenever_overflow`: the peak over the lowest its co-tenants hold in the run's remaining
life); exporter.foresight.confidence caps the confidence by it, and a collision predicted "now"
on such a peak is not late when it has not come yet (state.py leaves it out of
confidence.mark_due). Measured in docs/foresight.md, "The critical tier, ninth round".
"""

from __future__ import annotations

from typing import Sequence

from exporter.foresight.demand import HORIZON_SECONDS, demand_profile
from exporter.frozen import replace
from exporter.foresight.profiles import PEAK_BAND, WorkloadProfile

UNSCHEDULED_FACTOR = 1.5  # peak ages this many times apart: no slowdown explains it (progress.LATE_FACTOR)
UNSCHEDULED_SHARE = 0.25  # ... and this share of the run's duration apart (early peaks seconds apart are one schedule)


def unscheduled(profile: WorkloadProfile | None) -> bool:
    """True when the profile's recent runs reached their peak at ages no schedule explains (see module)."""
    if profile is None:
        return False
    kept = profile.__dict__.get("_unscheduled")  # asked for every run every poll; the profile is frozen
    if kept is None:
        ages = [a for a in profile.recent_peak_ages if a == a and a >= 0.0]
        duration = profile.duration_seconds or 0.0
        kept = False
        if len(ages) >= 2 and duration > 0:
            first, last = min(ages), max(ages)
            kept = last > UNSCHEDULED_FACTOR * first and last - first > UNSCHEDULED_SHARE * duration
        profile.__dict__["_unscheduled"] = kept
    return kept


def still_to_come(profile: WorkloadProfile, run_peak: int, age: float, slowdown: float) -> int:
    """The peak (bytes) a run of an unscheduled profile is held at until its end, 0 while it is not late for it.

    Late: ``age`` (s) is past where the profile's newest run first came within PEAK_BAND of its peak (at
    ``slowdown``), and the run has not come within PEAK_BAND of it yet. Until then the learned timeline is
    read as for any workload (the newest run's timing is as good a guess as any); from then on the old
    reading would take the peak as past, or the run as another kind of run (``ProcessState.unscheduled_top``).
    """
    band = PEAK_BAND * profile.peak_bytes
    if run_peak >= band:
        return 0
    first = profile.__dict__.get("_first_peak_age", False)  # asked every poll; the profile is frozen
    if first is False:
        first = profile.__dict__["_first_peak_age"] = next(
            (start for start, value in profile.scaled_timeline() if value >= band), None)
    if first is None or age <= first * max(1.0, slowdown):
        return 0
    return profile.peak_bytes


def one_awaited(states: list) -> list:
    """The states with at most one run held at its unscheduled peak: the one that grows most by it.

    Each such peak comes at a moment nobody knows; two of them meeting is not likely, and a host of
    many (a node's queue workers) would otherwise be forecast all at their peaks at once. The others
    hold what they use now until their end (``unscheduled_top`` set to it: what they hold is known,
    when they rise is not). ``states`` is returned itself when at most one run awaits such a peak.
    """
    waiting = [i for i, s in enumerate(states) if s.unscheduled_top]
    if len(waiting) < 2:
        return states
    chosen = max(waiting, key=lambda i: states[i].unscheduled_top - states[i].used_bytes)  # the first of equals
    return [replace(s, unscheduled_top=max(1, s.used_bytes)) if s.unscheduled_top and i != chosen else s
            for i, s in enumerate(states)]


def whenever_overflow(states: Sequence, curves: Sequence, other_bytes: int, capacity: int | None) -> int | None:
    """Bytes over ``capacity`` that hold whenever an awaited unscheduled peak comes; None when no run awaits one.

    For each run awaiting one (``state.unscheduled_top`` above what it holds; its curve holds it until its end):
    its peak plus the lowest demand of everything else over that window. The largest of these, less the
    capacity (negative: it clears somewhere in the window). ``states`` as :func:`one_awaited` leaves
    them: any other run that awaited such a peak holds what it uses now (two unknown moments meeting is
    not likely), and its curve says so. ``curves``: the states' process curves (forecast.process_curve),
    in order.
    """
    if capacity is None:
        return None
    waiting = [i for i, s in enumerate(states) if s.unscheduled_top > s.used_bytes]  # one, after one_awaited()
    if not waiting:
        return None
    best = None
    for i in waiting:
        steps, end = curves[i]
        peak = max((v for _, v in steps), default=0)
        window = HORIZON_SECONDS if end is None else min(end, HORIZON_SECONDS)
        rest = [curve for j, curve in enumerate(curves) if j != i]
        lowest = min((total for tau, total in demand_profile(rest, other_bytes) if tau < window),
                     default=other_bytes)
        over = lowest + peak - capacity
        best = over if best is None else max(best, over)
    return best


def awaits_unscheduled(states: Sequence, forecast) -> bool:
    """True when the predicted contention needs the growth of a run awaiting an unscheduled peak."""
    at = forecast.at_contention_bytes
    return any(s.unscheduled_top and at.get(s.pid, 0) > s.used_bytes for s in states)


def due_eta(raw: float | None, states: Sequence, forecast) -> float | None:
    """The ETA confidence.mark_due is told of a poll: none without a raw confidence, nor for a collision
    that rests on an awaited unscheduled peak (it is never late: it comes when it comes)."""
    if raw is None or awaits_unscheduled(states, forecast):
        return None
    return forecast.contention_in_seconds
