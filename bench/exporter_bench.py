"""Exporter benchmark (issue 6): scrape latency, poll cost, memory, NVML calls, vs peer exporters.

    python bench/exporter_bench.py            # full run, about 4-5 minutes on 2 cores
    python bench/exporter_bench.py --quick    # the 8-GPU node only, under a minute
    python bench/exporter_bench.py --smoke    # 1 GPU, minimal iterations (the smoke test)

Everything runs on the simulator: the shipped mixed H100 node (examples/scenarios/
h100-mixed-node.yaml looked at 600 s in, when it is in steady state) and scaled variants
generated into a temp directory (bench/perf/scenarios.py). gpushare and each peer run as
separate processes (bench/perf/launch_*.py) so CPU and RSS are per process; each poll is
also taken apart in-process (bench/perf/anatomy.py) to separate the simulated driver's
CPU from the exporter's. Peers that are not installed are skipped with one line.
Definitions of every figure: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from perf import report  # noqa: E402
from perf.anatomy import gpushare_polls  # noqa: E402
from perf.children import REAL_IMPORTS, import_rss_kib, sim_only_rss_kib  # noqa: E402
from perf.minimum import minimum_calls  # noqa: E402
from perf.prototypes import PROTOTYPES  # noqa: E402
from perf.runs import Timing, measure  # noqa: E402
from perf.scenarios import Variant, write  # noqa: E402

MIXED_NODE = HERE.parent / "examples" / "scenarios" / "h100-mixed-node.yaml"
MIXED_AT = 600.0  # virtual seconds: every lane of the mixed node has started by then
PEERS = ("nvitop",)

# mode -> (main scenarios, scaled variants, in-process polls, process-run timing, scaled timing)
MODES = {
    "full": (("mixed", Variant(8, 300)),
             (Variant(1, 10), Variant(1, 100), Variant(8, 10), Variant(8, 1000), Variant(16, 300),
              Variant(16, 1000), Variant(8, 300, all_mig=True)),
             15, Timing(warmup=3, idle=8, load=5), Timing(warmup=2, idle=4, load=4, levels=(10,))),
    "quick": (("mixed",), (Variant(1, 10),), 15, Timing(warmup=1.5, idle=3, load=2),
              Timing(warmup=1, idle=2, load=2, levels=(10,))),
    "smoke": ((Variant(1, 10),), (), 2, Timing(warmup=0.5, idle=1, load=0.5, levels=(1, 10)), None),
}


def scenario_of(item, tmp: Path) -> tuple[str, Path, float, int]:
    """(label, path, virtual start time, GPUs) of a main scenario or variant."""
    if item == "mixed":
        return f"mixed-node@{MIXED_AT:g}s", MIXED_NODE, MIXED_AT, 8
    return item.name, write(item, tmp), 5.0, item.gpus


def anatomy(label: str, path: Path, start_at: float, gpus: int, polls: int) -> dict:
    """In-process figures of gpushare on one scenario."""
    cost, exposition = gpushare_polls(path, start_at, polls)
    snap = exposition.snapshot
    sizes = {f"{'om' if om else 'text'}{'+gzip' if gz else ''}": len(exposition.body(openmetrics_format=om, gzipped=gz))
             for om in (False, True) for gz in (False, True)}
    return dict(label=label, gpus=gpus, cost=cost, minimum=minimum_calls(snap), sizes=sizes,
                processes=sum(1 for g in snap.gpus for p in g.processes if not p.is_mps_server),
                series=sum(1 for line in exposition.text.splitlines() if not line.startswith(b"#")))


def child_anatomy(exporter: str, path: Path, start_at: float, polls: int, prototype: str = "") -> dict:
    """In-process figures taken in a fresh process (nvitop keeps global NVML state; prototypes patch)."""
    out = subprocess.run([sys.executable, str(HERE / "perf" / "anatomy.py"), exporter, str(path), str(start_at),
                          str(polls), prototype], capture_output=True, text=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"skip": f"{exporter} anatomy failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"}
    return json.loads(lines[-1])


def nvitop_anatomy(path: Path, start_at: float, polls: int) -> dict:
    return child_anatomy("nvitop", path, start_at, polls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="exporter_bench", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the 8-GPU node only, short windows (< 1 min)")
    mode.add_argument("--smoke", action="store_true", help="1 GPU, minimal iterations (harness check)")
    parser.add_argument("--peers", default=",".join(PEERS), help="peers to compare with, comma-separated, "
                        "or 'none' (default: %(default)s)")
    parser.add_argument("--prototype", metavar="NAMES", default="",
                        help="also measure gpushare with these proposed fixes patched in, comma-separated "
                        f"(from: {', '.join(PROTOTYPES)}); printed as an extra before/prototype table")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures as JSON")
    args = parser.parse_args(argv)
    name = "smoke" if args.smoke else "quick" if args.quick else "full"
    mains, scaled, polls, timing, scaled_timing = MODES[name]
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"--peers: unknown peer {unknown[0]!r} (known: {', '.join(PEERS)})")
    protos = [p for p in args.prototype.split(",") if p]
    if set(protos) - set(PROTOTYPES):
        parser.error(f"--prototype: unknown {sorted(set(protos) - set(PROTOTYPES))[0]!r} (known: {', '.join(PROTOTYPES)})")
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="gpushare-bench-"))
    results: dict = {"mode": name, "anatomy": [], "nvitop_anatomy": {}, "runs": [], "sim_rss_kib": {}, "rss_growth_kib": {},
                     "prototype_anatomy": {}, "prototype": args.prototype,
                     "python_rss_kib": import_rss_kib(), "floor_real_kib": import_rss_kib(REAL_IMPORTS)}
    try:
        main_items = [scenario_of(item, tmp) for item in mains]
        for label, path, start_at, gpus in main_items + [scenario_of(v, tmp) for v in scaled]:
            print(f"[bench] in-process polls: {label}", file=sys.stderr, flush=True)
            results["anatomy"].append(anatomy(label, path, start_at, gpus, polls))
        for label, path, start_at, _ in main_items:
            results["sim_rss_kib"][label] = sim_only_rss_kib(path, start_at, tmp)
            # State the exporter grows while polling, in a fresh process: added to the import floor
            # it estimates a real host's RSS (the simulation's own ~15 MiB would not be there).
            results["rss_growth_kib"][label] = child_anatomy("gpushare", path, start_at, polls).get("rss_growth_kib")
            for exporter in ["gpushare", *peers]:
                print(f"[bench] process run: {exporter} on {label}", file=sys.stderr, flush=True)
                results["runs"].append(measure(exporter, path, label, start_at, timing, tmp))
            if label == main_items[0][0] and name != "smoke":  # the serving path alone: one poll at start, none during the load
                print(f"[bench] process run: gpushare serving only on {label}", file=sys.stderr, flush=True)
                quiet = measure("gpushare", path, label, start_at, Timing(0.5, 0.2, timing.load, timing.levels[-1:]),
                                tmp, interval=3600.0)
                quiet.exporter = "gpushare-serving-only"
                results["runs"].append(quiet)
            if "nvitop" in peers:
                results["nvitop_anatomy"][label] = nvitop_anatomy(path, start_at, polls)
            if protos:
                print(f"[bench] prototype {args.prototype} on {label}", file=sys.stderr, flush=True)
                results["prototype_anatomy"][label] = child_anatomy("gpushare", path, start_at, polls, args.prototype)
                results["runs"].append(measure("gpushare", path, label, start_at, timing, tmp, prototype=args.prototype))
        for label, path, start_at, _ in [scenario_of(v, tmp) for v in scaled]:
            print(f"[bench] process run: gpushare on {label}", file=sys.stderr, flush=True)
            results["runs"].append(measure("gpushare", path, label, start_at, scaled_timing, tmp))
        results["seconds"] = time.monotonic() - started
        print(report.render(results))
        if args.json:
            Path(args.json).write_text(json.dumps(report.as_json(results), indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
