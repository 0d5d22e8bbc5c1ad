"""Digest of serve's /metrics (text and OpenMetrics) after each of 12 polls, for before/after checks.

    python bench/poll_bytes.py > after.txt            # python bench/poll_bytes.py 20: twenty polls each
    (cd OTHER && PYTHONPATH=$PWD python bench/poll_bytes.py) > before.txt
    diff before.txt after.txt        # no output: the same bytes, poll by poll

The poller is serve's (bench/poll_profile.py's ``build``: SimBackend through NVML, forecasts,
transitions, HTTP self-metrics, ``--process-series pod``, pods and pod accounting where the
scenario has them) on the mixed 8-GPU node at 600 s and the Kubernetes node at 120 s, polled one
virtual second apart. Lines that time the exporter itself (poll and collector durations, the last
poll's wall-clock time) differ from run to run and are left out; every other byte of both formats
is digested. ``--dump DIR`` also writes each poll's text there, to diff a difference.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from poll_profile import build  # noqa: E402

TIMING = re.compile(rb"(gpushare_exporter_\w*(duration|timestamp|cpu|memory)\w*|process_\w+)[ {]")
CASES = (("h100-mixed-node", 600.0), ("k8s-shared-node", 120.0))


def digests(polls: int = 12, dump: Path | None = None) -> list[str]:
    out = []
    for scenario, at in CASES:
        backend, poller = build(scenario, at)
        try:
            for n in range(polls):
                backend.step_to(at + 1 + n)
                poller.poll_once()
                exposition = poller.exposition
                for fmt, body in (("text", exposition.text), ("openmetrics", exposition.variant((True, False)))):
                    lines = [line for line in body.split(b"\n") if not TIMING.match(line)]
                    kept = b"\n".join(lines)
                    if dump is not None:
                        (dump / f"{scenario}-{n + 1:02d}.{fmt}").write_bytes(kept)
                    out.append(f"{scenario} poll {n + 1} {fmt}: {len(lines)} lines, "
                               f"sha256 {hashlib.sha256(kept).hexdigest()}")
        finally:
            backend.close()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("polls", nargs="?", type=int, default=12)
    parser.add_argument("--dump", type=Path, help="write each poll's kept lines here as well")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    print("\n".join(digests(args.polls, args.dump)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
