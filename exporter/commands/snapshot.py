"""exporter snapshot: poll the GPUs once and print the Snapshot as JSON.

The output is one JSON document on one line (JSON Lines), so that appending snapshots to a file
(``while sleep 15; do exporter snapshot >> node.jsonl; done``) makes a file `exporter recommend
--snapshot` reads; ``--pretty`` indents it for people.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from exporter import commands, snapshot_json
from exporter.errors import NoGpuError, UserError
from exporter.logging_setup import configure_logging

HELP = "poll the GPUs once and print what was read, as JSON"
DCGM_WARMUP_SECONDS = 1.0  # the update period snapshot's DCGM watches use (--interval's default)
SETTINGS = ("backend", "simulate", "speed", "log_level", "log_format", "procfs", "gpu_timeout", "dcgm_address",
            "dcgm_bindings")


def _at_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds since the scenario start, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds since the scenario start (>= 0), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands.add_setting_flags(parser, SETTINGS)
    parser.add_argument(
        "--at", type=_at_seconds, metavar="TIME", help="with --simulate: the scenario time to poll at, in seconds"
    )
    parser.add_argument(
        "--pretty", action="store_true",
        help="indent the JSON (the default is one line, so `>> file.jsonl` appends one snapshot a line)",
    )


def run(args: argparse.Namespace) -> int:
    settings = commands.settings_from_args(args)
    configure_logging(settings.log_level, settings.log_format)
    if args.at is not None and settings.simulate is None:
        raise UserError("--at: only meaningful together with --simulate FILE")
    backend = commands.make_backend(settings)
    if args.at is not None:
        # Activity (GPM) is averaged between two samples: take the first one second earlier.
        # Set before open: the simulated host's clock reads the real time at that instant.
        backend.step_to(max(0.0, args.at - 1.0))
    try:
        backend.open()
    except NoGpuError as exc:
        raise UserError(commands.no_gpu_message(exc, "snapshot")) from None
    try:
        if args.at is not None:
            backend.poll()
            backend.step_to(args.at)
        elif backend.name == "dcgm":
            # DCGM's watches are made after the first poll and average over one update period:
            # poll once, wait that period, and print the second poll.
            backend.poll()
            time.sleep(DCGM_WARMUP_SECONDS)
        snapshot = backend.poll()
    finally:
        backend.close()
    sys.stdout.write(snapshot_json.dumps(snapshot, indent=2 if args.pretty else None) + "\n")
    return 0
