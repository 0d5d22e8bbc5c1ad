"""One exporter's polls measured inside this process: where the CPU goes, which NVML calls.

The simulator is Python, so a poll's CPU time includes work a real driver would do in C
(or in the kernel). To compare exporters on what *they* cost, every call into the fake C
library is timed (thread CPU time, so GIL waits are not counted) and reported apart:

    total = simulated driver (fake lib) + simulation advance + exporter (reads + pynvml) + render

``pynvml``'s own Python wrappers (ctypes structs, byref, decoding) run on a real GPU too,
so they count as the exporter's. Per-call counts come from ``Simulation.call_counts``
(C symbols) and, for gpushare, from the NvmlCaller choke point (API calls).
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from statistics import fmean, median

if __name__ == "__main__":  # run as a script: make the repository importable
    import sys
    from pathlib import Path

    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from exporter.sim import fakelib  # noqa: E402


class FakeLibTimer:
    """Accumulates the thread CPU seconds spent inside the fake C library while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._original = None

    def install(self) -> None:
        original = self._original = fakelib._Symbol.__call__
        timer = self

        def timed(symbol, *args):
            start = time.thread_time()
            try:
                return original(symbol, *args)
            finally:
                spent = time.thread_time() - start
                with timer._lock:
                    timer.seconds += spent

        fakelib._Symbol.__call__ = timed

    def uninstall(self) -> None:
        if self._original is not None:
            fakelib._Symbol.__call__ = self._original
            self._original = None


@dataclass
class PollCost:
    """Median per-poll figures over the measured polls (seconds of CPU, counts of calls)."""

    polls: int
    cpu_total: float
    cpu_fake_driver: float
    cpu_sim_advance: float
    cpu_render: float
    wall: float
    c_calls: int  # C symbols called (Simulation.call_counts), pynvml size probes included
    api_calls: int | None  # calls through the exporter's choke point (gpushare only)
    c_calls_by_symbol: Counter = field(default_factory=Counter)
    api_calls_by_name: Counter = field(default_factory=Counter)
    # VmRSS grown from "simulation loaded, backend open" to the end of the polls: the exporter's
    # runtime state (plus whatever the simulation allocates as it advances). Clean only in a
    # fresh process (anatomy.py as a script).
    rss_growth_kib: int | None = None
    # Encoding the exposition as Prometheus asks for it (OpenMetrics + gzip), CPU seconds: paid
    # in the polls just before a scrape (exporter/prerender.py), not in the measured polls.
    cpu_encode_prometheus: float | None = None
    # The median over polls of each poll's own total - fake driver - simulation. A difference of
    # the three medians is thrown off when a busy machine slows the driver in one poll and the
    # exporter in another; each poll's own difference is not.
    cpu_exporter_median: float | None = None
    # The mean of the same differences: what a process pays over time, the polls that save
    # profiles once a minute and the collector's passes included (a median leaves them out).
    cpu_exporter_mean: float | None = None

    @property
    def cpu_exporter(self) -> float:
        """CPU of the exporter proper: total minus the simulated driver and simulation."""
        if self.cpu_exporter_median is not None:
            return self.cpu_exporter_median
        return max(0.0, self.cpu_total - self.cpu_fake_driver - self.cpu_sim_advance)


