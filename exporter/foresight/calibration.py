"""Learning from outcomes: per workload, how far its forecasts turned out to be off.

The exporter counts contention warnings that ended without an OOM and suspected OOM kills
that came unwarned (exporter.foresight.outcome). Per workload (the profile key without its
device size, so what is learned on one size holds on the others) this keeps:

- ``quiet``: runs of the workload that were under a warning that then ended quietly, and
  ``slack``: how far below the forecast their peaks really came, as a share of the forecast
  (a running mean, 0..MAX_SLACK);
- ``unwarned_kills``: its runs that vanished as suspected OOM kills with no warning up.

``factor`` turns this into the multiplier its learned (or scaled) curve is forecast with:
below 1 once QUIET_RUNS quiet warnings agree (the observed slack, bounded), above 1 after a
kill nobody warned about (MARGIN_PER_KILL each, bounded), always within
[1 - MAX_SLACK, 1 + MAX_MARGIN]. A kill undoes slack: safety wins over quiet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

QUIET_RUNS = 2  # quiet warnings needed before the slack is used
MAX_SLACK = 0.15  # never forecast a workload more than this share below its learned curve
MARGIN_PER_KILL = 0.05  # each unwarned kill raises its forecast by this share ...
MAX_MARGIN = 0.15  # ... up to this
SLACK_WEIGHT = 0.5  # weight of the newest quiet run in the running mean


@dataclass(frozen=True)
class WorkloadOutcome:
    """What warnings and kills taught about one workload's forecasts."""

    workload: str
    quiet: int = 0  # runs under a warning that ended without an OOM
    slack: float = 0.0  # mean share by which their real peak stayed below the forecast one
    unwarned_kills: int = 0  # suspected OOM kills of its runs with no warning up
    updated_at: float = 0.0

    @property
    def factor(self) -> float:
        """Multiplier of its learned curve (see module docstring)."""
        if self.unwarned_kills:
            return 1.0 + min(MAX_MARGIN, MARGIN_PER_KILL * self.unwarned_kills)
        if self.quiet >= QUIET_RUNS:
            return 1.0 - min(MAX_SLACK, self.slack)
        return 1.0


def quiet_run(old: WorkloadOutcome | None, workload: str, forecast_peak: int, real_peak: int,
              now: float) -> WorkloadOutcome:
    """A run was under a warning that ended quietly: fold in its slack."""
    old = old or WorkloadOutcome(workload)
    share = 0.0 if forecast_peak <= 0 else min(MAX_SLACK, max(0.0, 1.0 - real_peak / forecast_peak))
    slack = share if old.quiet == 0 else (1 - SLACK_WEIGHT) * old.slack + SLACK_WEIGHT * share
    return replace(old, quiet=old.quiet + 1, slack=round(slack, 4), updated_at=now)


def unwarned_kill(old: WorkloadOutcome | None, workload: str, now: float) -> WorkloadOutcome:
    """A run of the workload vanished as a suspected OOM kill with no warning up."""
    old = old or WorkloadOutcome(workload)
    return replace(old, unwarned_kills=old.unwarned_kills + 1, quiet=0, slack=0.0, updated_at=now)


def outcome_to_dict(o: WorkloadOutcome) -> dict[str, Any]:
    return {"workload": o.workload, "quiet": o.quiet, "slack": o.slack, "unwarned_kills": o.unwarned_kills,
            "updated_at": o.updated_at}


def outcome_from_dict(d: Any) -> WorkloadOutcome:
    """Raises ValueError for a row that is not one."""
    if not isinstance(d, dict) or not isinstance(d.get("workload"), str):
        raise ValueError("not an outcome object")
    quiet, kills = d.get("quiet", 0), d.get("unwarned_kills", 0)
    slack, updated = d.get("slack", 0.0), d.get("updated_at", 0.0)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (quiet, kills)):
        raise ValueError("quiet and unwarned_kills must be counts")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (slack, updated)) \
            or not 0 <= slack <= MAX_SLACK:
        raise ValueError(f"slack must be 0..{MAX_SLACK}")
    return WorkloadOutcome(d["workload"], quiet, float(slack), kills, float(updated))


class OutcomeLearner:
    """Keeps the WorkloadOutcome of each workload up to date from runs, warnings and kills.

    A run under an up warning remembers the highest peak its learned curve forecast
    (unadjusted, so slack is measured against the profile, not against itself). When the
    warning settles without an OOM the run counts as quiet; its slack is folded in when it
    ends normally (a run that ended before the warning settled waits up to ``grace`` seconds).
    """

    def __init__(self, outcomes: dict[str, WorkloadOutcome], grace: float) -> None:
        self.outcomes = outcomes
        self.dirty: set[str] = set()
        self.grace = grace
        self._waiting: list[tuple[Any, str, int, int, float]] = []  # (device, workload, forecast, real, ended)

    def factor(self, workload: str) -> float:
        outcome = self.outcomes.get(workload)
        return 1.0 if outcome is None else outcome.factor

    def _set(self, outcome: WorkloadOutcome) -> None:
        self.outcomes[outcome.workload] = outcome
        self.dirty.add(outcome.workload)

    def run_ended(self, live, device, workload: str, suspected: bool, warned: bool, now: float) -> None:
        """A run left its device: a suspected kill without warning, or a (maybe quiet) warned run."""
        if suspected:
            if not warned:
                self._set(unwarned_kill(self.outcomes.get(workload), workload, now))
            return
        if not live.warned_peak:
            return
        if live.quiet:
            self._set(quiet_run(self.outcomes.get(workload), workload, live.warned_peak, live.run.peak_bytes, now))
        else:
            self._waiting.append((device, workload, live.warned_peak, live.run.peak_bytes, now))

    def settled(self, settled: list, lives, now: float) -> None:
        """Warnings that settled this poll ((device, oom) each); ``lives``: (device, LiveRun) pairs."""
        quiet = {device for device, oom in settled if not oom}
        loud = {device for device, oom in settled if oom}
        for device, live in lives:
            if live.warned_peak:
                if device in quiet:
                    live.quiet = True
                elif device in loud:
                    live.warned_peak, live.quiet = 0, False
        keep = []
        for device, workload, forecast, real, ended in self._waiting:
            if device in quiet:
                self._set(quiet_run(self.outcomes.get(workload), workload, forecast, real, now))
            elif device not in loud and now - ended <= self.grace:
                keep.append((device, workload, forecast, real, ended))
        self._waiting = keep
