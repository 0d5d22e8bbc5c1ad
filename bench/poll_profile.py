"""Where every millisecond of a poll goes (issue 22): each phase, each call, the simulator's own
cost apart from the exporter's.

    python bench/poll_profile.py                         # mixed 8-GPU node and the k8s node, 40 polls
    python bench/poll_profile.py --polls 10 --top 10     # quicker
    python bench/poll_profile.py --scenario k8s-shared-node --at 120

The exporter runs as ``exporter serve`` runs it (SimBackend + the serve poller: forecasts,
transitions, HTTP self-metrics; ``--process-series pod``; pods and pod accounting wherever
the scenario has pods), polled in this process one virtual second apart after a warm-up,
under the garbage collector's settings as serve sets them (perf.anatomy.serve_gc).

Two passes over the same polls:

1. Timed (no profiler): process CPU per poll, split with timers around the calls that make
   up a poll: the simulated driver (every call into the fake C library, thread CPU), the
   simulation's advance, the snapshot observers (foresight learning, transitions), render;
   the rest of ``backend.poll()`` is the exporter's reads (pynvml wrappers, /proc, identity,
   pods). These are the milliseconds reported.
2. Profiled (cProfile): every function's own time is given to a room by its file (a
   standard-library function's to the room of whoever called it, by the profile's caller
   edges). The profiler slows Python code unevenly, so its shares are scaled onto the timed
   total of the room; the per-call lists say which calls to fix first.

Every millisecond lands in one row: rows add up to the timed total (the last line says by
how much the scaled profile misses it). The floor: the minimum NVML calls for the metrics
exported (bench/perf/minimum.py), each made once through pynvml against the same simulated
driver, timed the same way: what any Python exporter pays for the data.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from perf.anatomy import FakeLibTimer, _patched, _Span, serve_gc  # noqa: E402

ROOT = str(HERE.parent / "exporter") + os.sep

# Rooms, by the file a function is defined in (first match wins). "sim:" rooms are the
# simulator's: on a real host the driver (C) and the GPU do that work.
ROOMS = (
    ("sim: fake driver (C library stand-in)", ("sim/fakelib", "sim/fakedcgm/", "sim/nvml_symbols", "sim/faults")),
    ("sim: simulation (engine, telemetry, fake /proc)", ("sim/",)),
    ("exporter: backend reads (NVML through pynvml)", ("backend/nvml", "backend/base", "backend/replicas",
                                                      "backend/sim", "backend/choose")),
    ("exporter: backend reads (DCGM)", ("backend/dcgm",)),
    ("exporter: /proc reads (names, MPS limits, cgroups)", ("backend/procinfo", "redact")),
    ("exporter: identity and pods", ("identity", "k8s/", "podshare", "accounting")),
    ("exporter: foresight (learning, forecasts)", ("foresight/", "collectors/forecast")),
    ("exporter: collectors", ("collectors/",)),
    ("exporter: render (exposition, encode)", ("render", "prerender", "encode")),
    ("exporter: poller, transitions, snapshot", ("poller", "transitions", "snapshot", "units", "catalog")),
)
PYNVML_ROOM = "exporter: pynvml wrappers (ctypes; run on a real GPU too)"
FAKE_DRIVER_ROOM = ROOMS[0][0]
CLIENT_ROOM = "exporter: prometheus_client"
OTHER = "other (bench, interpreter)"


def room_of_file(filename: str) -> str | None:
    """The room of a function defined in ``filename``; None for the standard library (caller decides)."""
    if filename.startswith(ROOT):
        rel = filename[len(ROOT):]
        for room, prefixes in ROOMS:
            if any(rel.startswith(p) for p in prefixes):
                return room
        return "exporter: other"
    base = os.path.basename(filename)
    if base == "pynvml.py" or "/pynvml/" in filename:
        return PYNVML_ROOM
    if "prometheus_client" in filename:
        return CLIENT_ROOM
    if str(HERE) in filename:
        return OTHER
    return None


def attribute(stats: pstats.Stats, room_of=None) -> tuple[Counter, dict[str, Counter]]:
    """({room: own seconds}, {room: {function: own seconds}}), library time given to callers;
    ``room_of((filename, line, name))`` names a function's room (None: its callers'; default:
    room_of_file)."""
    room_of = room_of or (lambda func: room_of_file(func[0]))
    raw = stats.stats  # {func: (cc, nc, tt, ct, callers)}; callers: {caller: (cc, nc, tt, ct)}
    memo: dict = {}

    def shares(func, depth=0) -> dict:
        """{(room, named function): fraction} that ``func``'s own time belongs to."""
        if func in memo:
            return memo[func]
        room = room_of(func)
        if room == PYNVML_ROOM and raw[func][4] and depth <= 40:
            # pynvml's struct classes are also used by the fake driver (it fills the caller's
            # structs as the C library would, through their Python attribute hooks): that share
            # was timed as the fake driver's, so it is the fake driver's here too.
            memo[func] = {(room, func): 1.0}
            result = defaultdict(float)
            for caller, weight in _weights(raw[func][4]).items():
                in_sim = sum(part for (r, _), part in shares(caller, depth + 1).items() if r.startswith("sim:")) \
                    if caller in raw else 0.0
                result[(FAKE_DRIVER_ROOM, func)] += weight * in_sim
                result[(room, func)] += weight * (1.0 - in_sim)
            result = dict(result)
        elif room is not None or depth > 40:
            result = {(room or OTHER, func): 1.0}
        else:
            memo[func] = {(OTHER, func): 1.0}  # a cycle of library calls stays "other"
            callers = raw[func][4]
            total = sum(edge[2] for edge in callers.values()) or sum(edge[1] for edge in callers.values())
            result = defaultdict(float)
            if not callers or not total:
                result[(OTHER, func)] = 1.0
            for caller, edge in callers.items():
                weight = (edge[2] if sum(e[2] for e in callers.values()) else edge[1]) / total if total else 0
                if caller in raw:
                    for key, part in shares(caller, depth + 1).items():
                        result[key] += weight * part
            result = dict(result)
        memo[func] = result
        return result

    rooms: Counter = Counter()
    calls: dict[str, Counter] = defaultdict(Counter)
    for func, (cc, nc, tt, ct, callers) in raw.items():
        for (room, owner), part in shares(func).items():
            rooms[room] += tt * part
            calls[room][_name(owner)] += tt * part
    return rooms, calls


