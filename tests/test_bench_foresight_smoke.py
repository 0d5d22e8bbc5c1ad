"""Smoke tests of the foresight benches of issue 22's fifth pass (bench/foresight_bytes.py,
bench/foresight_ab.py): they run end to end and report; never an assertion on speed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=400, env=ENV)


def test_foresight_bytes_digests_each_poll_and_shows_the_lines_asked_for():
    """Two polls of each node: one digest line each; with --show, the matching lines come out as
    they are (the processes' expected peaks are there from the first poll) and are left out of
    the digest, which therefore changes."""
    plain = _run("bench/foresight_bytes.py", "2")
    assert plain.returncode == 0, plain.stderr[-2000:]
    rows = [re.fullmatch(r"(\S+) poll (\d): (\d+) lines, sha256 ([0-9a-f]{64})", line)
            for line in plain.stdout.splitlines()]
    assert len(rows) == 4 and all(rows) and {r[1] for r in rows} == {"h100-mixed-node", "k8s-shared-node"}
    shown = _run("bench/foresight_bytes.py", "2", "--show", "expected_peak_bytes")
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()
    apart = [line for line in lines if line.startswith("  ")]
    assert apart and all("gpushare_process_memory_expected_peak_bytes" in line for line in apart)
    digests = [line for line in lines if not line.startswith("  ")]
    assert len(digests) == 4 and digests[0] != plain.stdout.splitlines()[0]


def test_foresight_ab_against_this_checkout_reports_both_stretches():
    out = _run("bench/foresight_ab.py", "--base", str(REPO), "--scenario", "k8s-shared-node", "--at", "120",
               "--polls", "305")
    assert out.returncode == 0, out.stderr[-2000:]
    stretches = re.findall(r"polls (\d+)-(\d+): base median [\d.]+ .* this/base: median of poll ratios ([\d.]+)",
                           out.stdout)
    assert [(a, b) for a, b, _ in stretches] == [("6", "45"), ("301", "305")], out.stdout


def test_foresight_ab_refuses_a_checkout_without_foresight(tmp_path):
    out = _run("bench/foresight_ab.py", "--base", str(tmp_path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and str(tmp_path) in out.stderr
