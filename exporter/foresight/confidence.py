"""How much a predicted contention rests on: the ``confidence`` of a device forecast, 0..1.

A forecast of contention adds up what each process is expected to hold at the moment its
device overflows. Each process's part rests on its basis (exporter.foresight.forecast.BASES):

- memory it holds now is certain; only the *growth* a forecast adds to it can be wrong;
- growth read from a learned profile is as good as the runs behind it: one run is weaker than
  several, and runs whose peaks spread widely say less about the next one (GROUNDING,
  SINGLE_RUN, peak_spread);
- growth from a profile learned on another device size, a declared size or a straight-line
  trend is weaker still.

The device's confidence is the growth-weighted grounding of its processes, capped by how far
the predicted overflow still clears capacity once the memory they do not ground is taken
away (ungrounded_share: of a profile's growth, its peak spread; a collision that needs every
weakly grounded byte to be right is a coin toss, not a likely OOM), over MIN_MARGIN_SHARE of
the device. Memory held now is not grounded either when
the collision is later and the process may have let it go by then: a run past its learned
end, an unprofiled process at a high of its own load waves. Nor is the rise of a learned run
already late for it (late_growth): when it comes is not in its profile. It is capped again by timing: the
overflow must outlast how far the processes' timings may drift (timing_drift), and held, with
hysteresis, from poll to poll (hold_confidence).
It exists only while contention is predicted. The critical tier of the contention alerts
fires at CRITICAL_CONFIDENCE or more (docs/alerts.md); the rest is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from exporter.foresight.progress import is_clock
from exporter.foresight.unscheduled import whenever_overflow
from exporter.foresight.forecast import MATCH_TOLERANCE
from exporter.foresight.forecast import HORIZON_SECONDS, DeviceForecast, ProcessState, demand_profile, process_curve

GROUNDING = {"learned": 1.0, "scaled": 0.6, "declared": 0.6, "trend": 0.4, "current": 1.0}
SINGLE_RUN = 0.9  # a profile learned from one run: a measurement, but of one run only
# Peak spread assumed for a profile with one run: as wide as 9 in 10 profiles learned from several
# runs (on the bench's 14 training runs, median 0.9 %, 90th percentile 2.7 %, 93 % within 1/30). So one
# run grounds 0.9, just enough for the imminent critical rule: a collision under 30 s away is most
# often a job that just started beside others learned once (docs/foresight.md, sixth round).
UNKNOWN_SPREAD = 1 / 30
SPREAD_WEIGHT = 3.0  # grounding of several runs: 1 - this x spread (0.85 at 5 %)
# Learned timings drift by about this share of how far ahead they are read. Co-tenants slowed
# by each other are read at the device's measured slowdown already (progress.device_slowdown),
# so what is left is run-to-run jitter of a few percent; 0.1 held back narrow collisions that
# were real (docs/foresight.md, "Confidence").
TIMING_SHARE = 0.05
# Runs whose profile is no clock are read at their age over one slowdown, which may be off by
# this share (co-tenants slow each other by 0-30 %; a device with no clock profile measures none)
SLOWDOWN_SHARE = 0.1
WHEN_UNKNOWN = ("declared", "trend")  # bases that say how much (or how fast), never when
MIN_MARGIN_SHARE = 0.02  # a grounded overflow needs this share of the device to be fully confident
CRITICAL_CONFIDENCE = 0.8  # the alerts' critical tier: gpushare_*_memory_contention_confidence_ratio >= this
HOLD_DOWN_SECONDS = 600.0  # a device's page is not repeated within this of its end unless its overflow grows
# The critical rules' keep_firing_for (alerts/gpushare-memory.yml): a page stays up this long after its
# contention clears, so a contention back within it is the same page going on, not a repeat to hold down
PAGE_KEPT_SECONDS = 240.0
HELD_DOWN = 0.79  # the most confidence a held-down contention gets (just under CRITICAL_CONFIDENCE)
# may_have_ended: a process younger than this is counted this old. Its age says little about how long it
# goes on before it has run a while: a job spends its first minutes starting (loading a model, warming up)
YOUNGEST_SECONDS = 300.0


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def peak_spread(state: ProcessState) -> float:
    """How far the typical (median) peak of its complete learned runs is below the peak it is
    forecast with, as a share of that peak (0..1). The median, not the lowest: a run whose spike
    fell between two polls is a missed sample, not a smaller job. The forecast peak can be above
    every complete run's: a running or killed run went higher (profiles.learn_running), and the
    timeline learned from complete runs is scaled up to it. Such a peak was seen, but not *when*
    in a run it comes, so a run-to-run spread that large is what it is."""
    profile = state.profile
    if profile is None or state.basis not in ("learned", "scaled"):
        return 0.0
    peaks = [p for p in profile.recent_peaks if p > 0]
    top = max([profile.peak_bytes] + peaks)
    if not peaks or top <= 0:
        return UNKNOWN_SPREAD
    spread = (top - _median(peaks)) / top
    return max(UNKNOWN_SPREAD, spread) if len(peaks) < 2 else spread


def trusted_spread(state: ProcessState) -> float:
    """The spread grounding() weighs: as peak_spread, but of an even number of complete runs the
    typical one is the upper of the two middle peaks, not their mean. A sampled peak is a lower
    bound (a poll can miss a spike, never see one that was not there), so of two runs that
    disagree the higher is taken as typical; the disagreement stays unexplained, so it grounds no
    more than one run does (at least UNKNOWN_SPREAD, or peak_spread if that is less). The margin
    check keeps peak_spread (ungrounded_share): a likely collision must still survive the mean."""
    profile = state.profile
    peaks = sorted(p for p in (profile.recent_peaks if profile is not None else ()) if p > 0)
    measured = peak_spread(state)
    if len(peaks) < 2 or len(peaks) % 2 or state.basis not in ("learned", "scaled"):
        return measured
    top = max(profile.peak_bytes, peaks[-1])
    upper = (top - peaks[len(peaks) // 2]) / top
    return max(upper, min(measured, UNKNOWN_SPREAD))


def _past_end(state: ProcessState) -> bool:
    """True when a learned run is already past its learned end: how long it goes on is a guess
    (forecast.process_curve holds it as long again as it is late), so what it is expected to
    hold at a later collision is not grounded by its profile."""
    profile = state.profile
    return (profile is not None and profile.duration_seconds is not None
            and state.position >= float(profile.duration_seconds))


def _gives_back(state: ProcessState) -> int:
    """Bytes a process without a profile holds now above its recent low, when it has given
    memory back lately (ProcessState.swing_bytes, from basis.recent_fall): a server's cache in
    load waves or a notebook that dropped a model is at a high of its own now, and nothing says
    it still holds that at a later collision. 0 for a learned run (its curve says when it falls)
    and for one that only grows or holds level (a leak)."""
    return 0 if state.profile is not None else state.swing_bytes


def _changes(state: ProcessState, until: float, grace: float) -> bool:
    """True when the learned curve of a process changes level before ``until`` (s from now): when
    that comes matters to the collision, as much as when a co-tenant grows."""
    steps, end = process_curve(state, grace)
    return any(0.0 < tau <= until for tau, _ in steps[1:]) or (end is not None and end <= until)


def late_growth(state: ProcessState, grace: float = 0.0) -> int:
    """Bytes a learned (or scaled) run's curve says it holds already, in the step it is in now, above what
    it holds, when that step is more than MATCH_TOLERANCE times what it holds; else 0.

    Such a run is late for its rise: a notebook's next cell, a server's next model, a phase that comes
    when it comes. Its position (progress) says it should be there by now, and the forecast holds it at
    that level from now on, but how late it will be is not in its profile: like a declared size, this
    growth says how much, not when. A run a little below its step (runs differ by a few percent: the same
    tolerance as forecast._level_ratio's), or one whose step began within the last poll (``grace``), is
    not late."""
    profile = state.profile
    if (profile is None or state.basis not in ("learned", "scaled") or not profile.usable
            or profile.peak_bytes * state.adjust <= MATCH_TOLERANCE * state.used_bytes  # no step is that high
            or state.position >= float(profile.duration_seconds)):
        return 0  # no learned step now (process_curve holds a run past its end at what it uses)
    began, level = None, 0
    for age, value in profile.scaled_timeline():  # the step it is in, as process_curve reads it at 0 s
        if age > state.position:
            break
        began, level = age, value
    # process_curve's value now: the step's (scaled by _level_ratio only within MATCH_TOLERANCE of it)
    expected = int(level * state.adjust)
    if began is None or expected <= MATCH_TOLERANCE * state.used_bytes:
        return 0
    if (state.position - began) * state.slowdown <= grace:
        return 0  # its step began within the last poll: on time as far as polls can tell
    return expected - state.used_bytes


def margin_growth(state: ProcessState, at_bytes: int) -> int:
    """Bytes of a process's forecast growth that only its outcome margin adds (``adjust`` above 1: its
    workload was killed unwarned before, exporter.foresight.calibration); 0 without one.

    The margin makes the forecast careful after a kill nobody warned about: a warning comes earlier.
    It is not a measurement: no run of the workload went that high. A page that needs it says "this
    run might go 5 % above anything seen", not "an OOM is likely": like a declared size, it is counted
    as ungrounded whole (docs/foresight.md, eighth round)."""
    if state.adjust <= 1.0 or state.profile is None:
        return 0
    growth = max(0, at_bytes - state.used_bytes)
    measured = max(0, int(at_bytes / state.adjust) - state.used_bytes)
    return max(0, growth - measured)


def may_have_ended(state: ProcessState, eta: float) -> int:
    """Bytes of what a process without a learned duration (a declared size, a trend) holds now that it may
    no longer hold ``eta`` seconds from now because it may have ended by then.

    Nothing says how long such a process runs. The forecast holds it for ever, but a process that has run
    ``age`` seconds is about as likely to stop within another ``age`` as to go on (the rule the forecast
    already uses for a learned run past its end: it goes on as long again as it is late): the share
    eta / (age + eta) of its memory is not grounded at a collision eta away, its age taken as at least
    YOUNGEST_SECONDS. 0 for a learned run (its profile says when it ends) and for a process with no growth
    basis (``current``: counting it lost a learned catch, docs/foresight.md, eighth round)."""
    if state.basis not in WHEN_UNKNOWN or eta <= 0:
        return 0
    return int(state.used_bytes * eta / (max(YOUNGEST_SECONDS, state.age_seconds) + eta))


def timing_drift(states: Sequence[ProcessState], growth: dict[int, int], eta: float, until: float = 0.0,
                 grace: float = 0.0) -> float:
    """Seconds by which the moment the processes meet may be off.

    Only processes whose learned curve moves before the overflow ends (they grow, or a spike of
    theirs ends) count:

    - learned timings drift from run to run by TIMING_SHARE of how far ahead they are read;
    - a run whose profile is no clock (progress.is_clock: periodic spikes, a server's load) is
      read at its age over one slowdown and never corrected by a landmark: where that slowdown
      is off by SLOWDOWN_SHARE, two such runs that started at different times are off from each
      other by that share of the difference of their ages. A collision of staggered runs'
      spikes is only likely if it survives that; replicas started together drift alike.
    """
    moving = [s for s in states if s.profile is not None and (growth.get(s.pid, 0) > 0 or _changes(s, until, grace))]
    if not moving:
        return TIMING_SHARE * eta
    free = [s.age_seconds for s in moving if not is_clock(s.profile)]
    stagger = max(free) - min(free) if len(free) > 1 else 0.0
    return TIMING_SHARE * eta + SLOWDOWN_SHARE * stagger


def grounding(state: ProcessState) -> float:
    """0..1: how well the growth its forecast adds is grounded (see module docstring)."""
    weight = GROUNDING.get(state.basis, 0.0)
    profile = state.profile
    if profile is not None and state.basis in ("learned", "scaled"):
        # several runs: the next one differs by about the spread of their peaks; one run: by
        # anything, so never more than SINGLE_RUN, and less when its forecast peak is above it
        spread = max(0.0, 1.0 - SPREAD_WEIGHT * trusted_spread(state))
        weight *= min(SINGLE_RUN, spread) if profile.runs < 2 else spread
    return weight


def ungrounded_share(state: ProcessState) -> float:
    """0..1: the share of its growth a collision must do without to be likely (the margin check).

    A learned or scaled profile's next run peaks about its spread below the forecast peak (the
    median of its complete runs is that far below; one run: UNKNOWN_SPREAD), and a scaled one's
    size is grounded only GROUNDING["scaled"]: what is left once both are taken away is grounded.
    The spread is taken once here, not SPREAD_WEIGHT times as in grounding(): that weight says how
    much a wide spread lowers the trust in the forecast, while the margin asks whether the
    overflow survives each run peaking where its typical run did (docs/foresight.md, seventh
    round). A declared size or a trend says how much, never when: none of its growth is grounded."""
    if state.basis in WHEN_UNKNOWN:
        return 1.0
    if state.profile is not None and state.basis in ("learned", "scaled"):
        return 1.0 - GROUNDING[state.basis] * max(0.0, 1.0 - peak_spread(state))
    return 1.0 - grounding(state)


def over_seconds(states: Sequence[ProcessState], forecast: DeviceForecast, grace: float = 0.0) -> float:
    """How long the demand stays above capacity from the first overflow on (seconds; inf: for good)."""
    other = forecast.peak_sum_bytes - sum(forecast.peaks.values())
    totals = demand_profile([process_curve(s, grace) for s in states], other)
    start = forecast.contention_in_seconds or 0.0
    for tau, total in totals:
        if tau > start and total <= (forecast.capacity_bytes or 0):
            return tau - start
    return float("inf")


@dataclass(frozen=True)
class ConfidenceFactors:
    """What one poll's raw confidence is the least of (contention_confidence), and what they rest on;
    the replay's miss classes (bench/foresight_replay.py components) read the same object."""
    grounded: float  # 0..1: growth-weighted grounding of the growth the collision needs
    clears: float  # 0..1: the overflow left once the ungrounded bytes are taken away, over the margin
    timing: float  # 0..1: how long the overflow lasts over how far the learned timings may drift
    ungrounded_bytes: float  # what clears takes away from the overflow
    over_seconds: float | None  # how long the demand stays over capacity; None: nothing rests on a forecast
    drift_seconds: float | None  # how far the learned timings may drift by then; None as above


