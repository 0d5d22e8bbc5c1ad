"""What a poll costs on a real GPU (issue 22's floor, on hardware rather than the fake driver).

    python bench/real_gpu_cost.py [--polls 30] [--serve-seconds 60] [--interval 1]

On a host with an NVIDIA driver and GPU it prints:
1. the NVML backend's poll (the same code as `exporter serve`): CPU and wall per poll, median of
   ``--polls`` after one warm-up, and its NVML calls per poll;
2. the floor: the minimum NVML calls for the metrics that poll exported (bench/perf/minimum.py,
   the definition the simulated profile uses), each made once through pynvml against the real
   driver with the arguments an exporter passes (bench/perf/floor.py), CPU per round, median of
   ``--polls`` rounds. On real hardware the driver's own CPU
   cannot be told apart from pynvml's, so this floor includes both;
3. the driver's share of that poll: every C function the poll calls (pynvml's and the exporter's
   direct calls alike) timed in its thread, so poll CPU minus driver CPU is the exporter's own
   Python (the "exporter only" figure of bench/exporter_bench.py, here on hardware);
4. `exporter serve` as deployed (foresight, transitions, the HTTP server; a scrape every 15 s
   like Prometheus): its process CPU over ``--serve-seconds`` after a 10 s warm-up, as % of a core.

Only Get/Query calls, the same the exporter makes; nothing is changed on the GPU. Without a
driver or GPU it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

import pynvml  # noqa: E402

from exporter.backend.nvml import NvmlBackend  # noqa: E402
from exporter.errors import NoGpuError  # noqa: E402
from perf.floor import floor_plan  # noqa: E402

PROG = "real_gpu_cost"


class DriverTimer:
    """Times every C function that pynvml hands out (``_nvmlGetFunctionPointer``), per symbol: thread
    CPU seconds and calls. Installed before ``nvmlInit`` so that every pointer goes through it."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wrapped: dict[str, object] = {}
        self._original = pynvml._nvmlGetFunctionPointer
        pynvml._nvmlGetFunctionPointer = self._pointer

    def close(self) -> None:
        pynvml._nvmlGetFunctionPointer = self._original

    def _pointer(self, name):
        if name not in self._wrapped:
            self._wrapped[name] = _TimedSymbol(self, name, self._original(name))
        return self._wrapped[name]

    def add(self, name: str, spent: float) -> None:
        with self._lock:
            self.cpu[name] = self.cpu.get(name, 0.0) + spent
            self.calls[name] = self.calls.get(name, 0) + 1

    def reset(self) -> tuple[dict, dict]:
        with self._lock:
            taken = self.cpu, self.calls
            self.cpu, self.calls = {}, {}
        return taken


class _TimedSymbol:
    """A C function pointer that reports each call's thread CPU; restype/argtypes go to the pointer."""

    def __init__(self, timer: DriverTimer, name: str, fn) -> None:
        object.__setattr__(self, "_t", (timer, name, fn))

    def __call__(self, *args):
        timer, name, fn = self._t
        start = time.thread_time()
        try:
            return fn(*args)
        finally:
            timer.add(name, time.thread_time() - start)

    def __getattr__(self, attr):
        return getattr(self._t[2], attr)

    def __setattr__(self, attr, value):
        setattr(self._t[2], attr, value)


def timed_polls(backend: NvmlBackend, timer: DriverTimer, polls: int, pause: float):
    """Medians over ``polls`` polls after one warm-up: {"cpu", "wall", "calls", "driver"} (seconds,
    NVML calls), per-symbol driver CPU per poll {name: (seconds, calls)}, and the last snapshot."""
    snapshot = backend.poll()
    rows, per_symbol = [], {}
    for _ in range(polls):
        time.sleep(pause)
        timer.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        snapshot = backend.poll()
        rows.append((time.process_time() - cpu, time.perf_counter() - wall, backend.calls_last_poll))
        spent, calls = timer.reset()
        rows[-1] += (sum(spent.values()),)
        for name, seconds in spent.items():
            per_symbol.setdefault(name, []).append((seconds, calls[name]))
    medians = {key: statistics.median(r[i] for r in rows) for i, key in enumerate(("cpu", "wall", "calls", "driver"))}
    symbols = {name: (sum(s for s, _ in v) / polls, sum(c for _, c in v) / polls) for name, v in per_symbol.items()}
    return medians, symbols, snapshot


