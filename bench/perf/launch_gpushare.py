"""Bench launcher: gpushare-exporter on a simulated host, as ``exporter serve --simulate`` runs it
(the same poller with forecasts, learning in memory, and the same GIL switch interval).

    python bench/perf/launch_gpushare.py SCENARIO --port N [--interval 1] [--start-at 600]
    python bench/perf/launch_gpushare.py SCENARIO --sim-only
    python bench/perf/launch_gpushare.py SCENARIO --port N --prototype inline-reads

The only difference from ``serve``: the virtual clock starts at ``--start-at`` seconds (so a
scenario can be looked at in its steady state) and then advances with real time. Listens
on 127.0.0.1 only; stops on SIGTERM/SIGINT. ``--sim-only`` loads and installs the
simulation and idles: the RSS of the simulation, for comparison. ``--prototype`` patches
in proposed fixes (bench/perf/prototypes.py) to measure what they would gain.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))



def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="launch_gpushare")
    parser.add_argument("scenario")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--start-at", type=float, default=0.0, help="virtual seconds at launch")
    parser.add_argument("--sim-only", action="store_true", help="install the simulation and idle")
    parser.add_argument("--prototype", default="", help="proposed fixes to patch in (bench/perf/prototypes.py)")
    return parser.parse_args(argv)


def idle_until_signal() -> None:
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    print("ready", flush=True)
    while not stop:
        time.sleep(0.2)


async def serve(poller, port: int) -> None:
    from exporter.server import start_server

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await start_server(poller, "127.0.0.1", port)
    print(f"ready {server.url}metrics", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv=None) -> int:
    args = parse(argv)
    if args.sim_only:  # imports nothing of the exporter but the simulator
        from exporter.sim import Simulation
        from exporter.sim.scenario import load_scenario

        sim = Simulation(load_scenario(args.scenario))
        sim.install()
        sim.advance_to(args.start_at)
        idle_until_signal()
        sim.close()
        return 0
    if args.prototype:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from perf.prototypes import apply

        apply(args.prototype.split(","))
    from exporter.backend.sim import SimBackend
    from exporter.commands.serve import GIL_SWITCH_INTERVAL_SECONDS, make_poller
    from exporter.foresight.state import Foresight
    from exporter.logging_setup import configure_logging

    configure_logging("error")
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    launched = time.monotonic()
    backend = SimBackend(args.scenario, clock=lambda: args.start_at + time.monotonic() - launched)
    poller = make_poller(backend, args.interval, Foresight())
    poller.start()
    try:
        asyncio.run(serve(poller, args.port))
    finally:
        poller.stop(timeout=5.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
