"""Digest of the DCGM backend's /metrics after each of 12 polls on four nodes, for before/after checks.

    python bench/dcgm_bytes.py > after.txt           # python bench/dcgm_bytes.py 2: two polls each
    python bench/dcgm_bytes.py --nvml > after.txt    # the same nodes through the NVML backend
    PYTHONPATH=<other checkout> python bench/dcgm_bytes.py > before.txt
    diff before.txt after.txt        # no output: the same bytes, poll by poll

Polls as bench/dcgm_bench.py does (its ``setup``: one warm-up poll, then one virtual second
apart), so two checkouts see the same simulated host. Lines that time the exporter itself
(poll and collector durations, the last poll's wall-clock time, process CPU and memory)
differ from run to run and are left out; every other byte of the exposition is digested.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

import dcgm_bench  # noqa: E402

TIMING = re.compile(rb"(gpushare_exporter_\w*(duration|timestamp|cpu|memory|bytes)\w*|process_\w+)[ {]")


def digests(polls: int = 12, kind: str = "dcgm") -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="gpushare-dcgm-bytes-"))
    cases = [("a100-40gb-two-3g", dcgm_bench.SCENARIOS / "a100-40gb-two-3g.yaml", 300.0),
             ("a30-mig-dcgm", dcgm_bench.SCENARIOS / "a30-mig-dcgm.yaml", 240.0),
             ("h100-mixed-node", dcgm_bench.SCENARIOS / "h100-mixed-node.yaml", 600.0),
             ("2xA100 7x1g MIG", dcgm_bench.a100_node(tmp, 2), 60.0)]
    out = []
    for label, path, start_at in cases:
        backend, poller, advance = dcgm_bench.setup(path, kind, start_at, warmup=1)
        try:
            for n in range(polls):
                advance()
                poller.poll_once()
                lines = [line for line in poller.exposition.text.split(b"\n") if not TIMING.match(line)]
                digest = hashlib.sha256(b"\n".join(lines)).hexdigest()
                out.append(f"{label} poll {n + 1}: {len(lines)} lines, sha256 {digest}")
        finally:
            backend.close()
    return out


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    args = [a for a in sys.argv[1:] if a != "--nvml"]
    print("\n".join(digests(int(args[0]) if args else 12, "nvml" if "--nvml" in sys.argv[1:] else "dcgm")))
