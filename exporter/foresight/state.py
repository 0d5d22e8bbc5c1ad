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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from exporter.foresight.forecast import DeviceForecast, ProcessState, exhaustion_eta, expected_peak, forecast_device
from exporter.foresight.profiles import PEAK_BAND, RunRecorder, WorkloadProfile, learn_run, learn_running
from exporter.foresight.store import DEFAULT_MAX_PROFILES, ProfileStore, export_json, import_json
from exporter.foresight.workload import WorkloadRule, workload_key, workload_label
from exporter.snapshot import GpuInfo, ProcessInfo, Snapshot

log = logging.getLogger(__name__)

FULL_FRACTION = 0.97  # a run that vanished from a device this full may have been OOM-killed
STALE_RUN_SECONDS = 3600.0  # forget runs on GPUs we could not read for this long
LATE_START_SECONDS = 60.0
DEFAULT_POLL_INTERVAL = 15.0  # a run first seen this long after its start was not watched from its start


@dataclass(frozen=True)
class ProcessRow:
    """One live process with its forecast values (bytes)."""

    gpu: int
    uuid: str
    gi: int | None
    pid: int
    process: str
    sharing: str
    workload: str  # bounded label value
    expected_peak_bytes: int
    at_contention_bytes: int | None  # expected use when its device first overflows; None if it does not


@dataclass(frozen=True)
class DeviceRow:
    """Forecast of one GPU (gi None) or MIG instance."""

    gpu: int
    uuid: str
    gi: int | None
    profile: str  # MIG profile name, "" for a whole GPU
    forecast: DeviceForecast
    exhaustion_eta_seconds: float | None


@dataclass(frozen=True)
class ForesightResult:
    """Everything the forecast collector exports for one poll."""

    processes: tuple[ProcessRow, ...] = ()
    devices: tuple[DeviceRow, ...] = ()
    profiles: tuple[tuple[str, WorkloadProfile], ...] = ()  # (label, profile), bounded
    profiles_stored: int = 0
    store_ok: bool | None = None  # None without a state dir


def process_sharing(gpu: GpuInfo, proc: ProcessInfo) -> str:
    """The ``sharing`` label of a process: its device's mode as this process experiences it."""
    if proc.gi is not None:
        return "mig+mps" if proc.is_mps_client else "mig"
    return "mps" if proc.is_mps_client else gpu.sharing


