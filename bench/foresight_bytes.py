"""Digest of /metrics after every poll of a long run, for before/after checks of foresight work.

    python bench/foresight_bytes.py > after.txt       # python bench/foresight_bytes.py 40: 40 polls each
    PYTHONPATH=<other checkout> python bench/foresight_bytes.py > before.txt
    diff before.txt after.txt        # no output: the same bytes, poll by poll
    python bench/foresight_bytes.py --show exhaustion_eta   # those lines printed, the rest digested
    python bench/foresight_bytes.py --every-poll     # a forecast every poll (Foresight(forecast_seconds=0))

The exporter is built as ``exporter serve`` builds it (bench/poll_profile.py's ``build``:
SimBackend, serve's poller with foresight, ``--process-series pod``, pods where the scenario
has them) and polled one virtual second apart. The default 330 polls fill foresight's
300-second exhaustion window, cross several 60-second persists (profiles learned from running
runs) and see runs end, so every per-poll path of foresight is in the digests. Lines that time
the exporter itself are left out (bench/dcgm_bytes.py's TIMING); every other byte is digested.

At this 1-second poll the foresight reuses a domain's forecast for up to 5 s while nothing it rests
on changes (exporter/foresight/cadence.py), so a change to that cadence changes the digests by
design; ``--every-poll`` turns the cadence off (a tree whose Foresight has none ignores it) to
check that a speed-up of the forecast itself changes no byte.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

from dcgm_bytes import TIMING  # noqa: E402
from poll_profile import build  # noqa: E402

CASES = (("h100-mixed-node", 600.0), ("k8s-shared-node", 120.0))


def digests(polls: int = 330, show: str | None = None, every_poll: bool = False) -> list[str]:
    """One line per poll: the digest of its /metrics (less TIMING lines and the lines that
    contain ``show``), then the lines that contain ``show``, as they are."""
    shown = show.encode() if show else None
    out = []
    for scenario, at in CASES:
        backend, poller = build(scenario, at)
        if every_poll:
            for observer in poller._observers:
                owner = getattr(observer, "__self__", None)
                if type(owner).__name__ == "Foresight":
                    owner.forecast_seconds = 0.0
        try:
            for n in range(polls):
                backend.step_to(at + n + 1)
                poller.poll_once()
                lines = [line for line in poller.exposition.text.split(b"\n") if not TIMING.match(line)]
                apart = [line for line in lines if shown and shown in line]
                rest = [line for line in lines if not (shown and shown in line)]
                digest = hashlib.sha256(b"\n".join(rest)).hexdigest()
                out.append(f"{scenario} poll {n + 1}: {len(lines)} lines, sha256 {digest}")
                out.extend(f"  {line.decode()}" for line in apart)
        finally:
            backend.close()
    return out


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("polls", nargs="?", type=int, default=330)
    parser.add_argument("--show", help="print the lines that contain this text instead of digesting them")
    parser.add_argument("--every-poll", action="store_true", help="forecast every poll (no cadence)")
    args = parser.parse_args()
    print("\n".join(digests(args.polls, args.show, args.every_poll)))
