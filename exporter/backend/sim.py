"""The exporter's backends running on a simulated GPU host (``--simulate``).

SimBackend installs a Simulation as pynvml's C library and drives the ordinary
NvmlBackend on top of it, so everything the exporter reads goes through the same code as
on real hardware. With ``backend`` "dcgm" (or "auto" on a scenario with a ``dcgm``
section) it also installs the simulated DCGM (exporter/sim/fakedcgm) and runs the ordinary
DCGM backend on its fake bindings. Before each poll the simulation is advanced to the
virtual clock, and the Snapshot gets a ``simulation`` section (virtual time, OOM kills so far).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Callable

from exporter.backend.choose import DcgmOptions, open_backend, open_nvml
from exporter.backend.nvml import NvmlBackend
from exporter.backend.procinfo import ProcFs
from exporter.errors import UserError
from exporter.frozen import replace
from exporter.identity import Identifier
from exporter.sim import Simulation
from exporter.sim.model import Scenario
from exporter.sim.scenario import load_scenario
from exporter.snapshot import SimulationInfo, Snapshot

if TYPE_CHECKING:  # the simulated DCGM is imported when a host has one: an NVML-only run never loads it
    from exporter.sim import fakedcgm


class SimBackend:
    """The backend ``backend`` asks for ("nvml", "dcgm", "auto") on a simulated host.

    DCGM is installed on the simulated host when the scenario has a ``dcgm`` section (unless
    it says ``installed: false``), or with defaults when ``backend`` is "dcgm" and it has none.

    Virtual time: ``clock()`` (virtual seconds) when given; otherwise real seconds since
    ``open()`` times ``speed``. Time never goes backwards and stops at the scenario's
    duration, after which the last state holds. ``step_to(t)`` switches to a manual clock
    (tests, golden files): each following poll reads the simulation at exactly ``t``.
    """

    def __init__(self, scenario: str | os.PathLike | Scenario, speed: float = 1.0,
                 clock: Callable[[], float] | None = None, procfs_dir: str | None = None,
                 gpu_timeout: float = 5.0, identifier: Identifier | None = None,
                 backend: str = "nvml", dcgm: DcgmOptions | None = None, pod_resolver: Callable | None = None):
        """``pod_resolver(procfs, simulation)`` builds the pod resolver once the fake /proc exists;
        by default the scenario's pods are read in-process (simulated_resolver)."""
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
        self.kind = backend
        self._dcgm_options = dcgm or DcgmOptions()
        self.dcgm_lib: fakedcgm.FakeDcgmLib | None = None
        self.inner = None  # the opened NvmlBackend or DcgmBackend

    @property
    def name(self) -> str:
        """It IS the NVML or DCGM backend; Snapshot.simulation tells it is simulated."""
        if self.inner is not None:
            return self.inner.name
        return "dcgm" if self.kind == "dcgm" else "nvml"

    @property
    def reason(self) -> str:
        return getattr(self.inner, "reason", "")

    def open(self) -> None:
        """Build and install the simulation (and its DCGM), then open the backend on it.

        The simulated host's clock reads the real time at the first virtual time polled
        (``step_to`` before ``open``, as ``snapshot --at`` does), so process start times and
        NVML sample timestamps are never in the real future.
        """
        start = self._manual if self._manual is not None else 0.0
        if self.scenario.duration is not None:  # as virtual_time(): past the end, the last state holds
            start = min(start, self.scenario.duration)
        self.sim = Simulation(self.scenario, procfs_dir=self._procfs_dir, start_at=start)
        self.sim.advance_to(start)  # NVML starts at that instant (an init failure then counts)
        self.sim.install()
        sim = self.sim
        try:
            identifier = self._with_pods(self._identifier or Identifier())
            self.nvml = NvmlBackend(procfs_root=sim.procfs_root, gpu_timeout=self._gpu_timeout,
                                    identifier=identifier,
                                    gpus_on_bus=lambda: len(sim.engine.lifecycle.present_gpus(sim.time)),
                                    clock=lambda: sim.boot_time + sim.time)
            self.inner = self._open_inner()
        except BaseException:
            self._uninstall_dcgm()
            self.sim.close()
            raise
        self._started = time.monotonic()

    def _open_inner(self):
        if self.kind == "nvml":
            return open_nvml(self.nvml, "--backend nvml")
        spec = self.scenario.dcgm
        if spec is None and self.kind == "dcgm":
            from exporter.sim.fakedcgm.spec import DEFAULT as spec
        if spec is None or not spec.installed:
            why = ("the scenario has no dcgm section" if spec is None
                   else "its dcgm section says installed: false")
            if self.kind == "dcgm":
                raise UserError(f"--backend dcgm: the simulated host has no DCGM ({self.scenario.source}: {why})")
            return open_nvml(self.nvml, f"--backend auto: the simulated host has no DCGM ({why})")
        from exporter.sim import fakedcgm  # only a host with DCGM loads the simulated one

        self.dcgm_lib = fakedcgm.install(self.sim, spec)
        options = dataclasses.replace(self._dcgm_options, bindings_dirs=(fakedcgm.BINDINGS_DIR,),
                                      bindings_label="the simulated host")
        return open_backend(self.kind, self.nvml, options)

    def _uninstall_dcgm(self) -> None:
        if self.dcgm_lib is not None:
            from exporter.sim import fakedcgm

            fakedcgm.uninstall(self.dcgm_lib)
            self.dcgm_lib = None

    def _with_pods(self, identifier: Identifier) -> Identifier:
        """``identifier`` with the simulated node's pod resolver, unless it already has one."""
        if identifier.pods is not None:
            return identifier
        build = self._pod_resolver
        if build is None:
            build = simulated_resolver
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
        if self.sim is None or self.inner is None:
            raise RuntimeError("SimBackend.poll() called before open()")
        self._time = self.virtual_time()
        self.sim.advance_to(self._time)
        snapshot = self.inner.poll()
        info = SimulationInfo(time_seconds=self._time, oom_kills=self.sim.oom_kills, epoch=self.sim.boot_time)
        return replace(snapshot, simulation=info)  # a copy by __dict__ (exporter.frozen)

    @property
    def calls_last_poll(self) -> int:
        """NVML calls the exporter made in the last poll."""
        return self.nvml.calls_last_poll if self.nvml else 0

    def close(self) -> None:
        """Close the backend, uninstall the fake libraries and remove the fake /proc."""
        if self.inner is not None:
            self.inner.close()
            self.inner = None
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
        self._uninstall_dcgm()
        if self.sim is not None:
            self.sim.close()
            self.sim = None


