"""Collect and encode, this tree against another checkout, in one process (issue 22).

    python bench/collect_encode_ab.py --old /tmp/base                # mixed 8-GPU node at 600 s
    python bench/collect_encode_ab.py --old /tmp/base --rounds 100

On a shared machine the CPU a process gets per unit of work moves by half between runs minutes
apart, so separate processes cannot show a 10 % change. Here both versions run in one process on
the same poll, alternating round by round: the other checkout's ``exporter/collectors/`` package
and ``exporter/encode.py`` are loaded beside this tree's (everything else, the backend, snapshot
and foresight included, is this tree's), and each version's collectors are built over the same
poller state as serve builds them (snapshot collectors, forecasts, HTTP self-metrics, exporter).
Each version collects as its render does (``collect_series()`` where the guard has it, else
``collect()``) and encodes what it collected with its own encoder. The bench first checks that
both give the same bytes in both formats (the collector-duration self-metric aside: it is a
timing), then, poll after poll, times each version's collect, then its OpenMetrics encode (what
Prometheus asks for), then its text encode, once each, and prints the medians.
"""

from __future__ import annotations

import argparse
import importlib
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
_SWAPPED = ("exporter.collectors", "exporter.encode")


def _swapped(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in _SWAPPED)


def load_other(root: Path) -> dict:
    """The other checkout's collectors package and encoder, as module objects, without disturbing
    this tree's: this tree's modules are put back in sys.modules afterwards."""
    import exporter

    before = set(sys.modules)
    saved = {name: module for name, module in sys.modules.items() if _swapped(name)}
    attributes = {attr: getattr(exporter, attr) for attr in ("collectors", "encode") if hasattr(exporter, attr)}
    for name in saved:
        del sys.modules[name]
    path = list(exporter.__path__)
    exporter.__path__[:] = [str(root / "exporter")]
    try:
        for name in ("exporter.collectors", "exporter.collectors.forecast", "exporter.collectors.http",
                     "exporter.encode"):
            importlib.import_module(name)
        loaded = {name: module for name, module in sys.modules.items() if _swapped(name) or name not in before}
    finally:
        for name in [n for n in sys.modules if _swapped(n) or n not in before]:
            del sys.modules[name]
        sys.modules.update(saved)
        exporter.__path__[:] = path
        for attr, module in attributes.items():
            setattr(exporter, attr, module)
    return loaded


def guard_like(modules: dict, poller):
    """A guard over ``modules``' collectors, fed from ``poller`` as its own registry is."""
    new_guard = poller._registry
    extras = {type(c).__name__: c for c in new_guard._collectors}
    forecast, http = extras["ForecastCollector"], extras["HttpCollector"]
    pkg = modules["exporter.collectors"]
    collectors = pkg.default_collectors(lambda: poller._snapshot, lambda: poller._stats, forecast.mode)
    collectors[-1:-1] = [modules["exporter.collectors.forecast"].ForecastCollector(forecast.foresight, forecast.mode),
                         modules["exporter.collectors.http"].HttpCollector(http.stats)]
    return pkg.GuardedCollectors(collectors)


def collect_of(guard):
    """What render() of that version collects."""
    return getattr(guard, "collect_series", None) or guard.collect


def _cpu_ms(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return (time.process_time() - start) * 1000, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", required=True, help="the other checkout (its exporter/collectors and encode.py)")
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0)
    parser.add_argument("--rounds", type=int, default=40, help="polls; each version collects and encodes each once")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    from exporter import encode
    from poll_profile import build

    backend, poller = build(args.scenario, args.at)
    try:
        other = load_other(Path(args.old))
        versions = {"old": (guard_like(other, poller), other["exporter.encode"]), "new": (poller._registry, encode)}
        for t in range(5):
            backend.step_to(args.at + 1 + t)
            poller.poll_once()
            collect_of(versions["old"][0])()  # the pod accounting: both versions see every poll
        pages = {}
        for label, (guard, enc) in versions.items():
            families = list(collect_of(guard)())
            pages[label] = [_DURATIONS.sub(b"", enc.text(families)), _DURATIONS.sub(b"", enc.openmetrics(families))]
        same = pages["old"] == pages["new"]
        series = pages["new"][0].count(b"\n") - 2 * pages["new"][0].count(b"\n# TYPE ")
        print(f"{args.scenario} at {args.at:g} s, {series} series, {len(pages['new'][0])} bytes of text; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"same bytes, text and OpenMetrics: {same}")
        rows = {key: {"old": [], "new": []} for key in ("collect", "encode openmetrics", "encode text",
                                                         "collect + encode openmetrics")}
        order = list(versions)
        for round_ in range(args.rounds):
            # A new poll each round, as in serve: new values, so what an encoder remembers from
            # the previous poll (exporter.encode's label prefixes and value texts) is as stale as
            # it would be; the first version in a round alternates.
            backend.step_to(args.at + 10 + round_)
            poller.poll_once()
            # The poll collected this tree's collectors once (its render); the other version's
            # collect once too, so that both timed collects below are a second collect of the
            # same snapshot (the pod accounting integrates a snapshot at its first collect).
            collect_of(versions["old"][0])()
            page = {}
            for label in order if round_ % 2 else order[::-1]:
                guard, enc = versions[label]
                collect_ms, families = _cpu_ms(lambda: list(collect_of(guard)()))
                openmetrics_ms, page[label] = _cpu_ms(lambda: enc.openmetrics(families))
                text_ms, _ = _cpu_ms(lambda: enc.text(families))
                for key, ms in (("collect", collect_ms), ("encode openmetrics", openmetrics_ms),
                                ("encode text", text_ms), ("collect + encode openmetrics", collect_ms + openmetrics_ms)):
                    rows[key][label].append(ms)
            same = same and _DURATIONS.sub(b"", page["old"]) == _DURATIONS.sub(b"", page["new"])
        print(f"same bytes in every poll (OpenMetrics): {same}")
        print(f"  {'CPU ms per poll, median':30} {'old':>7} {'new':>7} {'new/old':>8}")
        for key, times in rows.items():
            a, b = statistics.median(times["old"]), statistics.median(times["new"])
            print(f"  {key:30} {a:7.2f} {b:7.2f} {b / a:8.2f}")
        return 0 if same else 1
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
