"""When a memory domain's forecast is recomputed, and what a poll between two forecasts reuses.

Learning stays per poll: every poll's samples go into the runs' records, the trend window and
the outcome bookkeeping (exporter.foresight.state). The forecast of a domain (the runs' plans
and curves, peak demand, time to contention, confidence, its DeviceRow and ProcessRows) is
recomputed only when something it rests on changed:

- the domain's processes changed: one arrived or exited (a kill included), a pid now runs
  another workload, or a process's identity labels (name, pod, container, replica, MPS client)
  changed; or its capacity did;
- memory moved: the domain's use, or the sum of its processes' moves, by more than MOVE_SHARE
  of its capacity since the forecast (or a use became known or unknown). Between forecasts the
  byte figures served (headroom, peak demand, expected peaks) rest on memory within that share
  of the capacity of what it is now;
- anything learned: a usable profile of one of its workloads (one a forecast can rest on) was
  added, replaced or dropped, an outcome adjustment changed, or the domain's contention warning
  went up or down;
- a collision is predicted within IMMINENT_SECONDS (then every poll forecasts);
- or FORECAST_SECONDS passed on the poll clock since the forecast. Leads are minutes, the
  contention rules wait 10-30 s (alerts/: ``for``) and were tuned and scored on forecasts made
  FORECAST_SECONDS apart (bench/foresight_accuracy.py polls every 5 s), so a forecast a few
  seconds old costs them nothing.

At a poll interval of FORECAST_SECONDS or more every poll forecasts, as before. In between,
the reused forecast's time-derived figure is advanced: seconds to contention count down by the
time elapsed since the forecast (never below 0). The exhaustion ETA comes from the trend
window, which takes every poll, and is recomputed every poll.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

FORECAST_SECONDS = 5.0  # the longest a domain's forecast is reused (poll clock seconds)
MOVE_SHARE = 0.01  # memory moved by more than this share of the domain's capacity: forecast again
# A collision predicted this close is forecast every poll: the imminent critical rule's ETA bound
# (alerts/gpushare-memory.yml), where each poll's news counts, and the confidence's bookkeeping of a
# collision due "now" counts polls in a row (exporter.foresight.confidence).
IMMINENT_SECONDS = 30.0


@dataclass
class HeldForecast:
    """The last forecast of one memory domain and what it rested on."""

    at: float  # poll clock of the forecast
    lives: tuple  # the LiveRun of each process, in order (identity: a new run is a new object)
    identity: tuple  # each process's labels (see identity_of)
    capacity: int | None
    used: int | None  # the domain's use at the forecast
    process_used: tuple  # each process's use at the forecast
    learned: tuple  # what was learned of its runs' workloads then (Foresight._forecast_domain)
    warned: bool  # the domain's contention warning was up
    device: object  # the DeviceRow (or None) of the forecast, as exported then
    rows: list  # its ProcessRows


def identity_of(processes: Sequence) -> tuple:
    """What a domain's ProcessRows take from its processes besides memory."""
    return tuple((p.pid, p.gi, p.name, p.is_mps_client, p.namespace, p.pod, p.container, p.replica)
                 for p in processes)


def reusable(held: HeldForecast | None, now: float, interval: float, longest: float, lives: Sequence,
             processes: Sequence, capacity: int | None, used: int | None, learned: tuple, warned: bool) -> bool:
    """True when ``held`` still stands for this poll of its domain (module docstring); ``longest``:
    the most seconds a forecast is reused (FORECAST_SECONDS unless the Foresight was told otherwise)."""
    if held is None or interval >= longest:
        return False
    contention = None if held.device is None else held.device.forecast.contention_in_seconds
    if contention is not None and contention - (now - held.at) <= IMMINENT_SECONDS:
        return False
    # younger than ``longest`` at this poll, with half a poll of slack for jitter (at 1 s polls: reused
    # at 1-4 s, forecast afresh at 5 s; at 5 s polls: every poll)
    if now < held.at or now - held.at > longest - interval / 2:
        return False
    if (capacity != held.capacity or learned != held.learned or warned != held.warned
            or len(lives) != len(held.lives) or (used is None) != (held.used is None)):
        return False
    if any(a is not b for a, b in zip(lives, held.lives)):
        return False
    if capacity:  # the forecast's byte figures are stale by at most what moved: a share of capacity
        budget = MOVE_SHARE * capacity
        if used is not None and held.used is not None and abs(used - held.used) > budget:
            return False
        drift = 0
        for before, p in zip(held.process_used, processes):
            now_used = p.used_memory_bytes
            if (before is None) != (now_used is None):
                return False
            if before is not None:
                drift += abs(now_used - before)
        if drift > budget:
            return False
    elif used != held.used or any(b != p.used_memory_bytes for b, p in zip(held.process_used, processes)):
        return False
    return identity_of(processes) == held.identity


def advanced(device, held_at: float, now: float, eta: float | None, row_maker):
    """The held DeviceRow as of ``now``: contention ETA counted down, this poll's exhaustion ETA."""
    if device is None:
        return None
    forecast = device.forecast
    contention = forecast.contention_in_seconds
    if contention is not None:
        forecast = replace(forecast, contention_in_seconds=max(0.0, contention - (now - held_at)))
    elif eta == device.exhaustion_eta_seconds:
        return device  # nothing time-derived changed: the same row
    return row_maker(device.gpu, device.uuid, device.gi, device.profile, forecast, eta, device.confidence)