def backend_from_settings(settings, dcgm: DcgmOptions) -> SimBackend:
    """The SimBackend of ``--simulate`` (exporter.config.Settings): the CLI's one door into the simulator."""
    from exporter.shipped import resolve_scenario

    return SimBackend(resolve_scenario(settings.simulate), speed=settings.speed, gpu_timeout=settings.gpu_timeout,
                      identifier=Identifier(settings.workload_rules), backend=settings.backend, dcgm=dcgm,
                      pod_resolver=_simulated_pods(settings))


def _simulated_pods(settings):
    """Pod sources of a simulated node: the scenario's, unless the settings name real ones."""
    named = [v for v in (settings.kubernetes_api, settings.pod_resources_socket) if v not in ("auto", "off")]
    if not named:
        if settings.kubernetes_api == "off" and settings.pod_resources_socket == "off":
            return lambda procfs, simulation: None
        return None  # SimBackend's default: the scenario's pods, in-process
    from exporter.k8s.setup import build_resolver

    api = settings.kubernetes_api if settings.kubernetes_api != "auto" else "off"
    socket = settings.pod_resources_socket if settings.pod_resources_socket != "auto" else "off"
    return lambda procfs, simulation: build_resolver(procfs, api, socket, settings.node_name)


def simulated_resolver(procfs: ProcFs, simulation: Simulation):
    """The resolver of a simulated node: the scenario's pods, read in-process; None without pods."""
    if not any(p.pod is not None for p in simulation.scenario.processes):
        return None
    from exporter.k8s.resolver import KubernetesResolver
    from exporter.sim.kube import SimulatedKube

    kube = SimulatedKube(simulation)
    return KubernetesResolver(procfs, index=kube.index, allocations=kube)