def _weights(callers: dict) -> dict:
    """{caller: share of the callee's own time}, by the edges' own time (call counts if none)."""
    column = 2 if sum(edge[2] for edge in callers.values()) else 1
    total = sum(edge[column] for edge in callers.values())
    return {caller: edge[column] / total if total else 0.0 for caller, edge in callers.items()}


def _name(func) -> str:
    filename, line, name = func
    if filename.startswith(ROOT):
        filename = "exporter/" + filename[len(ROOT):]
    elif filename == "~":
        return name
    else:
        filename = os.path.basename(filename)
    return f"{filename}:{line}({name})"


@contextmanager
def profiled_read_threads():
    """While open, each per-GPU read (exporter.backend.nvml_worker's threads) runs under its own
    thread-CPU profiler; yields the list those profiles are appended to, to merge after."""
    from exporter.backend import nvml_device

    profiles = []
    original_read = nvml_device.GpuReader.read

    def profiled_read(reader):
        own = cProfile.Profile(time.thread_time)
        own.enable()
        try:
            return original_read(reader)
        finally:
            own.disable()
            profiles.append(own)

    with _patched(nvml_device.GpuReader, "read", profiled_read):
        yield profiles


def build(scenario: str, at: float, backend_kind: str = "nvml"):
    """serve's poller on a simulated node; ``backend_kind`` "dcgm" reads it through the DCGM
    backend (its activity every poll, as bench/dcgm_bench.py sets it up)."""
    from exporter.backend.choose import DcgmOptions
    from exporter.backend.sim import SimBackend
    from exporter.commands.serve import make_poller
    from exporter.foresight.state import Foresight
    from exporter.shipped import resolve_scenario
    from exporter.web.guard import HttpStats

    if backend_kind == "nvml":
        backend = SimBackend(resolve_scenario(scenario))
    else:
        backend = SimBackend(resolve_scenario(scenario), backend=backend_kind, dcgm=DcgmOptions(interval=1.0))
    backend.step_to(at)
    foresight = Foresight()
    poller = make_poller(backend, 1.0, foresight, "pod", http_stats=HttpStats())
    backend.open()
    return backend, poller