class _Span:
    """process-CPU seconds spent in wrapped calls (the caller's thread only)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn):
        def wrapped(*args, **kwargs):
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - start
        return wrapped


@contextmanager
def _patched(obj, name: str, replacement):
    original = getattr(obj, name)
    setattr(obj, name, replacement)
    try:
        yield
    finally:
        setattr(obj, name, original)


@contextmanager
def serve_gc():
    """The garbage collector's settings as ``exporter serve`` sets them (exporter.commands.serve.
    settle_gc: start-up frozen, a higher generation-0 threshold), restored on the way out so the
    rest of the bench process runs as before. A tree whose serve has no such settings keeps
    Python's defaults, as it serves with them."""
    try:
        from exporter.commands.serve import settle_gc
    except ImportError:
        settle_gc = None
    before = gc.get_threshold()
    if settle_gc is not None:
        settle_gc()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def measure_polls(sim, poll, polls: int, advance=None, render_span: _Span | None = None,
                  api_counter=None) -> PollCost:
    """Run ``advance()`` then ``poll()``, ``polls`` times; the median of each figure.

    ``sim`` is the installed Simulation (its ``advance_to`` is timed as simulation work
    wherever it is called from); ``api_counter()`` gives the exporter's cumulative per-call Counter
    (a fresh copy each time: the choke point folds its counts at each poll's start).
    """
    gc.collect()  # garbage of earlier runs in this process would slow these polls (GC passes)
    timer = FakeLibTimer()
    timer.install()
    sim_span = _Span()
    rows = []
    try:
        with _patched(sim, "advance_to", sim_span.wrap(sim.advance_to)):
            for _ in range(polls):
                if advance is not None:
                    advance()
                before_c = Counter(sim.call_counts)
                before_api = api_counter() if api_counter is not None else None
                fake0, sim0 = timer.seconds, sim_span.seconds
                render0 = render_span.seconds if render_span else 0.0
                cpu0, wall0 = time.process_time(), time.perf_counter()
                poll()
                cpu1, wall1 = time.process_time(), time.perf_counter()
                c_delta = sim.call_counts - before_c
                api_delta = (api_counter() - before_api) if before_api is not None else Counter()
                rows.append((cpu1 - cpu0, timer.seconds - fake0, sim_span.seconds - sim0,
                             (render_span.seconds - render0) if render_span else 0.0, wall1 - wall0,
                             c_delta, api_delta))
    finally:
        timer.uninstall()
    last = rows[-1]
    return PollCost(
        polls=polls,
        cpu_total=median(r[0] for r in rows),
        cpu_fake_driver=median(r[1] for r in rows),
        cpu_sim_advance=median(r[2] for r in rows),
        cpu_render=median(r[3] for r in rows),
        wall=median(r[4] for r in rows),
        c_calls=sum(last[5].values()),
        api_calls=sum(last[6].values()) if api_counter is not None else None,
        c_calls_by_symbol=last[5],
        api_calls_by_name=last[6],
        cpu_exporter_median=max(0.0, median(r[0] - r[1] - r[2] for r in rows)),
        cpu_exporter_mean=max(0.0, fmean(r[0] - r[1] - r[2] for r in rows)),
    )


def _vm_rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def gpushare_polls(scenario_path, start_at: float, polls: int, warmup: int = 3):
    """Poll gpushare's SimBackend+Poller ``polls`` times, one virtual second apart, in this process.

    Returns (PollCost, the last Exposition).
    """
    from exporter import poller as poller_module
    from exporter.backend.sim import SimBackend
    from exporter.commands.serve import make_poller
    from exporter.foresight.state import Foresight
    from exporter.prerender import PrerenderPlan
    from exporter.render import Exposition

    backend = SimBackend(scenario_path)
    clock = [start_at]
    backend.step_to(start_at)
    render_span = _Span()

    def advance():
        clock[0] += 1.0
        backend.step_to(clock[0])  # the poll advances the simulation to it

    with _patched(poller_module, "render", render_span.wrap(poller_module.render)), ExitStack() as settings:
        poller = make_poller(backend, 1.0, Foresight())  # as serve runs it, forecasts included
        settings.enter_context(serve_gc())  # where serve settles the collector: before it opens the backend
        backend.open()
        rss_before = _vm_rss_kib()
        try:
            for _ in range(warmup):  # the first polls read identity, profiles, names: not steady state
                advance()
                poller.poll_once()
            poller._prerender = PrerenderPlan()  # no scraper: the measured polls encode nothing
            cost = measure_polls(backend.sim, poller.poll_once, polls, advance, render_span,
                                 lambda: backend.nvml.caller.calls_by_name)
            encodes = []
            for _ in range(5):
                fresh = Exposition(poller.exposition._families, poller.exposition.snapshot, 0.0)
                start = time.process_time()
                fresh.variant((True, True))
                encodes.append(time.process_time() - start)
            cost.cpu_encode_prometheus = median(encodes)
            for variant in ((False, False), (True, True)):  # what scrapers make it hold, too
                poller.exposition.variant(variant)
            cost.rss_growth_kib = _vm_rss_kib() - rss_before
            return cost, poller.exposition
        finally:
            backend.close()


