"""Foresight on the real pipeline: simulated H100 -> fake libnvidia-ml -> NvmlBackend -> Foresight.

Uses the seed scenarios examples/scenarios/wan22-h100-mps-{together,staggered}.yaml, after
a solo run of the same job (the first process of the together scenario) taught the profile.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.backend.sim import SimBackend
from exporter.foresight import Foresight
from exporter.sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
STEP = 15.0  # virtual seconds between polls: coarser than the default 1 s, the forecast must hold anyway


def play(foresight: Foresight, scenario, until: float):
    """Poll the scenario every STEP virtual seconds; (t, min headroom over devices, OOM kills) per poll."""
    backend = SimBackend(scenario)
    backend.open()
    out = []
    try:
        t = 0.0
        while t <= until:
            backend.step_to(t)
            snapshot = backend.poll()
            foresight.observe(snapshot)  # the simulation's clock, which the fake /proc start times share
            headroom = min(d.forecast.headroom_bytes for d in foresight.result().devices)
            out.append((t, headroom, sum(snapshot.simulation.oom_kills.values())))
            t += STEP
    finally:
        backend.close()
    return out


@pytest.fixture
def learned(tmp_path) -> Foresight:
    """A Foresight (with a state dir) that watched one Wan job run alone to the end."""
    together = load_scenario(SCENARIOS / "wan22-h100-mps-together.yaml")
    solo = dataclasses.replace(together, processes=together.processes[:1])
    foresight = Foresight(state_dir=tmp_path)
    play(foresight, solo, 620.0)
    (profile,) = foresight.profiles.values()
    assert profile.runs == 1
    return foresight


def test_together_is_predicted_minutes_before_the_simulated_oom(learned):
    """The three-job scenario shows negative headroom from its first poll, at least 5 min before the OOM kill."""
    polls = play(learned, load_scenario(SCENARIOS / "wan22-h100-mps-together.yaml"), 720.0)
    first_negative = next(t for t, headroom, _ in polls if headroom < 0)
    oom = next(t for t, _, kills in polls if kills > 0)
    assert oom - first_negative >= 5 * 60


def test_staggered_is_never_predicted_and_never_ooms(learned):
    """Started 60 s apart the same jobs fit: headroom stays positive at every poll."""
    polls = play(learned, load_scenario(SCENARIOS / "wan22-h100-mps-staggered.yaml"), 840.0)
    assert all(headroom >= 0 for _, headroom, _ in polls)
    assert polls[-1][2] == 0


def test_mixed_node_never_predicts_contention_for_long():
    """The healthy 8-GPU mixed node (every sharing mode, 323 processes) gives no alert-worthy forecast.

    An alert needs headroom below zero for 30 s (two polls at 15 s); the node never runs out
    of memory, so no device may stay negative that long, learning from scratch.
    """
    scenario = load_scenario(SCENARIOS / "h100-mixed-node.yaml")
    backend = SimBackend(scenario)
    backend.open()
    foresight = Foresight()
    negative_since: dict = {}
    try:
        t = 0.0
        while t <= scenario.duration:
            backend.step_to(t)
            snapshot = backend.poll()
            foresight.observe(snapshot)
            for device in foresight.result().devices:
                key = (device.gpu, device.gi)
                if device.forecast.headroom_bytes < 0:
                    assert t - negative_since.setdefault(key, t) < 30, (key, t)
                else:
                    negative_since.pop(key, None)
            t += STEP
    finally:
        backend.close()
    assert sum(snapshot.simulation.oom_kills.values()) == 0