def contention_confidence(states: Sequence[ProcessState], forecast: DeviceForecast,
                          grace: float = 0.0) -> float | None:
    """Confidence 0..1 (two decimals) of the predicted contention; None when none is predicted.

    ``grace``: the poll interval, as forecast_device was given it."""
    factors = confidence_factors(states, forecast, grace)
    return None if factors is None else round(min(factors.grounded, factors.clears, factors.timing), 2)


def confidence_factors(states: Sequence[ProcessState], forecast: DeviceForecast,
                       grace: float = 0.0) -> ConfidenceFactors | None:
    """The factors of contention_confidence; None when no contention is predicted."""
    headroom = forecast.headroom_bytes
    if forecast.contention_in_seconds is None or headroom is None or headroom >= 0:
        return None
    at = forecast.at_contention_bytes
    growth = {s.pid: max(0, at.get(s.pid, 0) - s.used_bytes) for s in states}
    total = sum(growth.values())
    if total <= 0:  # over capacity with what is held now: nothing rests on a forecast
        return ConfidenceFactors(1.0, 1.0, 1.0, 0.0, None, None)
    weights = {s.pid: grounding(s) for s in states}
    grounded = sum(weights[pid] * g for pid, g in growth.items()) / total
    # The overflow left once the growth each basis does not ground is taken away: a collision that
    # needs a profile's growth past its spread (ungrounded_share) to be right is not likely yet. A
    # declared size is held from now on and a trend is a straight line: neither says when the
    # process reaches that memory, so a collision that needs any of their growth to happen at the
    # moment a learned co-tenant peaks is not likely either: their growth counts as ungrounded whole.
    ungrounded = sum(ungrounded_share(s) * growth[s.pid] for s in states)
    if forecast.contention_in_seconds > grace:  # later than the next poll: what is held now may be gone by then
        ungrounded += sum(at.get(s.pid, 0) for s in states if _past_end(s))
        ungrounded += sum(_gives_back(s) for s in states)
        ungrounded += sum(may_have_ended(s, forecast.contention_in_seconds) for s in states)
    # growth a run is late for (late_growth), or that only its outcome margin adds (margin_growth), is
    # ungrounded whole: its part grounded above is taken away too
    ungrounded += sum((1.0 - ungrounded_share(s)) * min(late_growth(s, grace) + margin_growth(s, at.get(s.pid, 0)),
                                                        growth[s.pid]) for s in states if growth[s.pid])
    margin = max(MIN_MARGIN_SHARE * (forecast.capacity_bytes or 0), 1)
    clears = max(0.0, min(1.0, (-headroom - ungrounded) / margin))
    # Timing: an overflow that lasts less than the learned timings may drift by then (spikes
    # read far ahead on their learned ages) needs them to meet to the second: not likely yet.
    over = over_seconds(states, forecast, grace)
    eta = forecast.contention_in_seconds
    drift = timing_drift(states, growth, eta, eta + min(over, HORIZON_SECONDS), grace)
    timing = 1.0 if drift <= 0 else min(1.0, over / drift)
    if any(s.unscheduled_top for s in states):  # a peak of no fixed age: the overflow must hold whenever it comes
        clears = min(clears, _clears_whenever(states, forecast, grace, ungrounded, margin))
    return ConfidenceFactors(grounded, clears, timing, ungrounded, over, drift)


