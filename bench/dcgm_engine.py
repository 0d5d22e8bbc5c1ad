"""The simulated DCGM host engine on its own: its CPU per poll, and a digest of every answer it gives.

    python bench/dcgm_engine.py                    # ms per poll on the one-GPU MIG nodes and the mixed node
    python bench/dcgm_engine.py --all              # also the 8x A100 all-1g node
    python bench/dcgm_engine.py --digest           # sha256 of every call's answer, five nodes with faults
    PYTHONPATH=<other checkout> python bench/dcgm_engine.py --digest   # that checkout's simulator
    python bench/dcgm_engine.py --smoke            # one node, a few polls (tests/test_bench_smoke.py)

Why: the simulated host engine (exporter/sim/fakedcgm) is Python in the exporter's process. The
benches take its CPU out of the exporter's (bench/dcgm_pairs.py), but it still runs inside every
DCGM poll, between the DCGM read and the NVML reads, and turns the caches over for the
exporter's code after it (docs/performance.md, "DCGM on one-GPU MIG nodes", seventh pass). Its
cost is the simulator's, not the exporter's; a real host engine answers in C.

Timing: the DCGM backend polls as ``exporter serve`` polls (dcgm_bench's ``setup``), one virtual
second apart; each poll's CPU inside the engine's one door (``FakeDcgmLib.invoke``, every C
symbol) is taken with dcgm_bench's EngineTimer; the median and quartiles over the polls, best
median of ``--rounds``.

Digest (``--digest``): the simulator must answer exactly as before when it is made cheaper: the
same values, fields, blanks, statuses and errors. Every call through the engine's door is
recorded after it returns: the symbol, the status it returned, and the bytes of every ctypes
argument it was given (out-parameters included: the value arrays the engine fills, the MIG
hierarchy, ids), while the DCGM backend polls each node through its faults (profiling lock,
host engine down, version swap, lost and reset GPUs, re-enumeration). Two checkouts give the
same digests when the engine answered every call the same, byte for byte. The backend's own code
drives the calls, so compare trees whose exporter/backend/dcgm*.py agree (otherwise the calls
themselves may differ).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

import dcgm_bench  # noqa: E402

from exporter.sim.fakedcgm import hostengine  # noqa: E402

# (label, scenario, first poll at, last poll at, virtual seconds between polls)
TIMED = (("a100-40gb-two-3g@300s", "a100-40gb-two-3g", 300.0),
         ("a30-mig-dcgm@240s", "a30-mig-dcgm", 240.0),
         ("h100-mixed-node@600s", "h100-mixed-node", 600.0))
DIGESTED = (("a100-40gb-two-3g", 0.0, 600.0, 3.0),
            ("a30-mig-dcgm", 0.0, 1200.0, 2.0),  # profiling lock, host engine outage, version swap
            ("health-node", 0.0, 900.0, 3.0),
            ("node-faults", 0.0, 600.0, 1.0),  # lost/reset GPU, flaky calls, hot removal
            ("h100-mixed-node", 0.0, 900.0, 5.0))


def engine_ms(path: Path, start_at: float, polls: int) -> dict:
    """Per-poll CPU ms inside the simulated host engine, DCGM backend polling as serve does."""
    backend, poller, advance = dcgm_bench.setup(path, "dcgm", start_at)
    timer = dcgm_bench.EngineTimer()
    calls = backend.inner.source.bindings.structs.dcgmLib.call_counts
    try:
        per_poll = []
        timer.install()
        before_calls = sum(calls.values())
        for _ in range(polls):
            advance()
            mark = timer.seconds
            poller.poll_once()
            per_poll.append(1000 * (timer.seconds - mark))
        timer.uninstall()
        ordered = sorted(per_poll)
        return {"median": median(ordered), "q1": ordered[(polls - 1) // 4], "q3": ordered[(3 * (polls - 1) + 3) // 4],
                "calls": (sum(calls.values()) - before_calls) / polls}
    finally:
        if timer._original is not None and getattr(hostengine.FakeDcgmLib, timer._attribute) is not timer._original:
            timer.uninstall()
        backend.close()


_PID = str(os.getpid()).encode()


def _arg_bytes(arg) -> bytes:
    """What the engine wrote or was given through one argument, as bytes (the exporter's group
    names hold its pid, which differs from run to run)."""
    target = getattr(arg, "_obj", arg)  # byref(x) -> x
    if isinstance(target, ctypes._Pointer):
        return b"<ptr>"
    if isinstance(target, (ctypes.Array, ctypes.Structure, ctypes.Union, ctypes._SimpleCData)):
        raw = bytes(memoryview(target).cast("B"))
    else:
        raw = repr(target).encode()
    return raw.replace(_PID, b"<pid>")


class _FixedClock:
    """The time module, but for a fixed wall-clock time: the simulated host's boot time (and with
    it every DCGM timestamp) comes from time.time() when the simulation starts."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def time() -> float:
        return 1_800_000_000.0


