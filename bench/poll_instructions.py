#!/usr/bin/env python3
"""Instructions per poll of the mixed node, counted by valgrind (callgrind): a figure the machine's speed does not move.

On a shared 2-core VM the CPU time of the same poll moves by 1.5-2x from run to run (docs/performance.md),
so paired timings cannot resolve a change of 5-10 %. Valgrind counts the instructions the process runs,
which for the same code and input is the same on every run (PYTHONHASHSEED is fixed). Each tree is run
twice, with W and W+N polls after the simulation's start-up; the difference over N is the mean count of
one poll at that age, simulator included. The simulator and its fake driver are the same code in both
trees when only exporter/ changed, so the difference between trees is the exporter's. As in exporter_bench and poll_profile, no scraper
is expected (a fresh PrerenderPlan): the polls encode nothing ahead of a scrape. (Before, a new
poller encoded OpenMetrics + gzip every poll until its first 300 s of real time had passed: in
fresh polls, not in steady ones, which under valgrind come later.)

    python bench/poll_instructions.py --tree /tmp/base --tree . --warmup 5 --polls 20       # fresh polls, ~3 min
    python bench/poll_instructions.py --tree /tmp/base --tree . --warmup 240 --polls 60     # steady state, ~20 min
    python bench/poll_instructions.py --tree /tmp/base --tree . --exporter-only             # the exporter's own

``--exporter-only`` counts only the exporter's instructions: collection is switched off (callgrind's
CALLGRIND_TOGGLE_COLLECT, from a two-line C helper built with gcc at the start) while the simulator
works: the fake driver's calls (``_Symbol.__call__``, on the reader thread: callgrind keeps the
switch per thread), the simulation's advance (``Simulation.advance_to``) and the bench's clock step.
What is left is what a real host runs too: the exporter, pynvml and ctypes, the reads of (fake)
/proc files, plus the switch's own ctypes calls: two per fake driver call, the same number in
trees that make the same calls, so a difference between such trees is the exporter's alone.

A GPU's read has no time limit here (serve's is 5 s of wall time): under valgrind on a busy
machine a read can take longer, and a GPU reported down for it would change what is counted.

Needs valgrind (not a project dependency: `apt-get install -y valgrind`). Runs the trees' polls in
parallel, one process per (tree, count).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIO = "examples/scenarios/h100-mixed-node.yaml"
START_AT = 600.0  # virtual seconds, as exporter_bench: every lane of the mixed node has started

# The child: W polls of the tree's exporter as serve runs it (forecasts included), under serve's GC settings.
CHILD = """
import sys
from pathlib import Path
sys.path[:0] = [{tree!r}, {bench!r}]  # the tree's exporter, whatever the working directory holds
from exporter.backend.sim import SimBackend
from exporter.commands.serve import make_poller
from exporter.foresight.state import Foresight
from perf.anatomy import serve_gc
# No wall-clock limit on a GPU's read: under valgrind on a busy machine a read can pass serve's 5 s,
# and a GPU reported down (its read going on in the background) would change what is counted.
backend = SimBackend(Path({scenario!r}), gpu_timeout=1e9)
clock = {start!r}
backend.step_to(clock)
poller = make_poller(backend, 1.0, Foresight())
try:  # no scraper: no encode in the polls, as exporter_bench and poll_profile measure them
    from exporter.prerender import PrerenderPlan
    poller._prerender = PrerenderPlan()
except ImportError:
    pass
toggle = (lambda: None)
{split}
with serve_gc():
    backend.open()
    for _ in range({polls!r}):
        clock += 1.0
        toggle()
        backend.step_to(clock)
        toggle()
        poller.poll_once()
    backend.close()
"""

# --exporter-only: the simulator's parts run with callgrind's collection switched off.
SPLIT = """
import ctypes
import exporter.sim as simulation
from exporter.sim import fakelib
toggle = ctypes.CDLL({helper!r}).gpushare_toggle_collect
def _uncounted(original):
    def call(*args):
        toggle()
        try:
            return original(*args)
        finally:
            toggle()
    return call
fakelib._Symbol.__call__ = _uncounted(fakelib._Symbol.__call__)
simulation.Simulation.advance_to = _uncounted(simulation.Simulation.advance_to)
"""

HELPER_C = """#include <valgrind/callgrind.h>
void gpushare_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def build_helper(directory: Path) -> Path | str:
    """The toggle helper as a shared library in ``directory``; a one-line reason when it cannot be built."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return "--exporter-only needs gcc (or cc) to build its toggle helper"
    source, library = directory / "toggle.c", directory / "toggle.so"
    source.write_text(HELPER_C)
    done = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        return f"--exporter-only: cannot build the toggle helper (valgrind's callgrind.h missing?): {first}"
    return library


def child_code(tree: Path, polls: int, helper: Path | None = None) -> str:
    """The program valgrind runs: ``polls`` polls of ``tree``'s exporter (run it with PYTHONPATH=tree);
    with ``helper`` (build_helper's library) the simulator's parts toggle callgrind's collection off."""
    split = SPLIT.format(helper=str(helper)) if helper is not None else ""
    return CHILD.format(tree=str(tree.resolve()), bench=str(HERE), scenario=str(tree / SCENARIO), start=START_AT,
                        polls=polls, split=split)


def count(tree: Path, polls: int, valgrind: str, helper: Path | None = None) -> int:
    code = child_code(tree, polls, helper)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    # In the tree: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH (before
    # this was so, every tree counted the exporter of the directory the bench was started in).
    done = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code],
                          env=env, cwd=str(tree), capture_output=True, text=True, timeout=7200)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"poll_instructions: {tree} with {polls} polls failed: {tail}")
    return int(found.group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", type=Path, required=True, help="a checkout to count (repeat)")
    parser.add_argument("--warmup", type=int, default=5, help="polls before the counted ones (default 5)")
    parser.add_argument("--polls", type=int, default=20, help="polls counted (default 20)")
    parser.add_argument("--exporter-only", action="store_true",
                        help="count the exporter's instructions only, not the simulator's (needs gcc)")
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.polls < 1:
        print("poll_instructions: --warmup and --polls must be at least 1", file=sys.stderr)
        return 2
    for tree in args.tree:
        if not (tree / SCENARIO).is_file() or not (tree / "exporter").is_dir():
            print(f"poll_instructions: {tree}: not a gpushare-exporter checkout (no {SCENARIO})", file=sys.stderr)
            return 2
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("poll_instructions: valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="poll_instructions") as scratch:
        helper = build_helper(Path(scratch)) if args.exporter_only else None
        if isinstance(helper, str):
            print(f"poll_instructions: {helper}", file=sys.stderr)
            return 2
        jobs = [(tree, n) for tree in args.tree for n in (args.warmup, args.warmup + args.polls)]
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            counts = dict(zip(jobs, pool.map(lambda job: count(job[0], job[1], valgrind, helper), jobs)))
    what = ("the exporter only: fake driver and simulation not counted" if args.exporter_only
            else "simulator and fake driver included")
    print(f"instructions per poll, mixed node from {START_AT:g} s, polls {args.warmup + 1}-{args.warmup + args.polls} "
          f"({what})")
    first = None
    for tree in args.tree:
        per_poll = (counts[(tree, args.warmup + args.polls)] - counts[(tree, args.warmup)]) / args.polls
        first = per_poll if first is None else first
        print(f"  {str(tree):40} {per_poll / 1e6:9.2f} M   {per_poll / first:6.3f}x of the first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