def _clears_whenever(states: Sequence[ProcessState], forecast: DeviceForecast, grace: float, ungrounded: float,
                     margin: float) -> float:
    """0..1: as ``clears`` in contention_confidence, of the overflow that holds whenever an awaited
    unscheduled peak comes (exporter.foresight.unscheduled.whenever_overflow)."""
    other = forecast.peak_sum_bytes - sum(forecast.peaks.values())
    over = whenever_overflow(states, [process_curve(s, grace) for s in states], other, forecast.capacity_bytes)
    return 1.0 if over is None else max(0.0, min(1.0, (over - ungrounded) / margin))


@dataclass(frozen=True)
class ConfidenceHold:
    """What one device's confidence remembers from poll to poll (see hold_confidence)."""

    held: float = 0.0  # highest confidence since its contention began
    seen: float = 0.0  # last poll (s) its contention was predicted
    paged_over: int = 0  # most overflow (bytes) predicted while it was at CRITICAL_CONFIDENCE
    cleared_at: float | None = None  # when the last contention that reached it cleared
    cleared_over: int = 0  # ... and its paged_over
    pids: frozenset[int] = frozenset()  # the processes on the device at the last poll its contention was predicted
    cleared_pids: frozenset[int] = frozenset()  # ... and those of the last contention that reached it and cleared
    due_since: float | None = None  # first of the polls in a row that predicted the collision within a poll ("now")
    due_late: bool = False  # ... and it is more than a poll ago (mark_due)
    due_over: int = 0  # most overflow (bytes) those polls predicted


