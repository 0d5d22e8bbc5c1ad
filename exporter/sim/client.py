"""Run an unmodified NVML client (nvitop, gpustat, a pynvml script) on a simulated host.

    python3 -m exporter.sim.client SCENARIO [--at SECONDS] [--record FILE] -- PROGRAM [ARGS...]

PROGRAM is a console script of an installed package (``nvitop``, ``gpustat``) or a Python
file (``example.py``). Before it starts, the scenario is installed as pynvml's libnvidia-ml
and advanced to ``--at`` virtual seconds, and psutil, where installed, reads the simulation's /proc (its
simulated processes plus, linked to the real /proc, the host-wide files and this process),
so the client sees the simulated GPUs, processes and their owners, command lines and start
times. The simulated clock reads the real time at ``--at``.

``--record FILE`` writes the recorder as JSON when the client ends: ``missing`` (symbols the
client looked up that the simulated driver does not export: it got FunctionNotFound),
``fallback`` (exported symbols answered generically, NotSupported or NoPermission),
``invalid`` (calls whose arguments NVML would refuse: INVALID_ARGUMENT) and ``calls`` (every
C symbol called), each symbol -> count. Exit status: the client's.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from importlib import metadata

from exporter.errors import UserError


def _entry_point(program: str):
    """The callable behind console script ``program``, or None."""
    found = metadata.entry_points(group="console_scripts", name=program)
    return next(iter(found)).load() if found else None


def _exit_code(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run(scenario_path: str, at: float, program: list[str], record: str | None) -> int:
    from exporter.sim import Simulation
    from exporter.shipped import resolve_scenario
    from exporter.sim.scenario import load_scenario

    if not program:
        raise UserError("no client given: put the program after --, e.g. -- nvitop --once")
    target = program[0]
    main = None if target.endswith(".py") else _entry_point(target)
    if main is None and not os.path.isfile(target):
        raise UserError(f"{target}: neither an installed console script nor a Python file")
    sim = Simulation(load_scenario(resolve_scenario(scenario_path, "scenario")), start_at=at)
    sim.install()
    sim.advance_to(at)
    sim.mirror_host()
    try:
        import psutil
    except ImportError:  # not installed: then the client does not use it either (a plain install)
        psutil = None
    if psutil is not None:
        psutil.PROCFS_PATH = sim.procfs_root
    sys.argv = list(program)
    try:
        if main is not None:
            code = _exit_code(main())
        else:
            runpy.run_path(target, run_name="__main__")
            code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    finally:
        if record:
            with open(record, "w", encoding="utf-8") as fh:
                json.dump({"missing": dict(sim.missing_symbols), "fallback": dict(sim.fallback_symbols),
                           "invalid": dict(sim.invalid_calls), "calls": dict(sim.call_counts)},
                          fh, indent=1, sort_keys=True)
        sim.close(keep_library=True)  # clients may call nvmlShutdown from __del__ at exit
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, program = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python3 -m exporter.sim.client", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--at", type=float, default=0.0, help="virtual seconds to show (default 0)")
    parser.add_argument("--record", help="write the recorder (missing/fallback/called symbols) as JSON here")
    args = parser.parse_args(ours)
    try:
        return run(args.scenario, args.at, program, args.record)
    except UserError as exc:
        print(f"exporter.sim.client: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
