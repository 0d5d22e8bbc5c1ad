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
the predicted overflow still clears capacity once the growth they do not ground is taken
away (a collision that needs every weakly grounded byte to be right is a coin toss, not a
likely OOM), over MIN_MARGIN_SHARE of the device.
It exists only while contention is predicted. The critical tier of the contention alerts
fires at CRITICAL_CONFIDENCE or more (docs/alerts.md); the rest is a warning.
"""

from __future__ import annotations

from typing import Sequence

from exporter.foresight.forecast import DeviceForecast, ProcessState, demand_profile, process_curve

GROUNDING = {"learned": 1.0, "scaled": 0.6, "declared": 0.6, "trend": 0.4, "current": 1.0}
SINGLE_RUN = 0.85  # a profile learned from one run: a measurement, but of one run only
UNKNOWN_SPREAD = 0.05  # peak spread assumed for a profile with one run (a few percent is typical)
SPREAD_WEIGHT = 3.0  # grounding of several runs: 1 - this x spread (0.85 at 5 %)
# Learned timings drift by about this share of how far ahead they are read. Co-tenants slowed
# by each other are read at the device's measured slowdown already (progress.device_slowdown),
# so what is left is run-to-run jitter of a few percent; 0.1 held back narrow collisions that
# were real (docs/foresight.md, "Confidence").
TIMING_SHARE = 0.05
SLOWDOWN_SHARE = 0.1
ETA_MODE = "eta"
WHEN_UNKNOWN = ("declared", "trend")  # bases that say how much (or how fast), never when
MIN_MARGIN_SHARE = 0.02  # a grounded overflow needs this share of the device to be fully confident
CRITICAL_CONFIDENCE = 0.8  # the alerts' critical tier: gpushare_*_memory_contention_confidence_ratio >= this


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


def timing_spread(state: ProcessState) -> float:
    """How much when its runs reach their peak varies from run to run, as a share of that age
    (0..1): (latest - earliest) / median of the ages at which its last complete runs first came
    within PEAK_BAND of their peak (WorkloadProfile.recent_peak_ages). TIMING_SHARE when fewer
    than two runs say: one run is no spread, but it is not no drift either."""
    profile = state.profile
    if profile is None or state.basis not in ("learned", "scaled"):
        return 0.0
    ages = [a for a in profile.recent_peak_ages if a >= 0]
    if len(ages) < 2:
        return TIMING_SHARE
    middle = _median(ages)
    if middle <= 0:
        return TIMING_SHARE
    return min(1.0, (max(ages) - min(ages)) / middle)


def timing_drift(states: Sequence[ProcessState], growth: dict[int, int], eta: float) -> float:
    """Seconds by which the moment the growing processes meet may be off (see module docstring).

    - Each growing process's learned timing drifts from run to run by its timing_spread (at least
      TIMING_SHARE) of how far ahead it is read: ETA_MODE "eta" reads that from now, "anchor" from
      the last landmark it was seen to cross (anchor_age; its start when none).
    - Their positions are read at one slowdown; where it is off by SLOWDOWN_SHARE, runs that
      started at different times (or last crossed a landmark at different times) drift apart by
      that share of the difference: a staggered start is only a collision if the stagger holds.
    """
    growing = [s for s in states if growth.get(s.pid, 0) > 0 and s.profile is not None]
    if not growing:
        return TIMING_SHARE * eta
    since = [max(0.0, s.age_seconds - s.anchor_age) for s in growing]
    jitter = max(max(TIMING_SHARE, timing_spread(s)) * (eta + (a if ETA_MODE == "anchor" else 0.0))
                 for s, a in zip(growing, since))
    return jitter + SLOWDOWN_SHARE * (max(since) - min(since))


def grounding(state: ProcessState) -> float:
    """0..1: how well the growth its forecast adds is grounded (see module docstring)."""
    weight = GROUNDING.get(state.basis, 0.0)
    profile = state.profile
    if profile is not None and state.basis in ("learned", "scaled"):
        # several runs: the next one differs by about the spread of their peaks; one run: by
        # anything, so never more than SINGLE_RUN, and less when its forecast peak is above it
        spread = max(0.0, 1.0 - SPREAD_WEIGHT * peak_spread(state))
        weight *= min(SINGLE_RUN, spread) if profile.runs < 2 else spread
    return weight


def over_seconds(states: Sequence[ProcessState], forecast: DeviceForecast, grace: float = 0.0) -> float:
    """How long the demand stays above capacity from the first overflow on (seconds; inf: for good)."""
    other = forecast.peak_sum_bytes - sum(forecast.peaks.values())
    totals = demand_profile([process_curve(s, grace) for s in states], other)
    start = forecast.contention_in_seconds or 0.0
    for tau, total in totals:
        if tau > start and total <= (forecast.capacity_bytes or 0):
            return tau - start
    return float("inf")


def contention_confidence(states: Sequence[ProcessState], forecast: DeviceForecast,
                          grace: float = 0.0) -> float | None:
    """Confidence 0..1 (two decimals) of the predicted contention; None when none is predicted.

    ``grace``: the poll interval, as forecast_device was given it."""
    headroom = forecast.headroom_bytes
    if forecast.contention_in_seconds is None or headroom is None or headroom >= 0:
        return None
    at = forecast.at_contention_bytes
    growth = {s.pid: max(0, at.get(s.pid, 0) - s.used_bytes) for s in states}
    total = sum(growth.values())
    if total <= 0:  # over capacity with what is held now: nothing rests on a forecast
        return 1.0
    weights = {s.pid: grounding(s) for s in states}
    grounded = sum(weights[pid] * g for pid, g in growth.items()) / total
    # The overflow left once the growth each basis does not ground is taken away: a collision that
    # needs a declared size or a one-run profile to be right to the byte is not likely yet. A
    # declared size is held from now on and a trend is a straight line: neither says when the
    # process reaches that memory, so a collision that needs any of their growth to happen at the
    # moment a learned co-tenant peaks is not likely either: their growth counts as ungrounded whole.
    when_unknown = {s.pid for s in states if s.basis in WHEN_UNKNOWN}
    ungrounded = sum((1.0 if pid in when_unknown else 1.0 - weights[pid]) * g for pid, g in growth.items())
    margin = max(MIN_MARGIN_SHARE * (forecast.capacity_bytes or 0), 1)
    clears = max(0.0, min(1.0, (-headroom - ungrounded) / margin))
    # Timing: an overflow that lasts less than the learned timings may drift by then (spikes
    # read far ahead on their learned ages) needs them to meet to the second: not likely yet.
    drift = timing_drift(states, growth, forecast.contention_in_seconds)
    timing = 1.0 if drift <= 0 else min(1.0, over_seconds(states, forecast, grace) / drift)
    return round(min(grounded, clears, timing), 2)
