"""exporter snapshot: poll the GPUs once and print the Snapshot as JSON.

The output is one JSON document on one line (JSON Lines), so that appending snapshots to a file
(``while sleep 15; do exporter snapshot >> node.jsonl; done``) makes a file `exporter recommend
--snapshot` reads; ``--pretty`` indents it for people. ``--from URL`` prints the latest poll of a
running exporter instead (its /api/v1/snapshot, the same document): no driver is opened, so the
loop costs a fetch, not a poll, next to an exporter that polls anyway.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time

from exporter import commands
from exporter.errors import NoGpuError, UserError
from exporter.client_flags import add_client_flags, client_options  # not http_client: no ssl until a fetch

HELP = "poll the GPUs once and print what was read, as JSON"
DCGM_WARMUP_SECONDS = 1.0  # the update period snapshot's DCGM watches use (--interval's default)
SETTINGS = ("backend", "simulate", "speed", "log_level", "log_format", "procfs", "gpu_timeout", "dcgm_address",
            "dcgm_bindings")
SNAPSHOT_PATH = "/api/v1/snapshot"


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
    parser.add_argument(
        "--from", dest="from_url", metavar="URL",
        help="print the latest poll of a running exporter (URL/api/v1/snapshot, e.g. http://localhost:18474) "
             "instead of reading the GPUs",
    )
    add_client_flags(parser, "from", "--from")


def _fetched(args: argparse.Namespace) -> object:
    """The snapshot document a running exporter serves (parsed, to check it is one)."""
    import json

    from exporter.http_client import fetch

    for key in ("simulate", "at", "backend", "procfs", "dcgm_address", "dcgm_bindings"):
        if getattr(args, key, None) is not None:
            flag = commands.flag_name(key) if key != "at" else "--at"
            raise UserError(f"{flag}: not meaningful together with --from URL (the exporter there reads the GPUs)")
    url = args.from_url.rstrip("/")
    if not url.endswith(SNAPSHOT_PATH):
        url += SNAPSHOT_PATH
    body = fetch(url, client_options(args, "from"), accept="application/json")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, a number of thousands of digits, nested too deeply
        document = None
    if not isinstance(document, dict) or "gpus" not in document:
        raise UserError(f"--from {args.from_url}: {url} did not answer a snapshot (JSON object with gpus)")
    return document


def run(args: argparse.Namespace) -> int:
    if args.from_url is not None:
        import json

        document = _fetched(args)
        # json.loads then json.dumps gives back the bytes snapshot_json.dumps wrote (one line, same order)
        sys.stdout.write(json.dumps(document, indent=2 if args.pretty else None) + "\n")
        return 0
    # One poll allocates a bounded amount (a scenario's nodes and processes, one Snapshot), and
    # the process ends after it: the cyclic collector's passes over it (a tenth of a simulated snapshot's
    # CPU) would free nothing that matters. Turned back on for callers that go on (tests call main()).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _poll_once(args)
    finally:
        if collecting:
            gc.enable()


def _poll_once(args: argparse.Namespace) -> int:
    from exporter import snapshot_json
    from exporter.logging_setup import configure_logging

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