class Foresight:
    """Learned profiles plus per-poll forecasts; thread-safe between observe() and result()."""

    def __init__(
        self,
        state_dir: str | Path | None = None,
        rules: Sequence[WorkloadRule] = (),
        persist_interval: float = 60.0,
        trend_window: float = 300.0,
        max_exported_workloads: int = 50,
        max_profiles: int = DEFAULT_MAX_PROFILES,
    ) -> None:
        self.rules = tuple(rules)
        self.persist_interval = persist_interval
        self.trend_window = trend_window
        self.max_exported_workloads = max_exported_workloads
        self.max_profiles = max_profiles
        self.store = ProfileStore(state_dir, max_profiles) if state_dir is not None else None
        self.profiles: dict[str, WorkloadProfile] = self.store.load() if self.store else {}
        self._runs: dict[tuple[str, int | None, int], tuple[RunRecorder, float, float, int]] = {}
        self._keys: dict[tuple[int, str, str], str] = {}  # (pid, name, cmdline) -> key
        self._trends: dict[tuple[str, int | None], deque] = {}
        self._oom: dict[tuple[int, str], int] = {}
        self._dirty: set[str] = set()
        self._last_persist: float | None = None
        self._observed_once = False
        self._times: deque[float] = deque(maxlen=11)
        self._lock = threading.Lock()
        self._result = ForesightResult(store_ok=self._store_ok(), profiles_stored=len(self.profiles))
        self.healthy = True  # False after observe() failed; the previous result is kept

    # ----------------------------------------------------------------- inputs
    def observe(self, snapshot: Snapshot, now: float | None = None) -> None:
        """Learn from one poll and recompute the forecasts. Never raises."""
        now = snapshot.timestamp if now is None else now
        try:
            result = self._observe(snapshot, now)
        except Exception:  # noqa: BLE001 - a forecast bug must not stop the exporter
            log.exception("foresight: observe failed; keeping the previous forecast")
            self.healthy = False
            return
        with self._lock:
            self._result, self.healthy = result, True

    def result(self) -> ForesightResult:
        """The forecast of the latest poll."""
        with self._lock:
            return self._result

    def export_json(self) -> str:
        """All learned profiles as a JSON export document."""
        with self._lock:
            return export_json(self.profiles.values())

    def import_json(self, text: str, place: str) -> int:
        """Merge profiles from an export document (newer updated_at wins); returns how many were taken.

        Raises UserError naming ``place`` when the document is invalid.
        """
        imported = import_json(text, place)
        with self._lock:
            taken = [p for p in imported if p.key not in self.profiles or p.updated_at >= self.profiles[p.key].updated_at]
            for profile in taken:
                self.profiles[profile.key] = profile
            if self.store:
                self.store.save(taken)
        return len(taken)

    def flush(self) -> None:
        """Write profiles changed since the last save (call at shutdown)."""
        with self._lock:
            self._persist(force=True, now=None)

    # --------------------------------------------------------------- learning
    @property
    def poll_interval(self) -> float:
        """Median seconds between recent observe() calls (DEFAULT_POLL_INTERVAL until known)."""
        gaps = sorted(b - a for a, b in zip(self._times, list(self._times)[1:]) if b > a)
        return gaps[len(gaps) // 2] if gaps else DEFAULT_POLL_INTERVAL

    def _observe(self, snapshot: Snapshot, now: float) -> ForesightResult:
        self._times.append(now)
        oom_devices = self._new_oom_kills(snapshot)
        processes_ok = snapshot.section_ok.get("process", True)
        seen: set[tuple[str, int | None, int]] = set()
        read_gpus: set[str] = set()
        device_rows: list[DeviceRow] = []
        process_rows: list[ProcessRow] = []
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            if processes_ok:
                read_gpus.add(gpu.uuid)
            for gi, profile_name, capacity, used, procs in _devices(gpu):
                states = []
                fill = None if not capacity or used is None else used / capacity
                for proc in procs:
                    run_id = (gpu.uuid, proc.gi, proc.pid)
                    seen.add(run_id)
                    run = self._track(run_id, proc, now, fill, len(procs))
                    profile = self._usable(run.key)
                    reached = None if profile is None else run.first_age_at_or_above(PEAK_BAND * profile.peak_bytes)
                    states.append(ProcessState(proc.pid, proc.used_memory_bytes or 0, run.age(now), profile, reached))
                self._trend(gpu.uuid, gi, now, used)
                other = (used or 0) - sum(s.used_bytes for s in states)
                forecast = forecast_device(states, capacity, other, self.poll_interval)
                eta = exhaustion_eta(list(self._trends[(gpu.uuid, gi)]), capacity)
                device_rows.append(DeviceRow(gpu.index, gpu.uuid, gi, profile_name, forecast, eta))
                for proc, state in zip(procs, states):
                    key = self._runs[(gpu.uuid, proc.gi, proc.pid)][0].key
                    process_rows.append(ProcessRow(
                        gpu.index, gpu.uuid, proc.gi, proc.pid, proc.name, process_sharing(gpu, proc),
                        workload_label(key), expected_peak(state.used_bytes, state.profile),
                        forecast.at_contention_bytes.get(proc.pid) if forecast.contention_in_seconds is not None
                        else None))
        self._finish_runs(seen, read_gpus, oom_devices, now)
        self._observed_once = True
        self._persist(force=False, now=now)
        return ForesightResult(tuple(process_rows), tuple(device_rows), self._exported_profiles(process_rows),
                               len(self.profiles), self._store_ok())

    def _track(self, run_id, proc: ProcessInfo, now: float, fill: float | None, neighbours: int) -> RunRecorder:
        """The recorder of a live process, created on first sight, with this poll's sample added."""
        entry = self._runs.get(run_id)
        key = self._key(proc)
        if entry is None or entry[0].key != key:  # new process, or the pid was reused by another workload
            start = proc.start_time if proc.start_time is not None else now
            # Watched from its start: it started recently, or it appeared while we were polling.
            watched = (now - start <= LATE_START_SECONDS) if proc.start_time is not None else self._observed_once
            entry = (RunRecorder(key, start, watched), now, 0.0, 0)
        run = entry[0]
        if proc.used_memory_bytes is not None:
            run.add(now, proc.used_memory_bytes)
        self._runs[run_id] = (run, now, fill or 0.0, neighbours)
        return run

    def _key(self, proc: ProcessInfo) -> str:
        cache_key = (proc.pid, proc.name, proc.cmdline)
        key = self._keys.get(cache_key)
        if key is None:
            if len(self._keys) > 10000:  # pids churn; the cache only saves re-parsing
                self._keys.clear()
            key = self._keys[cache_key] = workload_key(proc.cmdline, proc.name, proc.environ, self.rules)
        return key

    def _usable(self, key: str) -> WorkloadProfile | None:
        profile = self.profiles.get(key)
        return profile if profile is not None and profile.usable else None

    def _finish_runs(self, seen, read_gpus: set[str], oom_devices: set[tuple[str, str]], now: float) -> None:
        """Fold runs that left a GPU we could read into their profiles; forget long-unseen ones."""
        for run_id in [r for r in self._runs if r not in seen]:
            run, last_seen, fill, neighbours = self._runs[run_id]
            uuid, gi, _pid = run_id
            if uuid in read_gpus:
                killed = (uuid, "" if gi is None else str(gi)) in oom_devices
                truncated = killed or (fill >= FULL_FRACTION and neighbours >= 2)
                self._learn(learn_run(self.profiles.get(run.key), run, last_seen, truncated, self.poll_interval))
                del self._runs[run_id]
            elif now - last_seen > STALE_RUN_SECONDS:
                del self._runs[run_id]

    def _learn(self, profile: WorkloadProfile) -> None:
        if self.profiles.get(profile.key) is not profile:
            self.profiles[profile.key] = profile
            self._dirty.add(profile.key)
        if len(self.profiles) > self.max_profiles:
            for key in sorted(self.profiles, key=lambda k: self.profiles[k].updated_at)[: len(self.profiles) - self.max_profiles]:
                del self.profiles[key]
                self._dirty.discard(key)

    def _persist(self, force: bool, now: float | None) -> None:
        """Save dirty profiles every persist_interval (learning from running runs first)."""
        due = force or self._last_persist is None or now - self._last_persist >= self.persist_interval
        if not due:
            return
        for run, *_ in list(self._runs.values()):
            self._learn(learn_running(self.profiles.get(run.key), run, now if now is not None else run.start + run.last_age))
        if self.store and self._dirty:
            if self.store.save(self.profiles[k] for k in self._dirty if k in self.profiles):
                self._dirty.clear()
        self._last_persist = now if now is not None else self._last_persist

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

    def _trend(self, uuid: str, gi: int | None, now: float, used: int | None) -> None:
        window = self._trends.setdefault((uuid, gi), deque())
        if used is not None:
            window.append((now, used))
        while window and now - window[0][0] > self.trend_window:
            window.popleft()

    def _exported_profiles(self, rows: Iterable[ProcessRow]) -> tuple[tuple[str, WorkloadProfile], ...]:
        """Profiles to export: those of running workloads first, then the newest, up to the cap."""
        running = {self._runs[(r.uuid, r.gi, r.pid)][0].key for r in rows}
        ordered = sorted(self.profiles.values(), key=lambda p: (p.key not in running, -p.updated_at, p.key))
        return tuple((workload_label(p.key), p) for p in ordered[: self.max_exported_workloads])

    def _store_ok(self) -> bool | None:
        return None if self.store is None else self.store.ok


def _devices(gpu: GpuInfo):
    """(gi, MIG profile, capacity, used, client processes) per memory domain of a GPU.

    A GPU in MIG mode has one domain per GPU instance (its compute instances share memory);
    otherwise the whole GPU is one domain whose capacity excludes driver-reserved memory.
    MPS servers are not workloads: their memory counts as "other" use of the domain.
    """
    clients = [p for p in gpu.processes if not p.is_mps_server]
    if gpu.mig_mode or gpu.mig_instances:
        seen: set[int] = set()
        for inst in gpu.mig_instances:
            if inst.gi in seen:
                continue
            seen.add(inst.gi)
            procs = [p for p in clients if p.gi == inst.gi]
            yield inst.gi, inst.profile, inst.memory_total_bytes, inst.memory_used_bytes, procs
        return
    capacity = None
    if gpu.memory_total_bytes is not None:
        capacity = gpu.memory_total_bytes - (gpu.memory_reserved_bytes or 0)
    yield None, "", capacity, gpu.memory_used_bytes, [p for p in clients if p.gi is None]
