"""Where the render phase of a poll goes: each collector's CPU and series, then the calls.

    python bench/collect_profile.py                               # mixed 8-GPU node at 600 s
    python bench/collect_profile.py --scenario k8s-shared-node --at 120

serve's poller (bench/poll_profile.py's ``build``: forecasts, transitions, HTTP self-metrics,
``--process-series pod``, pods and pod accounting where the scenario has them) polls one virtual
second apart. In each poll the render (the guard's collect of every collector, as serve renders)
is timed per collector in thread CPU (the pod collector's time includes the pod accounting's
integration of the new snapshot), then an OpenMetrics encode of the result (what a scrape asks
for; in serve it runs in the polls just before a scrape, see exporter/prerender.py). Then the
same is done under cProfile and the calls are listed by their own time, scaled onto the timed
total, per poll and per series. Run it in each tree (alternating) to compare.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0)
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    from perf.anatomy import serve_gc
    from poll_profile import build

    from exporter import encode
    from exporter import poller as poller_module

    with serve_gc():
        backend, poller = build(args.scenario, args.at)
        try:
            clock = [args.at]

            def poll():
                clock[0] += 1.0
                backend.step_to(clock[0])
                poller.poll_once()

            for _ in range(5):
                poll()
            spent: dict[str, list[float]] = {}
            series: dict[str, int] = {}
            for collector in poller._registry._collectors:
                original = collector.collect_series

                def timed(original=original, name=collector.name):
                    start = time.thread_time()
                    families = original()
                    spent.setdefault(name, []).append(time.thread_time() - start)
                    series[name] = sum(len(f.rows) if hasattr(f, "rows") else len(f.samples) for f in families)
                    return families

                collector.collect_series = timed
            original_render = poller_module.render
            encoded = []

            def render(*args_):
                start = time.thread_time()
                exposition = original_render(*args_)
                spent.setdefault("(render, all collectors and the guard)", []).append(time.thread_time() - start)
                start = time.thread_time()
                encode.openmetrics(exposition._families)
                encoded.append(time.thread_time() - start)
                return exposition

            poller_module.render = render
            try:
                for _ in range(args.polls):
                    poll()
                profile = cProfile.Profile(time.thread_time)
                profiled_render = {}

                def render_profiled(*args_):
                    profile.enable()
                    try:
                        exposition = original_render(*args_)
                        encode.openmetrics(exposition._families)
                    finally:
                        profile.disable()
                    profiled_render["last"] = exposition
                    return exposition

                poller_module.render = render_profiled
                for _ in range(args.polls):
                    poll()
            finally:
                poller_module.render = original_render
        finally:
            backend.close()

    total_series = sum(series.values())
    render_ms = statistics.median(spent.pop("(render, all collectors and the guard)")) * 1e3
    encode_ms = statistics.median(encoded) * 1e3
    print(f"{args.scenario} at {args.at:g} s: {total_series} series; median of {args.polls} polls, thread CPU; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  render (collect) {render_ms:.3f} ms = {render_ms * 1e3 / total_series:.2f} us/series; "
          f"OpenMetrics encode {encode_ms:.3f} ms = {encode_ms * 1e3 / total_series:.2f} us/series")
    print(f"  {'collector':12} {'us/poll':>8} {'series':>7} {'us/series':>10}")
    for name, times in spent.items():
        us = statistics.median(times[: args.polls]) * 1e6
        print(f"  {name:12} {us:8.1f} {series[name]:7d} {us / max(1, series[name]):10.2f}")
    stats = pstats.Stats(profile)
    own = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])
    profiled = sum(v[2] for v in stats.stats.values()) or 1.0
    scale = (render_ms + encode_ms) / 1e3 / (profiled / args.polls)
    print(f"  top calls of render + encode by own time (profile scaled onto the timed {render_ms + encode_ms:.2f} ms):")
    print(f"  {'us/poll':>8} {'ns/series':>10} {'calls/poll':>10}  function")
    root = str(HERE.parent) + os.sep
    for (filename, line, name), (cc, nc, tt, ct, callers) in own[: args.top]:
        where = filename[len(root):] if filename.startswith(root) else os.path.basename(filename)
        us = tt / args.polls * scale * 1e6
        print(f"  {us:8.1f} {us * 1e3 / total_series:10.1f} {nc / args.polls:10.1f}  {where}:{line}({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
