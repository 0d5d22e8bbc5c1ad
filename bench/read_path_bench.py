"""The exporter's read path alone: CPU of ``backend.poll()`` without the fake driver (issue 22).

    python bench/read_path_bench.py                       # mixed 8-GPU node at 600 s, 60 polls
    python bench/read_path_bench.py --scenario k8s-shared-node --at 120 --polls 40

No render, no observers, no collector: the CPU a poll spends in the NVML backend (pynvml's
wrappers, the readers, /proc, identity, the per-GPU thread hand-offs), with every call into the
simulator's fake C library timed and taken out, and the simulation advanced outside the timed
span. poll_profile.py gives the same phase inside a whole poll, where whatever else the poll
allocates (garbage collections) and evicts from the caches lands in it too; this one isolates it.
To compare two trees, run this file from each (it imports the exporter next to it), alternately.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from perf.anatomy import FakeLibTimer  # noqa: E402


def measure(scenario: str, at: float, polls: int, warmup: int) -> dict:
    from exporter.backend.sim import SimBackend
    from exporter.shipped import resolve_scenario

    backend = SimBackend(resolve_scenario(scenario))
    backend.step_to(at)
    backend.open()
    clock = at
    timer = FakeLibTimer()
    rows = []
    try:
        for _ in range(warmup):
            clock += 1.0
            backend.step_to(clock)
            backend.poll()
        gc.collect()
        timer.install()
        for _ in range(polls):
            clock += 1.0
            backend.step_to(clock)
            backend.sim.advance_to(backend.virtual_time())  # the simulation's own work, untimed
            driver0, cpu0 = timer.seconds, time.process_time()
            backend.inner.poll()
            cpu, driver = time.process_time() - cpu0, timer.seconds - driver0
            rows.append((cpu - driver, driver))
    finally:
        timer.uninstall()
        backend.close()
    reads = sorted(r[0] for r in rows)
    return {"median": statistics.median(reads), "p10": reads[len(reads) // 10],
            "driver": statistics.median(r[1] for r in rows)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0, help="virtual seconds to start at")
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    result = measure(args.scenario, args.at, args.polls, args.warmup)
    print(f"{args.scenario} at {args.at:g} s, {args.polls} polls: exporter reads {result['median'] * 1000:.2f} ms "
          f"median (p10 {result['p10'] * 1000:.2f}), fake driver {result['driver'] * 1000:.2f} ms; "
          f"load average {os.getloadavg()[0]:.2f}; {HERE.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
