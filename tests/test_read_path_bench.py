"""Smoke test of bench/read_path_bench.py: it reads a simulated node and reports the read path's CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_read_path_bench_reports_the_reads_without_the_fake_driver():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "read_path_bench.py"), "--scenario", "k8s-shared-node",
                          "--at", "120", "--polls", "3", "--warmup", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.search(r"exporter reads ([\d.]+) ms median \(p10 ([\d.]+)\), fake driver ([\d.]+) ms", out.stdout)
    assert found, out.stdout
    reads, p10, driver = map(float, found.groups())
    assert 0 < p10 <= reads and driver > 0
