"""Where a DCGM-backend poll's CPU goes, next to an NVML-backend poll on the same node (issue 22, item 3).

    python bench/dcgm_profile.py                  # the one-GPU MIG nodes, 40 polls per backend
    python bench/dcgm_profile.py --all --polls 20 # also the mixed H100 node and 8x A100 all-1g MIG
    python bench/dcgm_profile.py --smoke          # one scenario, 3 polls (tests/test_bench_smoke.py)
    PYTHONPATH=<other checkout> python bench/dcgm_profile.py   # that checkout's exporter
    python bench/dcgm_profile.py --own            # the DCGM backend's own work alone (below)

Polls exactly as bench/dcgm_bench.py does (its ``setup``), in two passes per backend:

1. Timed, no profiler (dcgm_bench's ``cost``): the exporter's CPU per poll, the simulated
   NVML library, host engine and simulation taken out poll by poll.
2. Profiled (cProfile in thread CPU time; the per-GPU NVML read threads under their own
   profilers, merged): each function's own time goes to a room by its file, standard-library
   time to the room of its caller (bench/poll_profile.py's ``attribute``). The exporter's rooms
   are scaled onto pass 1's exporter CPU, since the profiler slows Python code unevenly.

Rooms a real host runs as well: the DCGM bindings (``dcgm_agent``'s wrappers; here the
simulator's copies, which do what DCGM's own do), the DCGM backend
(exporter/backend/dcgm*.py), the NVML reads and pynvml, collectors, render, the poller. The
simulator's rooms (fake NVML library, fake host engine, simulation) are listed apart and
are not in the exporter's figure. The structures' attribute accessors (C strings decoded to
str, pynvml's and dcgm_structs') are charged to their callers: the simulated libraries fill
out-parameters through them, which a real driver does in C.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

import dcgm_bench  # noqa: E402
import exporter  # noqa: E402
import poll_profile  # noqa: E402

# The exporter PYTHONPATH chose (`PYTHONPATH=<other checkout>` profiles that one): its files get
# the rooms this checkout's would.
IMPORTED = os.path.dirname(exporter.__file__) + os.sep
BINDINGS_ROOM = "exporter: DCGM bindings (wrappers, structs)"
SIM_ROOMS = (
    ("sim: fake DCGM host engine", ("sim/fakedcgm/",)),
    ("sim: fake NVML library", ("sim/fakelib", "sim/nvml_symbols", "sim/faults")),
    ("sim: simulation", ("sim/",)),
)


# Accessors of the bindings' and pynvml's structures: charged to whoever calls them (the
# simulated library fills its out-parameters through them; on a real host that is C).
ACCESSORS = ("__setattr__", "__getattribute__", "__getattr__", "_decoded")


def room_of(func) -> str | None:
    """poll_profile's rooms, with the DCGM bindings counted as the exporter's (real ones are Python too)."""
    filename, _, name = func
    if filename.startswith(IMPORTED):
        filename = poll_profile.ROOT + filename[len(IMPORTED):]
    if name in ACCESSORS and ("fakedcgm/bindings/" in filename or os.path.basename(filename) == "pynvml.py"):
        return None
    root = poll_profile.ROOT
    if filename.startswith(root):
        rel = filename[len(root):]
        if rel.startswith("sim/fakedcgm/bindings/"):
            return BINDINGS_ROOM
        for room, prefixes in SIM_ROOMS:
            if any(rel.startswith(p) for p in prefixes):
                return room
    return poll_profile.room_of_file(filename)


def profile(path: Path, kind: str, start_at: float, polls: int) -> pstats.Stats:
    """Thread-CPU profile of ``polls`` polls, the NVML read threads included."""
    backend, poller, advance = dcgm_bench.setup(path, kind, start_at)
    main = cProfile.Profile(time.thread_time)
    try:
        with poll_profile.profiled_read_threads() as thread_profiles:
            for _ in range(polls):
                advance()
                main.enable()
                poller.poll_once()
                main.disable()
    finally:
        backend.close()
    stats = pstats.Stats(main)
    for own in thread_profiles:
        stats.add(own)
    return stats


def report(label: str, kind: str, timed: dict, stats: pstats.Stats, polls: int, top: int) -> dict:
    rooms, calls = poll_profile.attribute(stats, room_of)
    exporter_ms = timed["exporter_cpu_ms"]
    exp_rooms = {r: s for r, s in rooms.items() if not r.startswith("sim:")}
    scale = exporter_ms / (1000 * sum(exp_rooms.values()) / polls or 1.0)
    print(f"\n== {label}, backend {kind}: exporter {exporter_ms:.2f} ms per poll (timed), {timed['samples']} series; "
          f"simulator apart: fake NVML {timed['fake_nvml_ms']:.2f}, host engine {timed['fake_dcgm_ms']:.2f}")
    out = {}
    print(f"  {'room':58} {'scaled':>9} {'profiled':>9}  (ms per poll)")
    for room, seconds in sorted(exp_rooms.items(), key=lambda kv: -kv[1]):
        out[room] = 1000 * seconds / polls * scale
        print(f"  {room:58} {out[room]:9.3f} {1000 * seconds / polls:9.3f}")
    for room, seconds in sorted(rooms.items()):
        if room.startswith("sim:"):
            print(f"  ({room}, profiled, unscaled {1000 * seconds / polls:.2f} ms)")
    own = Counter()
    for room, counter in calls.items():
        if not room.startswith("sim:"):
            for name, seconds in counter.items():
                own[f"{name}  [{room.split(': ', 1)[-1].split(' (')[0]}]"] += 1000 * seconds / polls * scale
    print("  top calls by own time (library time folded into the caller), ms per poll:")
    for name, ms in own.most_common(top):
        print(f"    {ms:7.3f}  {name}")
    return out


def own_work(path: Path, start_at: float, number: int = 2000, repeat: int = 7) -> dict:
    """CPU µs of the DCGM backend's own work in one poll, and of its parts, with the host engine's
    dcgmEntitiesGetLatestValues and the NVML poll replaced by their answers of the last poll
    (the same arrays, the same Snapshot): what DcgmBackend adds around NvmlBackend.poll on a
    real host, where both are C. Tight loops, best of ``repeat`` (the machine's load moves
    such small figures less than it moves a whole poll)."""
    import timeit

    backend, poller, advance = dcgm_bench.setup(path, "dcgm", start_at)
    try:
        advance()
        poller.poll_once()
        inner = backend.inner
        source = inner.source
        session = source.session
        snapshot = inner.nvml.poll()
        inner.nvml.poll = lambda: snapshot
        answered = {}
        real = session._get_latest

        def last_answer(batch):
            if id(batch) not in answered:
                answered[id(batch)] = real(batch)
            return answered[id(batch)]

        session._get_latest = last_answer
        inner.poll()
        reading = source.read()
        parts = {"poll (DCGM backend's own work)": inner.poll, "DcgmSource.read": source.read,
                 "merge into the Snapshot": lambda: inner._merge(snapshot, reading, 0.0)}
        return {name: 1e6 * min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)) / number
                for name, fn in parts.items()}
    finally:
        backend.close()


def fused_estimate(path: Path, start_at: float, number: int = 5000, repeat: int = 7) -> dict:
    """What building each poll's Activities straight from the decoded values would save (issue 22,
    item 3, lead "no per-entity dict"): CPU µs per poll, tight loops, best of ``repeat``, of

    - the profiling read set's values split into a dict per entity and ``dcgm.activity`` per dict
      (what a poll does: dcgm_batch.Batch.decode's fast way, then dcgm._activities);
    - ``dcgm.activity`` alone on those dicts (the dicts kept for the other readers of a DcgmReading);
    - one pass per entity over the decoded values, each value paired with its Activity field
      (no dict), the same Activities (checked here).

    Only where the read set decodes the fast way (a plan for its layout); {} otherwise."""
    import timeit

    from exporter.backend import dcgm
    from exporter.backend.dcgm_values import PROFILING_FIELDS

    backend, poller, advance = dcgm_bench.setup(path, "dcgm", start_at)
    try:
        advance()
        poller.poll_once()
        session = backend.inner.source.session
        sets = [b for b in getattr(session, "_batches", {}).values()  # the profiling read set (dcgm_batch.Batch)
                if getattr(b, "_meta", None) is not None and set(b.field_ids) <= set(PROFILING_FIELDS)]
        if not sets:
            return {}
        batch = sets[0]
        fast = batch._fast.get(batch._meta.unpack_from(batch.values))
        if not fast:
            return {}
        numbers = [None if n >= blank else n for n, blank in zip(fast.values.unpack_from(batch.values), fast.blanks)]
        spans = fast.spans
        pipes = [tuple(PROFILING_FIELDS.get(fid) for fid in fids) for _, fids, _, _ in spans]
        plain = dcgm._NO_ACTIVITY.__dict__
        dicts = {entity: dict(zip(fids, numbers[start:end])) for entity, fids, start, end in spans}

        def today():
            return [dcgm.activity(values) for values in
                    {entity: dict(zip(fids, numbers[start:end])) for entity, fids, start, end in spans}.values()]

        def activity_only():
            return [dcgm.activity(values) for values in dicts.values()]

        def straight():
            out = []
            for (_, _, start, end), fields in zip(spans, pipes):
                new = object.__new__(dcgm.Activity)
                attributes = new.__dict__
                attributes.update(plain)
                for pipe, value in zip(fields, numbers[start:end]):
                    if value is not None and pipe is not None:
                        value = float(value)
                        attributes[pipe] = value if 0.0 < value <= 1.0 else (1.0 if value > 1.0 else 0.0)
                out.append(new)
            return out

        assert [a.__dict__ for a in today()] == [a.__dict__ for a in straight()]
        figures = {"entities": len(spans), "values": len(numbers)}
        for name, fn in (("dicts + activity()", today), ("activity() on kept dicts", activity_only),
                         ("straight from the values", straight)):
            figures[name] = 1e6 * min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)) / number
        return figures
    finally:
        backend.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dcgm_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=40, help="polls per backend and pass")
    parser.add_argument("--top", type=int, default=12, help="calls listed per backend")
    parser.add_argument("--all", action="store_true", help="also the two 8-GPU nodes")
    parser.add_argument("--smoke", action="store_true", help="one scenario, three polls (harness check)")
    parser.add_argument("--own", action="store_true", help="only the DCGM backend's own work per poll (own_work)")
    parser.add_argument("--fused", action="store_true",
                        help="only what building Activities straight from the decoded values would save (fused_estimate)")
    args = parser.parse_args(argv)
    import logging
    import tempfile

    logging.disable(logging.WARNING)
    cases = [("a100-40gb-two-3g@300s", dcgm_bench.SCENARIOS / "a100-40gb-two-3g.yaml", 300.0),
             ("a30-mig-dcgm@240s", dcgm_bench.SCENARIOS / "a30-mig-dcgm.yaml", 240.0)]
    if args.smoke:
        cases, args.polls = cases[:1], 3
    elif args.all:
        tmp = Path(tempfile.mkdtemp(prefix="gpushare-dcgm-profile-"))
        cases += [("h100-mixed-node@600s", dcgm_bench.SCENARIOS / "h100-mixed-node.yaml", 600.0),
                  ("8xA100 7x1g MIG", dcgm_bench.a100_node(tmp), 60.0)]
    if args.fused:
        print(f"Activities per poll from the profiling read set, CPU µs (tight loops); load average {os.getloadavg()[0]:.2f}")
        for label, path, start_at in cases:
            figures = fused_estimate(path, start_at, number=50 if args.smoke else 5000, repeat=2 if args.smoke else 7)
            print(f"  {label:24} " + ("no fast plan" if not figures else "  ".join(
                f"{name} {value:.2f}" if isinstance(value, float) else f"{name} {value}" for name, value in figures.items())))
        return 0
    if args.own:
        print(f"DCGM backend's own work per poll, CPU µs (host engine and NVML poll replaced by their last "
              f"answers); load average {os.getloadavg()[0]:.2f}")
        for label, path, start_at in cases:
            figures = own_work(path, start_at, number=50 if args.smoke else 2000, repeat=2 if args.smoke else 7)
            print(f"  {label:24} " + "  ".join(f"{name} {us:.1f}" for name, us in figures.items()))
        return 0
    print(f"DCGM poll profile; load average {os.getloadavg()[0]:.2f}")
    for label, path, start_at in cases:
        rooms = {}
        for kind in ("nvml", "dcgm"):
            timed = dcgm_bench.cost(path, kind, start_at, args.polls)
            rooms[kind] = report(label, kind, timed, profile(path, kind, start_at, args.polls), args.polls, args.top)
        print(f"  -- {label}: DCGM minus NVML by room, ms per poll:")
        for room in sorted(set(rooms["nvml"]) | set(rooms["dcgm"]),
                           key=lambda r: -abs(rooms["dcgm"].get(r, 0) - rooms["nvml"].get(r, 0))):
            print(f"    {rooms['dcgm'].get(room, 0) - rooms['nvml'].get(room, 0):+7.3f}  {room}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