def after_kill(hold: ConfidenceHold | None, now: float) -> ConfidenceHold | None:
    """What a device's confidence remembers once the poll at ``now`` noticed a (suspected) OOM kill on it.

    The collision its contention was held for has happened. If that contention is no longer predicted
    at this poll, it has ended with the kill: its held confidence is dropped, so a contention predicted
    again soon after (within the gap hold_confidence bridges) starts from its own confidence, not the
    one held for the collision that happened. Neither is it held down as a repeat: a contention after a
    kill is as often the restarted job meeting the survivors again (docs/foresight.md, seventh round).
    A contention still predicted at the kill's poll goes on as it was (a page stays up through a kill)."""
    if hold is None or hold.seen >= now:
        return hold
    return replace(hold, held=0.0, paged_over=0)


def hold_confidence(raw: float | None, hold: ConfidenceHold | None, now: float, overflow: int,
                    capacity: int | None, grace: float,
                    pids: frozenset[int] = frozenset()) -> tuple[float | None, ConfidenceHold | None]:
    """The confidence a device exports this poll, and what it remembers for the next.

    - Held at its highest while the contention stays predicted (a gap of up to ``grace`` seconds
      included, as the warning rule's keep_firing_for): a run between two landmarks, or a co-tenant just
      killed, must not turn a page back into a warning.
    - Hysteresis: once a contention that reached CRITICAL_CONFIDENCE has cleared, its page stays
      up PAGE_KEPT_SECONDS (the critical rules' keep_firing_for); a contention back by then only
      keeps that page going (a peak that comes late, co-tenants slower than when it was learned, is
      that collision), so it is not held. Within HOLD_DOWN_SECONDS of the page's end a new one on
      the device stays below CRITICAL_CONFIDENCE unless its overflow exceeds the cleared one's by
      MIN_MARGIN_SHARE of the device: a forecast that said yes, then no, then yes again about the
      same overflow has not learned anything new, and the on-call was paged for it already.
      After PAGE_KEPT_SECONDS + HOLD_DOWN_SECONDS it still stays below while the device runs no
      process but those of the cleared page (``pids``): the same runs, predicted to meet again by
      the same overflow, are what that page said and was wrong about; a new run on the device is news.
    - A collision predicted within the next poll at more than one poll in a row without coming is late
      (``hold.due_late``, set by mark_due before this call): it stays below CRITICAL_CONFIDENCE unless it
      paged already.
    ``raw``: contention_confidence() of this poll (None: no contention predicted); ``overflow``:
    bytes above capacity (-headroom) when predicted; ``pids``: the processes on the device.
    """
    if raw is None:
        return None, hold
    hold = hold or ConfidenceHold(seen=now)
    if now - hold.seen > grace:  # the contention had cleared: a new one begins
        if hold.held >= CRITICAL_CONFIDENCE:
            hold = replace(hold, cleared_at=hold.seen, cleared_over=hold.paged_over, cleared_pids=hold.pids)
        hold = replace(hold, held=0.0, paged_over=0)
    if (hold.held < CRITICAL_CONFIDENCE and hold.cleared_at is not None
            and PAGE_KEPT_SECONDS < now - hold.cleared_at < PAGE_KEPT_SECONDS + HOLD_DOWN_SECONDS
            and overflow <= hold.cleared_over + MIN_MARGIN_SHARE * (capacity or 0)):
        raw = min(raw, HELD_DOWN)
    if (hold.held < CRITICAL_CONFIDENCE and hold.cleared_at is not None and now - hold.cleared_at >= PAGE_KEPT_SECONDS + HOLD_DOWN_SECONDS
            and pids and pids <= hold.cleared_pids and overflow <= hold.cleared_over + MIN_MARGIN_SHARE * (capacity or 0)):
        raw = min(raw, HELD_DOWN)  # only the runs of the cleared page, and no more overflow: the same repeat
    if hold.due_late:
        raw = min(raw, HELD_DOWN)
    confidence = max(raw, hold.held)
    paged_over = max(hold.paged_over, overflow) if confidence >= CRITICAL_CONFIDENCE else hold.paged_over
    return confidence, replace(hold, held=confidence, seen=now, paged_over=paged_over, pids=pids)


