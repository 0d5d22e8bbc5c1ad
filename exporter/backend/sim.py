"""The NVML backend running on a simulated GPU host (``--simulate``).

SimBackend installs a Simulation as pynvml's C library and drives the ordinary
NvmlBackend on top of it, so everything the exporter reads goes through the same code as
on real hardware. Before each poll the simulation is advanced to the virtual clock, and the
Snapshot gets a ``simulation`` section (virtual time, OOM kills so far).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

from exporter.backend.nvml import NvmlBackend
from exporter.backend.procinfo import ProcFs
from exporter.errors import UserError
from exporter.identity import Identifier
from exporter.sim import Simulation
from exporter.sim.model import Scenario
from exporter.sim.scenario import load_scenario
from exporter.snapshot import SimulationInfo, Snapshot


class SimBackend:
    """Backend "nvml" on a simulated host.

    Virtual time: ``clock()`` (virtual seconds) when given; otherwise real seconds since
    ``open()`` times ``speed``. Time never goes backwards and stops at the scenario's
    duration, after which the last state holds. ``step_to(t)`` switches to a manual clock
    (tests, golden files): each following poll reads the simulation at exactly ``t``.
    """

    name = "nvml"  # it IS the NVML backend; Snapshot.simulation tells it is simulated

    def __init__(self, scenario: str | os.PathLike | Scenario, speed: float = 1.0,
                 clock: Callable[[], float] | None = None, procfs_dir: str | None = None,
                 gpu_timeout: float = 5.0, identifier: Identifier | None = None,
                 pod_resolver: Callable | None = None):
        """``pod_resolver(procfs, simulation)`` builds the pod resolver once the fake /proc exists;
        by default the scenario's pods are read in-process (exporter.k8s.setup.simulated_resolver)."""
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        if not speed > 0:
            raise UserError(f"speed: must be greater than 0, got {speed}")
        self.speed = speed
        self._clock = clock
        self._procfs_dir = procfs_dir
        self._gpu_timeout = gpu_timeout
        self._identifier = identifier
        self._pod_resolver = pod_resolver
        self._manual: float | None = None
        self._started = 0.0
        self._time = 0.0
        self.sim: Simulation | None = None
        self.nvml: NvmlBackend | None = None

    def open(self) -> None:
        """Build and install the simulation, then open NVML on it."""
        self.sim = Simulation(self.scenario, procfs_dir=self._procfs_dir)
        self.sim.install()
        try:
            identifier = self._with_pods(self._identifier or Identifier())
            self.nvml = NvmlBackend(procfs_root=self.sim.procfs_root, gpu_timeout=self._gpu_timeout,
                                    identifier=identifier)
            self.nvml.open()
        except BaseException:
            self.sim.close()
            raise
        self._started = time.monotonic()

    def _with_pods(self, identifier: Identifier) -> Identifier:
        """``identifier`` with the simulated node's pod resolver, unless it already has one."""
        if identifier.pods is not None:
            return identifier
        build = self._pod_resolver
        if build is None:
            from exporter.k8s.setup import simulated_resolver as build
        resolver = build(ProcFs(self.sim.procfs_root), self.sim)
        return identifier if resolver is None else Identifier(identifier.rules, pods=resolver)

    def step_to(self, t: float) -> None:
        """Use a manual clock from now on, set to ``t`` virtual seconds (read by the next poll)."""
        self._manual = float(t)

    def virtual_time(self) -> float:
        """Virtual seconds the next poll will read the simulation at."""
        if self._manual is not None:
            t = self._manual
        elif self._clock is not None:
            t = float(self._clock())
        else:
            t = (time.monotonic() - self._started) * self.speed
        if self.scenario.duration is not None:
            t = min(t, self.scenario.duration)
        return max(t, self._time)  # the simulation only moves forward

    def poll(self) -> Snapshot:
        """Advance the simulation to the virtual clock, then poll it like a real host."""
        if self.sim is None or self.nvml is None:
            raise RuntimeError("SimBackend.poll() called before open()")
        self._time = self.virtual_time()
        self.sim.advance_to(self._time)
        snapshot = self.nvml.poll()
        info = SimulationInfo(time_seconds=self._time, oom_kills=self.sim.oom_kills, epoch=self.sim.boot_time)
        return dataclasses.replace(snapshot, simulation=info)

    @property
    def calls_last_poll(self) -> int:
        """NVML calls the exporter made in the last poll."""
        return self.nvml.calls_last_poll if self.nvml else 0

    def close(self) -> None:
        """Close NVML, uninstall the fake library and remove the fake /proc."""
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
        if self.sim is not None:
            self.sim.close()
            self.sim = None
