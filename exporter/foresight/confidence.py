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

from exporter.foresight.forecast import DeviceForecast, ProcessState

GROUNDING = {"learned": 1.0, "scaled": 0.6, "declared": 0.6, "trend": 0.4, "current": 1.0}
SINGLE_RUN = 0.85  # a profile learned from one run: a measurement, but of one run only
UNKNOWN_SPREAD = 0.05  # peak spread assumed for a profile with one run (a few percent is typical)
MIN_MARGIN_SHARE = 0.02  # a grounded overflow needs this share of the device to be fully confident
CRITICAL_CONFIDENCE = 0.8  # the alerts' critical tier: gpushare_*_memory_contention_confidence_ratio >= this


def peak_spread(state: ProcessState) -> float:
    """How much the learned peaks of its profile differ, as a share of the highest (0..1)."""
    profile = state.profile
    if profile is None or state.basis not in ("learned", "scaled"):
        return 0.0
    peaks = [p for p in profile.recent_peaks if p > 0]
    if len(peaks) < 2:
        return UNKNOWN_SPREAD
    return (max(peaks) - min(peaks)) / max(peaks)


def grounding(state: ProcessState) -> float:
    """0..1: how well the growth its forecast adds is grounded (see module docstring)."""
    weight = GROUNDING.get(state.basis, 0.0)
    profile = state.profile
    if profile is not None and state.basis in ("learned", "scaled"):
        # one run: its next run may differ by anything; several: by about the spread of their peaks
        weight *= SINGLE_RUN if profile.runs < 2 else max(0.0, 1.0 - 2.0 * peak_spread(state))
    return weight


def contention_confidence(states: Sequence[ProcessState], forecast: DeviceForecast) -> float | None:
    """Confidence 0..1 (two decimals) of the predicted contention; None when none is predicted."""
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
    # needs a declared size or a one-run profile to be right to the byte is not likely yet.
    ungrounded = sum((1.0 - weights[pid]) * g for pid, g in growth.items())
    margin = max(MIN_MARGIN_SHARE * (forecast.capacity_bytes or 0), 1)
    clears = max(0.0, min(1.0, (-headroom - ungrounded) / margin))
    return round(min(grounded, clears), 2)
