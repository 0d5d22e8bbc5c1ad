"""`exporter snapshot --simulate S --at T` of this tree against another checkout, byte for byte (issue 22).

    python bench/sim_at_compare.py --old ../integration
    python bench/sim_at_compare.py --old ../integration --at 0,1,59.5,120,600,1800 --scenarios h100-mixed-node

For every shipped scenario (examples/scenarios/*.yaml), at each --at time, with --backend auto (DCGM
where the scenario has it) and --backend nvml, each tree prints the snapshot in its own process
(PYTHONPATH set to that tree) with the wall clock frozen (the simulated host's clock is set from it),
so the JSON depends on the scenario alone; ``poll_duration_seconds``, a timing, is left out. The
outputs must be the same bytes; a case that failed in the old tree and works in this one is listed
apart (an internal error before, a snapshot or a one-line error about the input now). Exit status 1
when a case differs otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent
SCENARIOS = NEW / "examples" / "scenarios"

# Run inside each tree's process: every case, in-process, the wall clock frozen.
DUMP = """
import contextlib, io, json, logging, sys, time
time.time = lambda: 1_800_000_000.0
from exporter.cli import main
cases, out = json.loads(sys.argv[1]), {}
for key, args in cases:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    text = stdout.getvalue()
    try:
        document = json.loads(text)
        document.pop("poll_duration_seconds", None)
        text = json.dumps(document)
    except ValueError:
        pass
    out[key] = [code, text, stderr.getvalue().strip().splitlines()[-1:]]
    logging.getLogger().handlers.clear()
json.dump(out, open(sys.argv[2], "w"))
"""


def dump(tree: Path, cases: list, cwd: str) -> dict:
    target = os.path.join(cwd, f"{tree.name}-{os.getpid()}.json")
    subprocess.run([sys.executable, "-c", DUMP, json.dumps(cases), target], cwd=cwd, check=True, timeout=3600,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    with open(target) as handle:
        return json.load(handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--at", default="0,1,59.5,120,600,1800", help="comma-separated --at times")
    parser.add_argument("--scenarios", default="", help="comma-separated scenario names (default: all shipped)")
    options = parser.parse_args(argv)
    names = options.scenarios.split(",") if options.scenarios else sorted(p.stem for p in SCENARIOS.glob("*.yaml"))
    cases = [(f"{name} --at {at}{' ' + ' '.join(extra) if extra else ''}",
              ["snapshot", "--simulate", str(SCENARIOS / f"{name}.yaml"), "--at", at, "--log-level", "error", *extra])
             for name in names for at in options.at.split(",") for extra in ([], ["--backend", "nvml"])]
    with tempfile.TemporaryDirectory(prefix="sim-at-compare-") as cwd:
        old, new = dump(options.old.resolve(), cases, cwd), dump(NEW, cases, cwd)
    same = [k for k, _ in cases if old[k] == new[k]]
    # exit 1: an internal error; 0 a snapshot, 2 a one-line error about the input (e.g. a fault of the scenario)
    fixed = [k for k, _ in cases if old[k] != new[k] and old[k][0] not in (0, 2) and new[k][0] in (0, 2)]
    differ = [k for k, _ in cases if old[k] != new[k] and k not in fixed]
    print(f"{len(cases)} cases: {len(same)} the same bytes ({sum(old[k][0] == 0 for k in same)} snapshots, "
          f"{sum(old[k][0] != 0 for k in same)} the same error), {len(fixed)} were internal errors and work now, "
          f"{len(differ)} differ")
    for key in fixed:
        print(f"  fixed: {key}: was {old[key][2]}, now exit {new[key][0]}")
    for key in differ:
        print(f"  DIFFER: {key}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