def timed_floor(snapshot, rounds: int, pause: float):
    """(median CPU s of one round of the minimum calls, calls per round, calls not formed)."""
    floor = floor_plan(pynvml, snapshot)
    try:
        cpu = []
        for _ in range(rounds):
            time.sleep(pause)
            start = time.process_time()
            floor.run(pynvml)
            cpu.append(time.process_time() - start)
    finally:
        floor.close()
    return statistics.median(cpu), len(floor.calls), floor.unformed


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_cpu(seconds: float, interval: float, simulate: str | None) -> str:
    """`exporter serve`'s CPU as % of a core over ``seconds``, scraped every 15 s."""
    from real_gpu_smoke import scrape, served

    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"{PROG}-state-{os.getpid()}"
    extra = ["--interval", str(interval), "--state-dir", str(state), *(["--simulate", simulate] if simulate else [])]
    with served(*extra) as (proc, url, body):
        if body is None:
            return "serve: FAILED"
        time.sleep(10)
        start_cpu, start = _cpu_seconds(proc.pid), time.monotonic()
        size = len(body)
        while time.monotonic() - start < seconds:
            size = len(scrape(url) or b"") or size
            time.sleep(min(15.0, max(0.0, seconds - (time.monotonic() - start))))
        used, span = _cpu_seconds(proc.pid) - start_cpu, time.monotonic() - start
        return (f"serve (--interval {interval:g}, foresight on, scraped every 15 s): "
                f"{100 * used / span:.2f} % of a core over {span:.0f} s ({used:.2f} s CPU), /metrics {size} bytes")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=30, help="polls and floor rounds to time (default 30)")
    parser.add_argument("--serve-seconds", type=float, default=60.0,
                        help="window for serve's CPU; 0 skips it (default 60)")
    parser.add_argument("--interval", type=float, default=1.0, help="serve's poll interval (default 1)")
    parser.add_argument("--top", type=int, default=25, help="C functions listed (default 25)")
    parser.add_argument("--simulate", metavar="SCENARIO",
                        help="measure the same on a simulated node instead (a dry run without a GPU)")
    args = parser.parse_args(argv)
    sim = None
    if args.simulate:
        from exporter.sim import Simulation
        from exporter.sim.scenario import load_scenario
        from exporter.shipped import resolve_scenario

        sim = Simulation(load_scenario(resolve_scenario(args.simulate)))
        sim.install()
    timer = DriverTimer()
    backend = NvmlBackend(procfs_root=sim.procfs_root if sim else "/proc")
    try:
        backend.open()
    except NoGpuError as exc:
        timer.close()
        print(f"{PROG}: error: {' '.join(str(exc).split())}; this check needs a host with an NVIDIA GPU and driver")
        return 2
    try:
        poll, symbols, snapshot = timed_polls(backend, timer, max(1, args.polls), 0.1)
        floor_cpu, floor_calls, unformed = timed_floor(snapshot, max(1, args.polls), 0.1)
    finally:
        backend.close()
        timer.close()
        if sim is not None:
            sim.close()
    gpus = sum(1 for g in snapshot.gpus if g.up)
    procs = sum(len(g.processes) for g in snapshot.gpus)
    print(f"{gpus} GPU(s), {procs} process(es), driver {snapshot.driver_version}")
    cpu = poll["cpu"]
    print(f"backend poll: {cpu * 1e3:.2f} ms CPU, {poll['wall'] * 1e3:.2f} ms wall, {poll['calls']:g} NVML calls "
          f"(median of {args.polls}); in the driver's C functions {poll['driver'] * 1e3:.2f} ms, the exporter's "
          f"own Python {(cpu - poll['driver']) * 1e3:.2f} ms")
    print(f"floor: {floor_calls} minimum NVML calls through pynvml and the driver: {floor_cpu * 1e3:.2f} ms CPU; "
          f"poll / floor = {cpu / floor_cpu:.2f}x" if floor_cpu > 0 else "floor: no CPU measured")
    if unformed:
        print(f"floor leaves out (arguments not formed): {', '.join(unformed)}")
    print("driver CPU per poll by C function (mean of the timed polls):")
    for name, (seconds, calls) in sorted(symbols.items(), key=lambda kv: (-kv[1][0], kv[0]))[:args.top]:
        print(f"  {name:48s} {seconds * 1e3:7.3f} ms  {calls:5.1f} calls  {seconds / calls * 1e6:8.1f} us/call")
    if args.serve_seconds > 0:
        print(serve_cpu(args.serve_seconds, args.interval, args.simulate))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