class Recorder:
    """Wraps the engine's one door: every call's symbol, status and argument bytes, hashed."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.calls = 0
        self._original = None

    def install(self) -> None:
        original = self._original = hostengine.FakeDcgmLib.invoke
        recorder = self

        def recorded(lib, name, method, args):
            status = original(lib, name, method, args)
            recorder.calls += 1
            recorder.hash.update(f"{name}={status}|".encode())
            for arg in args:
                recorder.hash.update(_arg_bytes(arg) + b"|")
            return status
        hostengine.FakeDcgmLib.invoke = recorded

    def uninstall(self) -> None:
        hostengine.FakeDcgmLib.invoke = self._original


def digest(path: Path, start: float, end: float, step: float) -> tuple[int, str]:
    """(calls, sha256) of every engine answer while the DCGM backend polls ``path`` from start to end."""
    import exporter.sim as sim_package

    recorder = Recorder()
    recorder.install()
    clock, sim_package.time = sim_package.time, _FixedClock()
    try:
        backend, poller, _ = dcgm_bench.setup(path, "dcgm", start, warmup=0)
        try:
            t = start
            while t <= end:
                backend.step_to(t)
                poller.poll_once()
                t += step
        finally:
            backend.close()
    finally:
        sim_package.time = clock
        recorder.uninstall()
    return recorder.calls, recorder.hash.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dcgm_engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=200, help="timed polls per node and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per node (best median reported)")
    parser.add_argument("--all", action="store_true", help="also the 8x A100 all-1g MIG node")
    parser.add_argument("--only", metavar="TEXT", action="append", help="only nodes whose label contains TEXT")
    parser.add_argument("--digest", action="store_true", help="digest every answer of the engine instead")
    parser.add_argument("--smoke", action="store_true", help="one node, a few polls, a short digest")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    scenarios = dcgm_bench.SCENARIOS
    if args.digest or args.smoke:
        cases = DIGESTED[:1] if args.smoke else DIGESTED
        for name, start, end, step in cases:
            calls, sha = digest(scenarios / f"{name}.yaml", start, 30.0 if args.smoke else end, step)
            print(f"{name} {start:g}-{30.0 if args.smoke else end:g}s every {step:g}s: {calls} engine calls, "
                  f"sha256 {sha}", flush=True)
        if not args.smoke:
            return 0
    cases = [(label, scenarios / f"{name}.yaml", at) for label, name, at in TIMED]
    if args.all:
        cases.append(("8xA100 7x1g MIG@60s", dcgm_bench.a100_node(Path(tempfile.mkdtemp(prefix="gpushare-engine-"))),
                      60.0))
    if args.smoke:
        cases, args.polls, args.rounds = cases[:1], 5, 1
    if args.only:
        cases = [case for case in cases if any(text in case[0] for text in args.only)]
    print(f"== simulated DCGM host engine, CPU ms per DCGM poll (median [IQR] of {args.polls} polls, best of "
          f"{args.rounds} rounds); load average {os.getloadavg()[0]:.2f}")
    for label, path, at in cases:
        start = time.perf_counter()
        results = [engine_ms(path, at, args.polls) for _ in range(args.rounds)]
        best = min(results, key=lambda r: r["median"])
        print(f"{label:<24} host engine {best['median']:.3f} ms [IQR {best['q1']:.3f}-{best['q3']:.3f}], "
              f"{best['calls']:.1f} calls a poll; round medians "
              + ", ".join(f"{r['median']:.3f}" for r in results)
              + f"  ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
