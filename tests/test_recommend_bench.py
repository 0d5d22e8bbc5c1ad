"""Smoke tests of recommend's benches: they run end to end and report (never a speed assertion)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_scale_bench_runs_recommend_against_the_synthetic_prometheus():
    """A tiny fleet: the real command answers, reports progress and writes the same bytes twice."""
    text = _run("bench_recommend_scale.py", "--nodes", "4", "--days", "0.1")
    assert "synthetic fleet: 4 nodes x 8 GPUs" in text
    assert "recommend --prometheus --window 7d:" in text and "queries" in text
    assert "progress on stderr:" in text and "[##############################]" in text
    assert "plan: " in text and "of 32 H100s" in text
    assert "second run wrote the same bytes: True" in text


def test_planner_bench_reports_every_model():
    text = _run("bench_recommend.py", "--workloads", "40", "--instances", "200", "--points", "50", "--gpus", "48",
                "--runs", "1")
    for model in ("A100-80GB", "H100-80GB", "H200"):
        assert model in text
    assert "time to plan:" in text and "optimum saves" in text