def run(scenario: str, at: float, polls: int, warmup: int, top: int) -> dict:
    """Both passes and the floor, under the garbage collector's settings as serve sets them."""
    with serve_gc():
        return _run(scenario, at, polls, warmup, top)


def _run(scenario: str, at: float, polls: int, warmup: int, top: int) -> dict:
    from exporter import poller as poller_module
    from exporter.prerender import PrerenderPlan

    backend, poller = build(scenario, at)
    clock = [at]

    def one_poll():
        clock[0] += 1.0
        backend.step_to(clock[0])
        poller.poll_once()

    render_span, observe_span, sim_span = _Span(), _Span(), _Span()
    try:
        for _ in range(warmup):
            one_poll()
        poller._prerender = PrerenderPlan()  # no scraper: as exporter_bench, no encode in the poll
        observers = [observe_span.wrap(o) for o in poller._observers]
        timer = FakeLibTimer()
        rows = []
        with _patched(poller_module, "render", render_span.wrap(poller_module.render)), \
                _patched(poller, "_observers", observers), \
                _patched(backend.sim, "advance_to", sim_span.wrap(backend.sim.advance_to)):
            gc.collect()
            timer.install()
            try:
                for _ in range(polls):  # pass 1: timed
                    marks = (timer.seconds, sim_span.seconds, observe_span.seconds, render_span.seconds)
                    cpu0 = time.process_time()
                    one_poll()
                    cpu = time.process_time() - cpu0
                    rows.append((cpu, timer.seconds - marks[0], sim_span.seconds - marks[1],
                                 observe_span.seconds - marks[2], render_span.seconds - marks[3]))
            finally:
                timer.uninstall()
            # pass 2: profiled, in thread CPU time (a wait costs nothing), the per-GPU read
            # threads (exporter.backend.nvml_worker) each under their own profiler, merged after.
            profile = cProfile.Profile(time.thread_time)
            with profiled_read_threads() as thread_profiles:
                profile.enable()
                for _ in range(polls):
                    one_poll()
                profile.disable()
        snapshot = poller.exposition.snapshot
        floor = measure_floor(backend, snapshot, polls)
    finally:
        backend.close()

    total, driver, sim, observe, render = (statistics.median(r[i] for r in rows) for i in range(5))
    # What a process pays over time is the mean: a median hides the polls that save profiles
    # (once a minute) and the collector's passes, which a steady exporter does pay.
    exporter_mean = statistics.fmean(r[0] - r[1] - r[2] for r in rows)
    stats = pstats.Stats(profile)
    for own in thread_profiles:
        stats.add(own)
    rooms, calls = attribute(stats)
    return {"scenario": scenario, "at": at, "polls": polls, "gpus": len(snapshot.gpus),
            "processes": sum(len(g.processes) for g in snapshot.gpus),
            "pods": len({(p.namespace, p.pod) for p in snapshot.pod_devices}) if snapshot.pod_devices else 0,
            "timed": {"total": total, "driver": driver, "sim": sim, "observe": observe, "render": render,
                      "reads": max(0.0, total - driver - sim - observe - render), "exporter_mean": exporter_mean},
            "rooms": rooms, "calls": calls, "top": top, "floor": floor}


def measure_floor(backend, snapshot, polls: int) -> dict:
    """The minimum NVML calls for ``snapshot``'s metrics, each made once through pynvml with the
    arguments an exporter passes (perf/floor.py): CPU per poll, the fake driver's share apart
    (the floor of any Python exporter on this node)."""
    import pynvml

    from perf.floor import floor_plan

    floor = floor_plan(pynvml, snapshot)
    timer = FakeLibTimer()
    timer.install()
    try:
        rows = []
        for _ in range(polls):
            t0, f0 = time.process_time(), timer.seconds
            floor.run(pynvml)
            rows.append((time.process_time() - t0, timer.seconds - f0))
    finally:
        timer.uninstall()
        floor.close()
    total = statistics.median(r[0] for r in rows)
    driver = statistics.median(r[1] for r in rows)
    return {"calls": len(floor.calls), "unformed": floor.unformed, "total": total, "driver": driver,
            "pynvml": max(0.0, total - driver)}