def mark_due(hold: ConfidenceHold | None, now: float, eta: float | None, poll: float,
             overflow: int = 0, capacity: int | None = None) -> ConfidenceHold | None:
    """What a device's confidence remembers once the poll at ``now`` predicted its collision ``eta`` seconds
    ahead (None: no contention predicted); call it before hold_confidence, which it tells (``due_late``)
    whether the collision is late.

    "Now" (an ETA within the next poll) is what the forecast says when a run should hold its next step
    already: a run held at a landmark it has not crossed (progress: a late peak is still to come), or a
    step its position is in. The OOM such a forecast predicts comes at once or not at all: a collision
    still "now" more than a poll later, at every poll in between, has not come, and the run is late for
    its rise, as late_growth says of a run whose step began more than a poll ago; when it comes is not in
    its profile (corpus 2 seed 6006 ep 34: a trainer's evaluation spike "now" for 35 s, that came after its
    co-tenant had ended; docs/foresight.md, eighth round).

    Late is said of one claim: the overflow the polls in a row predicted. A poll whose overflow exceeds the
    largest of them by MIN_MARGIN_SHARE of the device (``overflow`` bytes, ``capacity``) is news, as
    hold_confidence's repeat rules say, and starts its own count: memory that did move towards a larger
    collision is not the late step (corpus 3 seed 8008 ep 18: "now" by 1.1 GiB at raw confidence 0.14
    for 20 s, then a vLLM replica's preallocation put it at 12.1 GiB and 0.93, and was held to a warning)."""
    if eta is None:
        return hold
    if eta > poll:  # ahead: nothing is due (most contended polls: no new hold)
        return hold if hold is None or hold.due_since is None else replace(hold, due_since=None, due_late=False)
    hold = hold or ConfidenceHold(seen=now)
    in_a_row = hold.due_since is not None and now - hold.seen <= 1.5 * poll  # the last poll said "now" too
    if in_a_row and overflow > hold.due_over + MIN_MARGIN_SHARE * (capacity or 0):
        in_a_row = False  # a larger collision than the one that was late: news
    since = hold.due_since if in_a_row else now
    due_over = max(hold.due_over, overflow) if in_a_row else overflow
    return replace(hold, due_since=since, due_late=now - since > poll, due_over=due_over)
