"""Golden /metrics for every shipped scenario at fixed virtual times.

Each case plays a scenario through the whole pipeline (fake libnvidia-ml -> real pynvml ->
NvmlBackend -> collectors -> exposition) on a manual virtual clock, polling at t-1 s and t so
GPM has an interval to average over. Measured durations are masked; everything else must
match tests/golden/<scenario>@<t>.prom byte for byte. Regenerate with --update-golden and
review the diff like code.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from exporter.backend.sim import SimBackend
from exporter.poller import Poller
from tests.conftest import GOLDEN, SCENARIOS

# Virtual times chosen to land on the moments each scenario is about.
CASES = {
    # ramp-up, steady 22 GiB each, the spike just before the kill (~542 s), after the kill, all done
    "wan22-h100-mps-together": [30, 300, 541, 560, 600],
    # each job's spike alone: 540-570 s, 600-630 s, 660-690 s
    "wan22-h100-mps-staggered": [300, 560, 620, 680],
    "a100-40gb-two-3g": [60, 300],
    "h200-mig": [90, 300],
    "h100-mixed-node": [600],
    # power brake (1m-2m), after XID 63 (4m10s) with a remap pending, the A100's remap failure (6m+)
    "health-node": [90, 250, 400],
    # power fault on GPU 0 (1m-1m30s), all calls failing (2m30s-2m40s), after XIDs (3m),
    # after the MPS restarts (4m), after the MIG reconfigure (6m), processes vanishing between
    # list and query (6m10s-6m20s), GPU 0 lost (8m)
    "faults-demo": [70, 155, 185, 245, 360, 375, 500],
}

# Durations measured with the real clock, and the time an XID was seen (the simulated host's
# clock starts at the real time of the run), are the only nondeterministic values on the page.
VOLATILE = re.compile(
    r"^(gpushare_exporter_(poll_duration_seconds|collector_duration_seconds)(\{[^}]*\})?) .*$",
    re.MULTILINE,
)
SEEN_AT = re.compile(r"^(gpushare_gpu_last_xid_timestamp_seconds(\{[^}]*\})?) .*$", re.MULTILINE)


def render_at(scenario: str, times: list[int]) -> dict[int, str]:
    """Exposition text of ``scenario`` at each virtual time, durations masked."""
    backend = SimBackend(SCENARIOS / f"{scenario}.yaml")
    wall = iter(range(1_800_000_000, 1_900_000_000, 10))
    poller = Poller(backend, interval=1.0, wall_clock=lambda: float(next(wall)))
    backend.open()
    pages: dict[int, str] = {}
    try:
        for t in times:
            for at in (t - 1, t):
                backend.step_to(at)
                assert poller.poll_once(), poller.stats.last_error
            text = poller.exposition.body(openmetrics_format=False, gzipped=False).decode()
            pages[t] = SEEN_AT.sub(r"\1 <time>", VOLATILE.sub(r"\1 <duration>", text))
    finally:
        backend.close()
    return pages


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_metrics_match_golden(scenario, update_golden, promtool):
    """/metrics at each chosen virtual time equals the reviewed golden file and lints clean."""
    pages = render_at(scenario, CASES[scenario])
    for t, text in pages.items():
        path = GOLDEN / f"{scenario}@{t}s.prom"
        lint = subprocess.run([promtool, "check", "metrics"], input=text.replace("<duration>", "0").replace("<time>", "0"),
                              capture_output=True, text=True)
        assert lint.returncode == 0, f"{path.name}: promtool: {lint.stdout}{lint.stderr}"
        if update_golden:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            continue
        assert path.exists(), f"{path} missing: run pytest {__file__} --update-golden and review it"
        assert text == path.read_text(), f"{path.name} differs from the golden file (rerun with --update-golden and review)"


def test_golden_rendering_is_deterministic():
    """Two independent runs of a scenario with faults render identical pages."""
    first = render_at("faults-demo", [70, 245])
    second = render_at("faults-demo", [70, 245])
    assert first == second