def report(result: dict) -> None:
    t = result["timed"]
    ms = 1000.0
    print(f"\n== {result['scenario']} at {result['at']:g} s: {result['gpus']} GPUs, {result['processes']} processes, "
          f"{result['pods']} pods; median of {result['polls']} polls, CPU ms per poll ==")
    exporter_ms = (t["total"] - t["driver"] - t["sim"]) * ms
    print(f"  timed total {t['total'] * ms:7.2f}   simulator {(t['driver'] + t['sim']) * ms:7.2f} "
          f"(fake driver {t['driver'] * ms:.2f}, simulation {t['sim'] * ms:.2f})   exporter {exporter_ms:7.2f} "
          f"= {exporter_ms / 10:.2f} % of a core at 1 s")
    mean_ms = t["exporter_mean"] * ms
    print(f"  exporter, mean of the same polls {mean_ms:7.2f} = {mean_ms / 10:.2f} % of a core at 1 s "
          f"(what a process pays over time: the profile saves and collector passes a median leaves out)")
    print(f"  exporter phases: reads {t['reads'] * ms:.2f}, observers (foresight, transitions) "
          f"{t['observe'] * ms:.2f}, render {t['render'] * ms:.2f}")
    rooms = result["rooms"]
    profiled = sum(rooms.values()) or 1.0
    sim_rooms = {r: s for r, s in rooms.items() if r.startswith("sim:")}
    exp_rooms = {r: s for r, s in rooms.items() if not r.startswith("sim:")}
    # Scale: the simulator's rooms onto the timed simulator CPU, the exporter's onto the exporter's.
    scale_sim = (t["driver"] + t["sim"]) / (sum(sim_rooms.values()) or 1.0)
    scale_exp = (t["total"] - t["driver"] - t["sim"]) / (sum(exp_rooms.values()) or 1.0)
    print(f"  {'room (profile shares scaled onto the timed CPU)':58} {'ms/poll':>8} {'share':>6}")
    scaled_total = 0.0
    for room, seconds in sorted(rooms.items(), key=lambda kv: -kv[1]):
        scaled = seconds * (scale_sim if room.startswith("sim:") else scale_exp)
        scaled_total += scaled
        print(f"  {room:58} {scaled * ms:8.2f} {100 * seconds / profiled:5.1f}%")
    print(f"  {'(rows add up to)':58} {scaled_total * ms:8.2f}   timed {t['total'] * ms:.2f}")
    print(f"  top exporter calls by own time (library time folded into the caller), ms/poll:")
    own = Counter()
    for room, counter in result["calls"].items():
        if not room.startswith("sim:") and room != OTHER:
            for name, seconds in counter.items():
                own[f"{name}  [{room.split(': ', 1)[-1].split(' (')[0]}]"] += seconds * scale_exp
    for name, seconds in own.most_common(result["top"]):
        print(f"    {seconds * ms:7.3f}  {name}")
    f = result["floor"]
    print(f"  floor: the minimum {f['calls']} NVML calls through pynvml: {f['total'] * ms:.2f} ms "
          f"(fake driver {f['driver'] * ms:.2f}, pynvml {f['pynvml'] * ms:.2f}); exporter / floor(pynvml) = "
          f"{exporter_ms / (f['pynvml'] * ms):.1f}x, reads / floor(pynvml) = {t['reads'] / f['pynvml']:.1f}x"
          if f["pynvml"] else "  floor: (no calls)")
    if f.get("unformed"):
        print(f"  floor leaves out (arguments not formed): {', '.join(f['unformed'])}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", action="append", help="shipped scenario name or file (repeatable; "
                        "default: h100-mixed-node at 600 s and k8s-shared-node at 120 s)")
    parser.add_argument("--at", type=float, default=None, help="virtual seconds to start at")
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    targets = ([(s, args.at if args.at is not None else 600.0) for s in args.scenario] if args.scenario
               else [("h100-mixed-node", 600.0), ("k8s-shared-node", 120.0)])
    print(f"poll profile; load average {os.getloadavg()[0]:.2f} (a busy machine inflates every figure alike)")
    for scenario, at in targets:
        report(run(scenario, at, args.polls, args.warmup, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
