"""Foresight's per-poll CPU, this checkout against another, fed the same polls in one process.

    python bench/foresight_ab.py --base /tmp/base                  # mixed node, fresh and steady
    python bench/foresight_ab.py --base /tmp/base --scenario k8s-shared-node --at 120

Records the snapshots of ``--polls`` polls of a simulated node (bench/poll_profile.py's
``build``: serve's poller, one virtual second apart), then feeds them, poll by poll, to this
checkout's Foresight and forecast collector and to those of ``--base`` (its exporter package
imported under the same name, after this one's is set aside), alternating which goes first.
Each poll's thread CPU of ``observe()`` + ``collect()`` is timed. Both see the same polls at
the same moment, so a busy machine slows both alike: the ratios hold where separate runs
swing by 1.5x. Two stretches are reported: just after start (windows of a few points, what
poll_profile's 20-45 polls see) and after five minutes (the exhaustion window full, runs
with minutes of samples, a 60-second persist of profiles inside: the steady state of a
1-second poll).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def record(scenario: str, at: float, polls: int) -> list:
    from poll_profile import build

    backend, poller = build(scenario, at)
    snapshots: list = []
    poller._observers = tuple(poller._observers) + (snapshots.append,)
    try:
        for n in range(polls):
            backend.step_to(at + n + 1)
            poller.poll_once()
    finally:
        backend.close()
    return snapshots


def foresight_of(tree: str):
    """A fresh Foresight and forecast collector from the exporter package under ``tree``."""
    for name in [m for m in sys.modules if m == "exporter" or m.startswith("exporter.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    try:
        state = importlib.import_module("exporter.foresight.state")
        forecast = importlib.import_module("exporter.collectors.forecast")
    finally:
        sys.path.remove(tree)
    foresight = state.Foresight()
    return foresight, forecast.ForecastCollector(foresight, "pod")


def compare(snapshots: list, base: str, stretches) -> list[str]:
    pairs = {"base": foresight_of(base), "this": foresight_of(str(HERE.parent))}
    gc.collect()
    gc.freeze()  # as serve settles the collector (exporter.commands.serve.settle_gc)
    gc.set_threshold(20_000)
    times: dict[str, list[float]] = {"base": [], "this": []}
    for i, snapshot in enumerate(snapshots):
        for which in (("base", "this") if i % 2 == 0 else ("this", "base")):
            foresight, collector = pairs[which]
            t0 = time.thread_time_ns()
            foresight.observe(snapshot)
            collector.collect()
            times[which].append((time.thread_time_ns() - t0) / 1e6)
    out = []
    for start, stop in stretches:
        b, t = times["base"][start:stop], times["this"][start:stop]
        if not b:
            continue
        ratios = sorted(y / x for x, y in zip(b, t) if x > 0)
        out.append(f"polls {start + 1}-{start + len(b)}: base median {statistics.median(b):.3f} mean "
                   f"{statistics.mean(b):.3f} max {max(b):.2f} | this median {statistics.median(t):.3f} mean "
                   f"{statistics.mean(t):.3f} max {max(t):.2f} ms/poll | this/base: median of poll ratios "
                   f"{statistics.median(ratios):.3f}, of means {statistics.mean(t) / statistics.mean(b):.3f}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", required=True, help="the other checkout (its exporter/ package is compared)")
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0, help="virtual seconds to start at")
    parser.add_argument("--polls", type=int, default=420, help="polls to record (default 420)")
    args = parser.parse_args(argv)
    if not (Path(args.base) / "exporter" / "foresight" / "state.py").is_file():
        print(f"--base {args.base}: no exporter/foresight/state.py there", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    snapshots = record(args.scenario, args.at, args.polls)
    print(f"{args.scenario} from {args.at:g} s, {len(snapshots)} polls; observe + collect, thread CPU")
    for line in compare(snapshots, args.base, [(5, 45), (300, args.polls)]):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
