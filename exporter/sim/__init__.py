"""GPU simulator: a scenario played over virtual time, seen through a fake libnvidia-ml.

Usage::

    sim = Simulation(load_scenario("examples/scenarios/wan.yaml"))
    sim.install()            # pynvml now talks to the simulation
    pynvml.nvmlInit()
    sim.advance_to(30.0)     # virtual seconds; OOM kills etc. happen on the way
    ...
    sim.close()              # uninstalls and removes the fake /proc

The engine (exporter.sim.engine) decides what happens; exporter.sim.telemetry derives the
readings; exporter.sim.fakelib answers NVML's C API (exporter.sim.faults decides which calls
fail); exporter.sim.procfs mirrors the live processes into a fake /proc directory
(``procfs_root``). What behaves like hardware and what is simplified: docs/scenarios.md,
"Fidelity contract".
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pynvml

from exporter.errors import UserError
from exporter.sim.engine import Engine
from exporter.sim.fakelib import FakeNvmlLib, call_matches, error_code
from exporter.sim.kube import HOST_CGROUP, process_cgroups
from exporter.sim.model import Scenario
from exporter.sim.procfs import DEFAULT_HOST_MEMORY, FakeProcfs, ProcEntry
from exporter.sim.state import OomEvent
from exporter.snapshot import SimulationInfo

__all__ = ["Simulation", "OomEvent", "FakeNvmlLib", "call_matches"]


class Simulation:
    """One running scenario. Thread-safe: NVML calls and ``advance_to`` share a lock."""

    def __init__(self, scenario: Scenario, procfs_dir: str | None = None, start_at: float = 0.0):
        """``start_at``: the virtual time the caller will start at (``--at``); the simulated
        host's clock is set so that this instant reads the real time now. With ``start_at`` > 0
        the fake /proc is first written by the caller's ``advance_to(start_at)``, not for time 0
        as well (a one-shot `snapshot --at` wrote the processes of both instants)."""
        self.scenario = scenario
        self.engine = Engine(scenario)
        where = scenario.source or scenario.name
        for fault in self.engine.faults:
            try:
                error_code(fault.error)
            except ValueError as exc:
                raise UserError(f"{where}: events[fault at {fault.start:g}s].error: {exc}") from None
        self._lock = threading.RLock()
        self.call_counts: Counter = Counter()  # C symbol -> calls, for NVML-calls-per-poll
        # The recorder: symbols clients looked up that this driver lacks (FunctionNotFound),
        # and exported symbols answered generically (exporter.sim.fakelib_fallback).
        self.missing_symbols: Counter = Counter()
        self.fallback_symbols: Counter = Counter()
        self.invalid_calls: Counter = Counter()  # calls with arguments NVML would refuse
        # The simulated host's clock: virtual time t is Unix time boot_time + t. boot_time is
        # a whole second (it is /proc/stat's btime) chosen so that ``start_at`` is now.
        self.boot_time = float(int(time.time() - start_at))
        self._cgroups = process_cgroups(scenario)
        self._procfs = FakeProcfs(procfs_dir, boot_time=self.boot_time)
        self.procfs_root: str = self._procfs.root
        self._saved_lib = None
        self._installed: FakeNvmlLib | None = None
        if start_at <= 0:
            self._sync_procfs()

    # --- time --------------------------------------------------------------------------

    @property
    def time(self) -> float:
        """Current virtual time in seconds."""
        return self.engine.now

    def clock_us(self) -> int:
        """The simulated host's Unix time in microseconds (NVML timestamps, /proc times)."""
        return int(round((self.boot_time + self.engine.now) * 1_000_000))

    def advance_to(self, t: float) -> None:
        """Move to virtual time t (ValueError if t < time), applying kills and events."""
        with self._lock:
            self.engine.advance_to(t)
            self._sync_procfs()

    # --- outcomes ----------------------------------------------------------------------

    @property
    def oom_kills(self) -> dict[tuple[int, str], int]:
        """(gpu index, GI id as str or "" without MIG) -> processes killed by OOM so far."""
        return dict(self.engine.oom_kills)

    @property
    def oom_events(self) -> list[OomEvent]:
        """Every OOM / pinned-limit kill so far, in order."""
        return list(self.engine.oom_events)

    @property
    def mps_fault_events(self) -> list[OomEvent]:
        """Clients killed by an MPS server restart (reason "mps_restart"); not OOM kills."""
        return list(self.engine.mps_fault_events)

    def info(self) -> SimulationInfo:
        """The snapshot's simulation section."""
        return SimulationInfo(time_seconds=self.time, oom_kills=self.oom_kills)

    # --- pynvml ------------------------------------------------------------------------

    def install(self, hidden_symbols=()) -> None:
        """Make pynvml call this simulation; ``hidden_symbols`` mimic an older driver."""
        with pynvml.libLoadLock:
            if self._installed is None:
                self._saved_lib = pynvml.nvmlLib
            self._installed = FakeNvmlLib(self, hidden_symbols)
            pynvml.nvmlLib = self._installed
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def uninstall(self) -> None:
        """Give pynvml back the library it had before ``install``."""
        with pynvml.libLoadLock:
            if self._installed is None:
                return
            if pynvml.nvmlLib is self._installed:
                pynvml.nvmlLib = self._saved_lib
            self._installed = self._saved_lib = None
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def close(self, keep_library: bool = False) -> None:
        """Uninstall and remove the fake /proc (only what this simulation created).

        ``keep_library``: leave the fake installed, for a process about to exit whose
        clients may still call NVML from destructors at interpreter exit (as a real
        library stays loaded until the end)."""
        if not keep_library:
            self.uninstall()
        self._procfs.close()

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- fake /proc --------------------------------------------------------------------

    def mirror_host(self) -> None:
        """Make ``procfs_root`` usable as psutil.PROCFS_PATH for a whole client: host-wide
        files and this process (with its ancestors) are linked to the real /proc."""
        with self._lock:
            self._procfs.mirror_host()

    def _sync_procfs(self) -> None:
        now = self.engine.now
        hidden = [f for f in self.engine.faults if f.hides_procfs(now)]
        self._procfs.sync([
            ProcEntry(p.pid, p.name, p.cmdline, dict(p.env), p.start, p.uid,
                      p.host_memory if p.host_memory is not None else DEFAULT_HOST_MEMORY,
                      cgroup=self._cgroups.get((p.pid, p.start), HOST_CGROUP))
            for p in self.engine.alive(now)
            if not any(f.gpu is None or f.gpu == p.gpu for f in hidden)
        ])
