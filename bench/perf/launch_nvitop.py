"""Bench launcher: nvitop-exporter (PyPI ``nvitop-exporter``) on the same simulated host.

    python bench/perf/launch_nvitop.py SCENARIO --port N [--interval 1] [--start-at 600]

Installs the simulation as pynvml's C library *before* nvitop is imported, so nvitop's
``import pynvml`` talks to it, then runs nvitop-exporter's own entry point
(``nvitop_exporter.cli.main``) on 127.0.0.1. The virtual clock starts at ``--start-at`` and
advances with real time: the simulation is moved to it at the start of each of nvitop's
update rounds (one advance per poll, as gpushare's SimBackend does). A counter
``bench_polls_total`` is added to nvitop's registry so the bench can count its polls.

Exit status 3 with one line when nvitop-exporter is not installed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

NOT_INSTALLED = 3


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="launch_nvitop")
    parser.add_argument("scenario")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--start-at", type=float, default=0.0)
    args = parser.parse_args(argv)
    from exporter.sim import Simulation
    from exporter.sim.scenario import load_scenario

    sim = Simulation(load_scenario(args.scenario))
    sim.install()  # before nvitop imports pynvml's functions
    sim.advance_to(args.start_at)
    launched = time.monotonic()
    try:
        from nvitop_exporter import cli
        from nvitop_exporter.exporter import PrometheusExporter
    except ImportError as exc:
        sim.close()
        print(f"nvitop-exporter is not installed ({exc}; pip install nvitop-exporter)", file=sys.stderr)
        return NOT_INSTALLED
    from prometheus_client import Counter

    polls = Counter("bench_polls", "nvitop-exporter update rounds (added by the bench launcher)")
    update_host = PrometheusExporter.update_host

    def advance_then_update_host(self):
        # update_host starts each of nvitop's rounds (collect(): host, then every device)
        sim.advance_to(max(sim.time, args.start_at + time.monotonic() - launched))
        polls.inc()
        return update_host(self)

    PrometheusExporter.update_host = advance_then_update_host
    signal.signal(signal.SIGTERM, _interrupt)  # nvitop stops cleanly on KeyboardInterrupt
    sys.argv = ["nvitop-exporter", "--bind-address", "127.0.0.1", "--port", str(args.port),
                "--interval", str(args.interval), "--hostname", "bench"]
    try:
        return cli.main()
    finally:
        sim.close()


if __name__ == "__main__":
    raise SystemExit(main())
