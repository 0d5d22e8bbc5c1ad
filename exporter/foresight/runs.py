"""Which learned profile each live run follows, on which basis, and its view for the forecast.

Split from exporter.foresight.state (which owns the per-poll loop, learning and persistence):
this module holds what one watched run needs from one poll to the next (:class:`LiveRun`) and
the choice of its basis (exporter.foresight.forecast lists them): its workload's profile for
this device size, else the same workload's profile of another size (scaled, then calibrated
to the run), else a declared size, its own trend, or what it uses now.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.foresight.basis import (
    DECLARED_VAR,
    calibrated_profile,
    declared_bytes,
    is_steady,
    recent_fall,
    scaled_profile,
    trend,
    workload_of,
)
from exporter.foresight.forecast import ProcessState, follows
from exporter.foresight.profiles import RunRecorder, WorkloadProfile
from exporter.foresight.progress import RunProgress
from exporter.foresight.result import positional_maker
from exporter.foresight.unscheduled import still_to_come, unscheduled
from exporter.snapshot import ProcessInfo

TREND_REFRESH = 10.0  # seconds of a run's age between refits of its trend
_process_state = positional_maker(ProcessState)  # ProcessState(*every field), built faster


@dataclass
class LiveRun:
    """A run being watched and what its device looked like when it was last seen."""

    run: RunRecorder
    last_seen: float  # Unix seconds
    device_fill: float  # used / capacity of its device then, 0..1
    neighbours: int  # processes on its device then, itself included
    progress: RunProgress | None = None  # landmarks of its profile passed (see progress.py)
    fed_age: float = 0.0  # age of the last sample fed to progress
    fed_peak: int = 0  # the run's peak then
    limit_fill: float = 0.0  # used / its MPS pinned memory limit then, 0..1 (0 without a limit)
    ends_at: float | None = None  # when its profile expected it to end, as of its last sighting
    calibrated: tuple | None = None  # (scaled profile, the same rescaled to this run's level)
    trend: tuple | None = None  # (run age it was fitted at, (bytes/s, seconds), recent_fall) for the trend basis
    warned_peak: int = 0  # highest peak its learned curve forecast (before outcome adjustment) while warned
    quiet: bool = False  # a warning it was under ended without an OOM


class RunPlanner:
    """Picks each run's profile and basis; shares the Foresight's ``profiles`` dict (not a copy)."""

    def __init__(self, profiles: dict[str, WorkloadProfile]) -> None:
        self.profiles = profiles
        self.sizes: dict[str, set[str]] = {}  # workload key -> its profile keys (one per device size)
        # workload key -> a count bumped whenever one of its profiles is added, replaced or dropped
        # (the Foresight calls index()/forget() for every change to ``profiles``)
        self._generation: dict[str, int] = {}
        for key in profiles:
            self.index(key)
        self._scaled_cache: dict[str, tuple] = {}
        self._declared_cache: dict[str, int | None] = {}

    def index(self, key: str) -> None:
        """Note a new or changed profile, so runs of its workload on other sizes find it."""
        workload = workload_of(key)
        self.sizes.setdefault(workload, set()).add(key)
        self._generation[workload] = self._generation.get(workload, 0) + 1

    def forget(self, key: str) -> None:
        """A profile was dropped."""
        workload = workload_of(key)
        self.sizes.get(workload, set()).discard(key)
        self._generation[workload] = self._generation.get(workload, 0) + 1

    def plan(self, live: LiveRun, capacity: int | None, slowdown: float, interval: float):
        """(profile, basis, progress) of a live run: the profile it follows, if any (see basis.py)."""
        run = live.run
        profile, basis = self._usable(run.key), "learned"
        if profile is None:
            profile, basis = self._scaled(run.key, capacity), "scaled"
            if profile is not None and not follows(profile, run.peak_bytes, run.last_age, slowdown):
                profile = self._calibrated(live, profile, slowdown)
        if profile is None or not follows(profile, run.peak_bytes, run.last_age, slowdown):
            return None, "", None
        progress = live.progress
        if progress is None or progress.profile is not profile:  # first look, or the profile learned more
            progress = live.progress = RunProgress(profile)
            peak = 0
            for age, value in run.points:
                peak = max(peak, value)
                progress.feed(age, value, peak, slowdown, interval)
        elif run.points and run.points[-1][0] > live.fed_age:
            points = run.points
            first = len(points) - 1
            while first > 0 and points[first - 1][0] > live.fed_age:
                first -= 1  # samples taken while the forecast was reused (exporter.foresight.cadence)
            peak = live.fed_peak
            for age, value in points[first:-1]:
                if value > peak:
                    peak = value
                progress.feed(age, value, peak, slowdown, interval)
            age, value = points[-1]
            progress.feed(age, value, run.peak_bytes, slowdown, interval)
        live.fed_age = run.points[-1][0] if run.points else 0.0
        live.fed_peak = run.peak_bytes
        if progress.smaller:
            return None, "", None
        return profile, basis, progress

    @staticmethod
    def _calibrated(live: LiveRun, profile: WorkloadProfile, slowdown: float) -> WorkloadProfile | None:
        """A profile learned on another size, rescaled to the level this run holds steady at.

        Whether a workload scales with its device was a guess (basis.scaled_profile); a run
        that holds steady at a level its profile also holds at that age says by how much it
        really differs. Kept for the run once made, so its landmarks stay put.
        """
        made = live.calibrated
        if made is not None and made[0] is profile:
            return made[1]
        run = live.run
        if not run.points or not is_steady(run.points, run.points[-1][1]):
            return None
        new = calibrated_profile(profile, run.points[-1][1], run.last_age / slowdown)
        if new is not None:
            live.calibrated = (profile, new)
        return new

    def state(self, proc: ProcessInfo, live: LiveRun, plan, now: float, slowdown: float) -> ProcessState:
        """The forecast's view of one process, on the best basis it has (see forecast.py)."""
        profile, basis, progress = plan
        run, used = live.run, proc.used_memory_bytes or 0
        age = run.age(now)
        declared = self._declared(proc)
        if profile is not None:
            speed = progress.slowdown(age, slowdown)
            # its workload peaks at no fixed age and it is late for its peak: held till its end (unscheduled.py)
            top = still_to_come(profile, run.peak_bytes, age, speed) if unscheduled(profile) else 0
            # every field in order (ProcessState's), adjust and swing_bytes at their defaults
            return _process_state(proc.pid, used, age, profile, progress.position(age, speed), speed, basis,
                                  declared or 0, 0.0, 0.0, is_steady(run.points, used), 1.0, 0, top)
        (slope, horizon), fall = self._run_trend(live)
        basis = "declared" if declared else "trend" if slope > 0 else "current"
        # what it holds above its recent low, if it has given memory back before (basis.recent_fall)
        given = 0 if fall is None or fall[1] <= 0 else min(fall[1], max(0, used - fall[0]))
        return _process_state(proc.pid, used, age, None, 0.0, 1.0, basis, declared or 0, slope, horizon, False, 1.0,
                              given, 0)

    @staticmethod
    def _run_trend(live: LiveRun) -> tuple[tuple[float, float], tuple[int, int] | None]:
        """(basis.trend(), basis.recent_fall()) of a run, refreshed every TREND_REFRESH seconds of
        its age (a line fitted on minutes of samples does not change from one poll to the next)."""
        run = live.run
        cached = live.trend
        if cached is None or run.last_age - cached[0] >= TREND_REFRESH or run.last_age < cached[0]:
            cached = live.trend = (run.last_age, trend(run.points, run.last_age) if run.samples >= 4 else (0.0, 0.0),
                                   recent_fall(run.points, run.last_age))
        return cached[1], cached[2]

    def _scaled(self, key: str, capacity: int | None) -> WorkloadProfile | None:
        """This workload's profile learned on another device size, scaled to ``capacity``."""
        workload = workload_of(key)
        others = self.sizes.get(workload)
        if not others or (len(others) == 1 and key in others):
            return None  # no other size learned (scaled_profile of no candidates), the usual case
        cached = self._scaled_cache.get(key)
        generation = self._generation.get(workload, 0)
        if cached is not None and cached[2] == generation and cached[0][1] == capacity:
            return cached[1]  # none of the workload's profiles changed since: the same candidates
        candidates = [self.profiles[k] for k in others if k != key and k in self.profiles]
        cache_key = (key, capacity, tuple((p.key, p.updated_at) for p in candidates))
        if cached is None or cached[0] != cache_key:
            cached = (cache_key, scaled_profile(candidates, capacity))
        self._scaled_cache[key] = (cached[0], cached[1], generation)
        return cached[1]

    def _declared(self, proc: ProcessInfo) -> int | None:
        """Bytes the process declared in its environment, cached per declaration."""
        cache_key = (proc.environ or {}).get(DECLARED_VAR, "")
        if not cache_key:
            return None
        if cache_key not in self._declared_cache:
            if len(self._declared_cache) > 10000:  # pids churn; the cache only saves re-parsing
                self._declared_cache.clear()
            self._declared_cache[cache_key] = declared_bytes(proc.environ or {})
        return self._declared_cache[cache_key]

    def _usable(self, key: str) -> WorkloadProfile | None:
        profile = self.profiles.get(key)
        return profile if profile is not None and profile.usable else None
