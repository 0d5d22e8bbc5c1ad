"""Collect and encode over recorded polls, this tree against another checkout, in one process.

    python bench/collect_loop.py --old /tmp/base                       # mixed 8-GPU node at 600 s
    python bench/collect_loop.py --old /tmp/base --scenario k8s-shared-node --at 120
    python bench/collect_loop.py --old /tmp/base --scenario a30-mig-dcgm --at 240 --backend dcgm

bench/collect_encode_ab.py times one collect per poll, so each figure is a single call of about a
millisecond on a shared machine. Here serve's poller (bench/poll_profile.py's ``build``) first polls
``--polls`` times and keeps each poll's snapshot; then, round after round, each version collects
every recorded snapshot in turn (as its render does) and encodes the result in OpenMetrics (what a
scrape asks for), the versions alternating snapshot by snapshot and which goes first alternating
round by round. A round's figure is the CPU of all its snapshots, so one figure sums
``--polls`` collects, and the ratio is taken round by round (both versions ran within the same
few milliseconds). Snapshots change from one call to the next, as in serve: whatever a version
keeps from poll to poll (plans, label tuples, the encoder's remembered lines) sees a new poll
every call. The other checkout's ``exporter/collectors/`` and ``exporter/encode.py`` are loaded
beside this tree's (bench/collect_encode_ab.py's ``load_other``); both versions must write the
same bytes for every snapshot (the collector-duration self-metric aside), which is checked first.

The pod accounting integrates a snapshot once, at its first collect; replaying snapshots feeds
it old ones, which it ignores for time that has passed, so on a node with pods the pod
counters stop moving during the rounds (the same for both versions).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

_DURATIONS = re.compile(rb"gpushare_exporter_collector_duration_seconds\{[^}]*\} [^\n]*")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", required=True, help="the other checkout (its exporter/collectors and encode.py)")
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0)
    parser.add_argument("--polls", type=int, default=12, help="snapshots recorded (one virtual second apart)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--backend", choices=("nvml", "dcgm"), default="nvml",
                        help="the backend whose snapshots are recorded (dcgm: DCGM's activity series too)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    from collect_encode_ab import guard_like, load_other
    from perf.anatomy import serve_gc
    from poll_profile import build

    from exporter import encode

    with serve_gc():
        backend, poller = build(args.scenario, args.at, args.backend)
        try:
            other = load_other(Path(args.old))
            versions = {"old": (guard_like(other, poller), other["exporter.encode"]), "new": (poller._registry, encode)}
            snapshots = []
            for n in range(args.polls + 3):
                backend.step_to(args.at + 1 + n)
                poller.poll_once()
                versions["old"][0].collect_series()  # the other version's pod accounting sees every poll
                if n >= 3:
                    snapshots.append(poller._snapshot)
            same = True
            for snapshot in snapshots:
                poller._snapshot = snapshot
                pages = [_DURATIONS.sub(b"", enc.openmetrics(guard.collect_series())) for guard, enc in versions.values()]
                same = same and pages[0] == pages[1]
            series = sum(len(f.rows) for f in poller._registry.collect_series() if hasattr(f, "rows"))
            print(f"{args.scenario} at {args.at:g} s ({args.backend}): {len(snapshots)} recorded polls, {series} series; load average "
                  f"{os.getloadavg()[0]:.1f}")
            print(f"same bytes for every recorded poll (OpenMetrics): {same}")
            collect = {"old": [], "new": []}
            render = {"old": [], "new": []}
            for round_ in range(args.rounds):
                spent = {(label, what): 0.0 for label in versions for what in ("collect", "encode")}
                order = ["old", "new"] if round_ % 2 else ["new", "old"]
                for snapshot in snapshots:
                    poller._snapshot = snapshot
                    for label in order:
                        guard, enc = versions[label]
                        t0 = time.thread_time()
                        families = guard.collect_series()
                        t1 = time.thread_time()
                        enc.openmetrics(families)
                        t2 = time.thread_time()
                        spent[(label, "collect")] += t1 - t0
                        spent[(label, "encode")] += t2 - t1
                for label in versions:
                    collect[label].append(spent[(label, "collect")] / len(snapshots))
                    render[label].append((spent[(label, "collect")] + spent[(label, "encode")]) / len(snapshots))
            print(f"  {'CPU ms per poll (median of rounds)':40} {'old':>7} {'new':>7} {'new/old (median of rounds)':>27}")
            for name, table in (("collect", collect), ("collect + encode OpenMetrics", render)):
                old, new = statistics.median(table["old"]) * 1e3, statistics.median(table["new"]) * 1e3
                ratio = statistics.median(n / o for o, n in zip(table["old"], table["new"]))
                print(f"  {name:40} {old:7.3f} {new:7.3f} {ratio:27.3f}")
            return 0 if same else 1
        finally:
            backend.close()


if __name__ == "__main__":
    sys.exit(main())
