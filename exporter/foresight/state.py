"""Foresight: learns workload profiles from each poll and forecasts memory contention.

The poller calls :meth:`Foresight.observe` with every Snapshot; the forecast collector
(exporter.collectors.forecast) renders :meth:`Foresight.result`. All times are on the clock
of ``now`` (by default ``Snapshot.timestamp``), which must also be the clock of
``ProcessInfo.start_time``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from exporter.foresight.basis import workload_of
from exporter.foresight.cadence import FORECAST_SECONDS, HeldForecast, advanced, identity_of, reusable
from exporter.foresight.calibration import OutcomeLearner
from exporter.foresight.confidence import ConfidenceHold, after_kill, contention_confidence, hold_confidence, mark_due
from exporter.foresight.exhaustion import TrendWindow
from exporter.foresight.forecast import forecast_device
from exporter.foresight.unscheduled import due_eta, one_awaited
from exporter.foresight.outcome import FULL_FRACTION, OUTCOME_GRACE, Outcomes
from exporter.foresight.profiles import RunRecorder, WorkloadProfile, learn_run, learn_running
from exporter.foresight.progress import device_slowdown
from exporter.foresight.runs import LiveRun, RunPlanner
from exporter.foresight.result import (
    DeviceRow,
    ForesightResult,
    MemoryDomain,
    ProcessRow,
    memory_domains,
    positional_maker,
    process_sharing,
)
from exporter.foresight.store import DEFAULT_MAX_PROFILES, ProfileStore, export_json, import_json
from exporter.foresight.workload import WorkloadRule, profile_key, workload_key, workload_label
from exporter.snapshot import GpuInfo, ProcessInfo, Snapshot

log = logging.getLogger(__name__)

STALE_RUN_SECONDS = 3600.0  # forget runs on GPUs we could not read for this long
LATE_START_SECONDS = 60.0  # a run first seen this long after its start was not watched from its start
DEFAULT_POLL_INTERVAL = 15.0  # assumed until two polls have been seen

RunId = tuple[str, "int | None", int]  # (GPU uuid, gi, pid)
_process_row = positional_maker(ProcessRow)  # ProcessRow(*every field), built faster
_device_row = positional_maker(DeviceRow)


class Foresight:
    """Learned profiles plus per-poll forecasts; safe to call from several threads."""

    def __init__(
        self,
        state_dir: str | Path | None = None,
        rules: Sequence[WorkloadRule] = (),
        persist_interval: float = 60.0,
        trend_window: float = 300.0,
        max_exported_workloads: int = 50,
        max_profiles: int = DEFAULT_MAX_PROFILES,
        forecast_seconds: float = FORECAST_SECONDS,
    ) -> None:
        """``state_dir`` None keeps profiles in memory only; ``rules`` come from parse_rules();
        intervals and windows are in seconds; ``forecast_seconds`` is the longest a domain's forecast
        is reused between polls (exporter.foresight.cadence; 0: every poll forecasts)."""
        self.rules = tuple(rules)
        self.persist_interval = persist_interval
        self.trend_window = trend_window
        self.max_exported_workloads = max_exported_workloads
        self.max_profiles = max_profiles
        self.forecast_seconds = forecast_seconds
        self.store = ProfileStore(state_dir, max_profiles) if state_dir is not None else None
        self.profiles: dict[str, WorkloadProfile] = self.store.load() if self.store else {}
        self.healthy = True  # False after observe() failed; the previous result is kept
        self._live: dict[RunId, LiveRun] = {}
        self._keys: dict[tuple[int, str, str], str] = {}  # (pid, name, cmdline) -> workload key
        self._trends: dict[tuple[str, int | None], TrendWindow] = {}
        self._oom: dict[tuple[int, str], int] = {}
        self.outcomes = Outcomes()  # suspected OOM kills and warnings (exporter.foresight.outcome)
        # what warnings and kills taught per workload (exporter.foresight.calibration), kept with the profiles
        self.learner = OutcomeLearner(self.store.load_outcomes() if self.store else {}, 2 * OUTCOME_GRACE)
        self._slowdowns: dict[tuple[str, int | None], float] = {}  # device -> slowdown at the last poll
        # device -> what its confidence holds from poll to poll (confidence.hold_confidence)
        self._confidence: dict[tuple[str, int | None], ConfidenceHold] = {}
        self.planner = RunPlanner(self.profiles)  # which profile, on which basis, each run follows
        self._dirty: set[str] = set()
        self._last_persist: float | None = None
        self._observed_once = False
        self._times: deque[float] = deque(maxlen=11)
        self._time_appends = 0  # bumps with every append to _times: the poll_interval cache key
        self._interval_cache: tuple[int, float] | None = None
        # device -> its last forecast, reused between forecasts (exporter.foresight.cadence)
        self._held: dict[tuple[str, int | None], HeldForecast] = {}
        self._profiles_version = 0  # bumps whenever ``profiles`` changes (the exported profiles' cache key)
        self._exported: tuple | None = None  # (cache key, the exported profiles)
        self._learned = 0  # bumps whenever an outcome adjustment may have changed
        # workload -> bumps whenever a usable profile of it (one forecasts can rest on) is added, replaced or
        # dropped; a provisional one (runs 0) drives no forecast (RunPlanner.plan), so its changes do not count
        self._usable_changes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._result = ForesightResult(profiles_stored=len(self.profiles), store_ok=self._store_ok())

    # ------------------------------------------------------------------ API
    def observe(self, snapshot: Snapshot, now: float | None = None) -> None:
        """Learn from one poll and recompute the forecasts. Never raises.

        ``now`` defaults to the poll's clock: wall time on a real host, virtual time (as Unix
        seconds) in simulation, so that durations learned at one --speed hold at another.
        """
        if now is None:
            now = snapshot.simulation.clock if snapshot.simulation is not None else snapshot.timestamp
        with self._lock:
            try:
                self._result = self._observe(snapshot, now)
            except Exception:  # noqa: BLE001 - a forecast bug must not stop the exporter
                log.exception("foresight: observe failed; keeping the previous forecast")
                self.healthy = False
                return
            self.healthy = True

    def result(self) -> ForesightResult:
        """The forecast of the latest poll."""
        with self._lock:
            return self._result

    def export_json(self) -> str:
        """All learned profiles as a JSON export document."""
        with self._lock:
            return export_json(self.profiles.values())

    def import_json(self, text: str, place: str) -> int:
        """Merge an export document (newer ``updated_at`` wins); returns how many profiles were taken.

        Raises UserError naming ``place`` when the document is invalid.
        """
        imported = import_json(text, place)
        with self._lock:
            taken = [p for p in imported
                     if p.key not in self.profiles or p.updated_at >= self.profiles[p.key].updated_at]
            self._profiles_version += 1
            for profile in taken:
                self._usable_changed(profile.key)
                self.profiles[profile.key] = profile
                self.planner.index(profile.key)
            if self.store:
                self.store.save(taken)
        return len(taken)

    def flush(self) -> None:
        """Save what running processes taught and any unsaved profile (call at shutdown)."""
        with self._lock:
            self._persist(now=None, force=True)

    @property
    def poll_interval(self) -> float:
        """Median seconds between recent observe() calls (DEFAULT_POLL_INTERVAL until known)."""
        cached = self._interval_cache
        if cached is not None and cached[0] == self._time_appends:
            return cached[1]  # asked once per memory domain per poll: sort the gaps once
        times = list(self._times)
        gaps = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
        interval = gaps[len(gaps) // 2] if gaps else DEFAULT_POLL_INTERVAL
        self._interval_cache = (self._time_appends, interval)
        return interval

    # ------------------------------------------------------------- one poll
    def _observe(self, snapshot: Snapshot, now: float) -> ForesightResult:
        self._times.append(now)
        self._time_appends += 1
        oom_devices = self._new_oom_kills(snapshot)
        processes_ok = snapshot.section_ok.get("process", True)
        sim_time = snapshot.simulation.time_seconds if snapshot.simulation is not None else None
        seen: set[RunId] = set()
        read_gpus: set[str] = set()
        devices: list[DeviceRow] = []
        processes: list[ProcessRow] = []
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue  # its processes are unknown this poll, not gone
            self.outcomes.gpu_seen(gpu.index, gpu.uuid)
            if processes_ok:
                read_gpus.add(gpu.uuid)
            for domain in memory_domains(gpu):
                seen.update((gpu.uuid, p.gi, p.pid) for p in domain.processes)
                device, rows = self._forecast_domain(gpu, domain, now, sim_time)
                if device is not None:
                    devices.append(device)
                processes.extend(rows)
        finished = self._finish_runs(seen, read_gpus, oom_devices, now)
        for row in devices:  # after the vanished runs: they are judged by the warning before them
            self.outcomes.forecast((row.uuid, row.gi), row.forecast.headroom_bytes, now)
        self.outcomes.devices_without({(row.uuid, row.gi) for row in devices}, now)
        settled = self.outcomes.settle(now)
        if settled or (finished and self.learner.outcomes):  # outcome adjustments may have changed
            self._learned += 1
        if settled:
            self.learner.settled(settled, [((uuid, gi), live) for (uuid, gi, _), live in self._live.items()], now)
        self._observed_once = True
        self._persist(now, force=finished > 0)  # a finished run is worth saving at once
        running = {self._live[(r.uuid, r.gi, r.pid)].run.key for r in processes}
        exported = self._exported_profiles(running)
        return ForesightResult(tuple(processes), tuple(devices), exported,
                               len(self.profiles), self._store_ok(), self.outcomes.rows(),
                               self._exported_adjustments(running))

    def _forecast_domain(self, gpu: GpuInfo, domain: MemoryDomain, now: float,
                         sim_time: float | None) -> tuple[DeviceRow | None, list[ProcessRow]]:
        """Record this poll's samples of one memory domain and forecast it.

        A domain whose memory could not be read this poll (neither the device's use nor any
        process's) gets no device forecast: its demand is unknown, not 0. Likewise a process
        whose memory is unknown and whose workload has no profile has no expected peak.
        """
        capacity, used = domain.capacity_bytes, domain.used_bytes
        device_key = (gpu.uuid, domain.gi)
        interval = self.poll_interval
        lives = [self._track((gpu.uuid, proc.gi, proc.pid), proc, now, domain, sim_time) for proc in domain.processes]
        window = self._trend(device_key, now, used)
        warned = self.outcomes.warning_up(device_key)
        held = self._held.get(device_key)
        # what was learned of these runs' workloads (their profiles; outcome adjustments of any)
        changes = self._usable_changes
        learned = (self._learned, *[changes.get(workload_of(live.run.key), 0) for live in lives])
        if reusable(held, now, interval, self.forecast_seconds, lives, domain.processes, capacity, used, learned,
                    warned):
            device = advanced(held.device, held.at, now, window.eta(capacity), _device_row)
            return device, held.rows
        plans = [self.planner.plan(live, capacity, self._slowdowns.get(device_key, 1.0), interval) for live in lives]
        # A late run stretches its co-tenants' timelines too (they share the slowdown), but
        # only measured slowdowns decide when a landmark counts as crossed unseen: a run's own
        # lower bound would otherwise keep postponing the skip of a landmark it never crosses.
        speeds = [None if progress is None else progress.speed(live.run.age(now))
                  for live, (_p, _b, progress) in zip(lives, plans)]
        self._slowdowns[device_key] = device_slowdown([s[0] if s is not None and s[1] else None for s in speeds])
        slowdown = device_slowdown([None if s is None else s[0] for s in speeds])
        states = [self.planner.state(proc, live, plan, now, slowdown) for proc, live, plan in zip(domain.processes, lives, plans)]
        states = one_awaited(states)  # at most one peak of no fixed age counted at once (unscheduled.py)
        factors = [1.0] * len(states)
        if self.learner.outcomes:  # most hosts have none: skip the lookups
            factors = [self.learner.factor(workload_of(live.run.key)) if s.profile is not None else 1.0
                       for s, live in zip(states, lives)]
            states = [s if f == 1.0 else replace(s, adjust=f) for s, f in zip(states, factors)]
        other = (used or 0) - sum(s.used_bytes for s in states)
        forecast = forecast_device(states, capacity, other, interval, slowdown)
        for state, live, factor in zip(states, lives, factors):
            live.ends_at = None if state.pid not in forecast.ends_in else now + forecast.ends_in[state.pid]
            if warned and state.profile is not None:  # the peak outcomes are judged against, unadjusted
                live.warned_peak = max(live.warned_peak, int(forecast.peaks[state.pid] / factor))
        unread = used is None and all(p.used_memory_bytes is None for p in domain.processes)
        # Held while the contention stays predicted (OUTCOME_GRACE: the rules' keep_firing_for), and
        # not repeated for the same overflow soon after it cleared (confidence.hold_confidence).
        raw = contention_confidence(states, forecast, interval)
        # a collision "now" that does not come is late, unless it rests on a peak of no fixed age (unscheduled.py)
        eta = due_eta(raw, states, forecast)
        overflow = -(forecast.headroom_bytes or 0)
        self._confidence[device_key] = mark_due(self._confidence.get(device_key), now, eta, interval, overflow, capacity)
        confidence, self._confidence[device_key] = hold_confidence(
            raw, self._confidence.get(device_key), now, overflow, capacity, OUTCOME_GRACE,
            frozenset() if raw is None else frozenset(s.pid for s in states))
        device = None if unread else _device_row(gpu.index, gpu.uuid, domain.gi, domain.profile, forecast,
                                                 window.eta(capacity), confidence)
        contended = forecast.contention_in_seconds is not None and not unread
        rows = [
            _process_row(gpu.index, gpu.uuid, proc.gi, proc.pid, proc.name, process_sharing(gpu, proc),
                       workload_label(workload_of(live.run.key)),
                       None if proc.used_memory_bytes is None and state.profile is None and not state.floor_bytes
                       else forecast.peaks[proc.pid],
                       forecast.at_contention_bytes.get(proc.pid) if contended else None,
                       proc.namespace, proc.pod, proc.container, proc.replica, state.basis)
            for proc, state, live in zip(domain.processes, states, lives)
        ]
        self._held[device_key] = HeldForecast(now, tuple(lives), identity_of(domain.processes), capacity, used,
                                              tuple(p.used_memory_bytes for p in domain.processes), learned,
                                              warned, device, rows)
        return device, rows

    def _track(self, run_id: RunId, proc: ProcessInfo, now: float, domain: MemoryDomain,
               sim_time: float | None) -> LiveRun:
        """The watch of a live process, created on first sight, with this poll's sample added."""
        capacity, used = domain.capacity_bytes, domain.used_bytes
        fill = used / capacity if capacity and used is not None else 0.0
        neighbours = len(domain.processes)
        live = self._live.get(run_id)
        key = profile_key(self._key(proc), capacity)
        if live is None or live.run.key != key:  # a new process, or its pid now runs another workload
            start, watched = self._start_of(proc, now, sim_time)
            run = RunRecorder(key, start, watched, capacity)
            live = self._live[run_id] = LiveRun(run, now, fill, neighbours)
        if proc.used_memory_bytes is not None:
            live.run.add(now, proc.used_memory_bytes)
        live.last_seen, live.device_fill, live.neighbours = now, fill, neighbours
        limit = proc.mps_memory_limit_bytes
        live.limit_fill = proc.used_memory_bytes / limit if limit and proc.used_memory_bytes is not None else 0.0
        return live

    def _start_of(self, proc: ProcessInfo, now: float, sim_time: float | None) -> tuple[float, bool]:
        """When a newly seen process started, and whether we have watched it since then.

        Known start time: watched if it started at most LATE_START_SECONDS ago. Unknown: a
        process that appears while we are polling started about now; one already there at
        our first poll started at an unknown time, except on a simulated host whose virtual
        clock is still within LATE_START_SECONDS of 0, where nothing ran before the scenario.
        """
        if proc.start_time is not None:
            return proc.start_time, now - proc.start_time <= LATE_START_SECONDS
        if self._observed_once:
            return now, True
        if sim_time is not None and sim_time <= LATE_START_SECONDS:
            return now - sim_time, True
        return now, False

    def _key(self, proc: ProcessInfo) -> str:
        """Workload key of a process: the one the backend resolved, else derived here (cached)."""
        if proc.workload:
            return proc.workload
        cache_key = (proc.pid, proc.name, proc.cmdline)
        key = self._keys.get(cache_key)
        if key is None:
            if len(self._keys) > 10000:  # pids churn; the cache only saves re-parsing
                self._keys.clear()
            key = self._keys[cache_key] = workload_key(proc.cmdline, proc.name, proc.environ, self.rules)
        return key

    def _trend(self, device: tuple[str, int | None], now: float, used: int | None) -> TrendWindow:
        """Append this poll's use to the device's trend window; the window (Unix s, bytes)."""
        window = self._trends.get(device)
        if window is None:
            window = self._trends[device] = TrendWindow(self.trend_window)
        window.add(now, used)
        return window

    # ------------------------------------------------------------- learning
    def _finish_runs(self, seen: set[RunId], read_gpus: set[str], oom_devices: set[tuple[str, str]],
                     now: float) -> int:
        """Fold runs that left a GPU we could read into their profiles; forget long-unseen ones.

        A run counts as cut short (it only raises the peak) when the simulator counted an OOM
        kill on its device, or when its shared device was at least FULL_FRACTION full when it
        was last seen. Returns how many runs were folded in.
        """
        finished = 0
        for run_id in [r for r in self._live if r not in seen]:
            live = self._live[run_id]
            uuid, gi, _pid = run_id
            if uuid in read_gpus:
                killed = (uuid, "" if gi is None else str(gi)) in oom_devices
                full = (live.device_fill >= FULL_FRACTION and live.neighbours >= 2) or live.limit_fill >= FULL_FRACTION
                truncated = killed or full
                warned = self.outcomes.warning_up((uuid, gi))
                early = live.ends_at is not None and now < live.ends_at
                self.outcomes.vanished((uuid, gi), full or (warned and early), warned, now)
                if (killed or full or (warned and early)) and (uuid, gi) in self._confidence:
                    # its collision happened: a contention no longer predicted ends (confidence.after_kill)
                    self._confidence[(uuid, gi)] = after_kill(self._confidence[(uuid, gi)], now)
                self.learner.run_ended(live, (uuid, gi), workload_of(live.run.key),
                                       truncated or (warned and early), warned, now)
                old = self.profiles.get(live.run.key)
                self._learn(learn_run(old, live.run, live.last_seen, truncated, self.poll_interval))
                del self._live[run_id]
                finished += 1
            elif now - live.last_seen > STALE_RUN_SECONDS:
                del self._live[run_id]
        return finished

    def _learn(self, profile: WorkloadProfile) -> None:
        """Keep a new or changed profile, and only the max_profiles most recently updated."""
        old = self.profiles.get(profile.key)
        if old is not profile:
            if profile.usable or (old is not None and old.usable):
                self._usable_changed(profile.key)
            self._profiles_version += 1
            self.profiles[profile.key] = profile
            self._dirty.add(profile.key)
            self.planner.index(profile.key)
        excess = len(self.profiles) - self.max_profiles
        if excess > 0:
            self._profiles_version += 1
            for key in sorted(self.profiles, key=lambda k: self.profiles[k].updated_at)[:excess]:
                if self.profiles[key].usable:
                    self._usable_changed(key)
                del self.profiles[key]
                self._dirty.discard(key)
                self.planner.forget(key)

    def _usable_changed(self, key: str) -> None:
        workload = workload_of(key)
        self._usable_changes[workload] = self._usable_changes.get(workload, 0) + 1

    def _persist(self, now: float | None, force: bool) -> None:
        """Every persist_interval (or when forced): learn from running runs, save changed profiles."""
        if not force and self._last_persist is not None and now - self._last_persist < self.persist_interval:
            return
        for live in list(self._live.values()):
            learned_at = now if now is not None else live.last_seen
            self._learn(learn_running(self.profiles.get(live.run.key), live.run, learned_at))
        if self.store and self._dirty:
            if self.store.save(self.profiles[k] for k in self._dirty if k in self.profiles):
                self._dirty.clear()
        if self.store and self.learner.dirty:
            if self.store.save_outcomes(self.learner.outcomes[w] for w in self.learner.dirty):
                self.learner.dirty.clear()
        if now is not None:
            self._last_persist = now

    def _new_oom_kills(self, snapshot: Snapshot) -> set[tuple[str, str]]:
        """(uuid, gi label) of devices whose simulated OOM-kill counter went up since last poll."""
        if snapshot.simulation is None:
            return set()
        uuids = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
        grown = set()
        for (index, gi), count in snapshot.simulation.oom_kills.items():
            if count > self._oom.get((index, gi), 0) and index in uuids:
                grown.add((uuids[index], gi))
            self._oom[(index, gi)] = count
        return grown

    def _exported_profiles(self, running: set[str]) -> tuple[tuple[str, WorkloadProfile], ...]:
        """Profiles to export: those of running workloads first, then the newest, up to the cap.

        The same tuple as last poll while no profile changed and the same workloads run (most polls)."""
        key = (self._profiles_version, self.max_exported_workloads, frozenset(running))
        if self._exported is not None and self._exported[0] == key:
            return self._exported[1]
        ordered = sorted(self.profiles.values(), key=lambda p: (p.key not in running, -p.updated_at, p.key))
        exported = tuple((workload_label(p.key), p) for p in ordered[: self.max_exported_workloads])
        self._exported = (key, exported)
        return exported

    def _exported_adjustments(self, running: set[str]) -> tuple[tuple[str, float, float], ...]:
        """(label, slack, margin) of workloads whose outcomes changed their forecast, running ones
        first, up to the cap; slack and margin are the shares it is forecast lower and higher."""
        live = {workload_of(k) for k in running}
        adjusted = [o for o in self.learner.outcomes.values() if o.factor != 1.0]
        adjusted.sort(key=lambda o: (o.workload not in live, -o.updated_at, o.workload))
        return tuple((workload_label(o.workload), round(max(0.0, 1 - o.factor), 4), round(max(0.0, o.factor - 1), 4))
                     for o in adjusted[: self.max_exported_workloads])

    def _store_ok(self) -> bool | None:
        return None if self.store is None else self.store.ok
