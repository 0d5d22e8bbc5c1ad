"""Collect and encode, this tree against another checkout, in one process (issue 22).

    python bench/collect_encode_ab.py --old ../integration            # mixed 8-GPU node at 600 s
    python bench/collect_encode_ab.py --old ../integration --rounds 10

On a shared machine the CPU a process gets per unit of work moves by half between runs minutes
apart, so separate processes cannot show a 10 % change. Here both versions run in one process on
the same poll's families, alternating round by round: the old checkout's ``exporter/encode.py``
and ``exporter/collectors/base.py`` (its ``Families`` and family construction) are loaded beside
this tree's, everything else is this tree's. It first checks that both give the same bytes
(the collector-duration self-metric aside: it is a timing), then prints the median CPU of each.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import pkgutil
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

_DURATIONS = re.compile(rb"gpushare_exporter_collector_duration_seconds\{[^}]*\} [^\n]*")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _cpu_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", required=True, help="the other checkout (its exporter/ is loaded beside this tree's)")
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30, help="runs per version per round (median)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    import exporter.collectors as collectors_pkg
    from exporter import encode
    from exporter.collectors import base
    from poll_profile import build

    old_root = Path(args.old) / "exporter"
    old_encode = _load(old_root / "encode.py", "old_exporter_encode")
    old_base = _load(old_root / "collectors" / "base.py", "old_exporter_collectors_base")

    modules = [importlib.import_module(f"exporter.collectors.{m.name}") for m in pkgutil.iter_modules(collectors_pkg.__path__)]
    new_family = base.Spec.new_family
    plain_family = getattr(base.Spec, "_build_family", new_family)

    def use(old: bool) -> None:
        families = old_base.Families if old else base.Families
        for module in modules:
            if getattr(module, "Families", None) in (old_base.Families, base.Families):
                module.Families = families
        base.Spec.new_family = plain_family if old else new_family

    backend, poller = build(args.scenario, args.at)
    try:
        for t in range(5):
            backend.step_to(args.at + 1 + t)
            poller.poll_once()
        registry = poller._registry
        families = list(registry.collect())
        same_encode = all(getattr(old_encode, f)(families) == getattr(encode, f)(families) for f in ("text", "openmetrics"))
        use(True)
        before = _DURATIONS.sub(b"", encode.text(list(registry.collect())))
        use(False)
        after = _DURATIONS.sub(b"", encode.text(list(registry.collect())))
        print(f"{args.scenario} at {args.at:g} s, {sum(len(f.samples) for f in families)} samples; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"same bytes: encode {same_encode}, collect {before == after}")
        rows = {key: ([], []) for key in ("encode text", "encode openmetrics", "collect")}
        for _ in range(args.rounds):
            for old in (True, False):
                enc = old_encode if old else encode
                rows["encode text"][not old].append(_cpu_ms(lambda: enc.text(families), args.reps))
                rows["encode openmetrics"][not old].append(_cpu_ms(lambda: enc.openmetrics(families), args.reps))
                use(old)
                rows["collect"][not old].append(_cpu_ms(lambda: list(registry.collect()), args.reps))
            use(False)
        print(f"  {'CPU ms, median of rounds':24} {'old':>7} {'new':>7} {'new/old':>8}")
        for key, (old_ms, new_ms) in rows.items():
            a, b = statistics.median(old_ms), statistics.median(new_ms)
            print(f"  {key:24} {a:7.2f} {b:7.2f} {b / a:8.2f}")
        return 0 if same_encode and before == after else 1
    finally:
        use(False)
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