def nvitop_polls(scenario_path, start_at: float, polls: int, warmup: int = 3):
    """Poll nvitop-exporter's PrometheusExporter like its collect() loop does, in this process.

    Returns (PollCost, seconds of CPU to render one text scrape, same gzipped, body bytes).
    Run it in a fresh process (``python bench/perf/anatomy.py nvitop ...``): nvitop keeps
    module-level NVML state. Raises ImportError when nvitop-exporter is not installed.
    """
    import gzip

    from exporter.sim import Simulation
    from exporter.sim.scenario import load_scenario

    sim = Simulation(load_scenario(scenario_path))
    sim.install()
    sim.advance_to(start_at)
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        from nvitop import Device
        from nvitop_exporter.exporter import PrometheusExporter

        physical = Device.from_indices(range(Device.count()))
        devices = physical + [m for d in physical for m in d.mig_devices()]  # as nvitop_exporter.cli
        registry = CollectorRegistry()
        exporter = PrometheusExporter(devices, hostname="bench", registry=registry, interval=1.0)
        clock = [start_at]

        def advance():
            clock[0] += 1.0

        def poll():  # the bench launcher also advances the simulation at the start of a round
            sim.advance_to(clock[0])
            exporter.update_host()
            for device in devices:
                exporter.update_device(device)

        for _ in range(warmup):
            advance()
            poll()
        cost = measure_polls(sim, poll, polls, advance)
        renders, zipped = [], []
        for _ in range(5):
            start = time.process_time()
            body = generate_latest(registry)
            renders.append(time.process_time() - start)
            start = time.process_time()
            gzip.compress(body)
            zipped.append(time.process_time() - start + renders[-1])
        return cost, median(renders), median(zipped), len(body)
    finally:
        sim.close()


def _main(argv=None) -> int:
    """``anatomy.py nvitop SCENARIO START_AT POLLS`` or ``anatomy.py gpushare SCENARIO START_AT POLLS
    [PROTOTYPES]``: print the figures as one JSON line (gpushare with prototypes applied)."""
    import json
    import logging
    import sys

    args = argv if argv is not None else sys.argv[1:]
    logging.disable(logging.CRITICAL)
    if args[0] == "gpushare":
        from perf.minimum import minimum_calls
        from perf.prototypes import apply

        apply([p for p in (args[4] if len(args) > 4 else "").split(",") if p])
        cost, exposition = gpushare_polls(args[1], float(args[2]), int(args[3]))
        out = {k: v for k, v in vars(cost).items() if not isinstance(v, Counter)}
        out.update(minimum=sum(minimum_calls(exposition.snapshot).values()), cpu_exporter=cost.cpu_exporter)
        print(json.dumps(out))
        return 0
    try:
        cost, render, render_gz, size = nvitop_polls(args[1], float(args[2]), int(args[3]))
    except ImportError:
        print(json.dumps({"skip": "nvitop-exporter is not installed (pip install nvitop-exporter)"}))
        return 0
    out = {k: v for k, v in vars(cost).items() if not isinstance(v, Counter)}
    out.update(c_calls_by_symbol=dict(cost.c_calls_by_symbol), render_text=render, render_gzip=render_gz,
               body_bytes=size)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
