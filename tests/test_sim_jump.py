"""The engine's jump to ``--at T`` (issue 22) is exact: the same kills, energy and process states as the
plain computation, float for float.

The engine keeps each instant's alive lists and device loads until a kill, and walks timelines by index.
``PlainEngine`` below asks every question from scratch, as the engine did before (a filter over every
process per call, ``memory_at`` sums, per-process activity); both advance shipped scenarios that have MIG
repartitions, GPU resets, MPS restarts, faults, pods and OOM kills, and must agree to the last bit.
"""

from __future__ import annotations

import pytest

from exporter.shipped import resolve_scenario
from exporter.sim.engine import Engine
from exporter.sim.piecewise import slope_after
from exporter.sim.scenario import load_scenario
from exporter.sim.telemetry import Telemetry, _process_timeline, process_activity


def plain_timeline_value(timeline, t):
    """The zip-of-slices form the engine used before: the same pieces, found the other way."""
    if t <= timeline[0][0]:
        return timeline[0][1]
    for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
        if t < t1:
            if t1 == t0:
                return v1
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return timeline[-1][1]


def plain_slope_after(timeline, t):
    for (t0, v0), (t1, v1) in zip(timeline, timeline[1:]):
        if t0 <= t < t1:
            return (v1 - v0) / (t1 - t0)
    return 0.0


class PlainTelemetry(Telemetry):
    def energy_between(self, gpu, a, b):
        if b <= a:
            return 0.0
        engine = self.engine
        model = engine.models[gpu]
        if engine.gpus[gpu].power_watts is not None:
            return super().energy_between(gpu, a, b)
        from exporter.sim.piecewise import integrate_clipped

        ep = engine.epoch(gpu, a)
        devices = [((gpu, 0), model.sm_count)] if not ep.mig_enabled else [
            ((gpu, inst.serial), inst.profile.sm_count) for inst in ep.instances]
        busy = 0.0
        for key, sms in devices:
            procs = engine.alive(a, device=key)
            level = sum(process_activity(p, "sm_active", a) for p in procs)
            slope = sum(plain_slope_after(_process_timeline(p, "sm_active"), a)
                        for p in procs if _process_timeline(p, "sm_active"))
            busy += integrate_clipped(level, slope, b - a) * sms / model.sm_count
        idle, limit = model.idle_power_watts, model.power_limit_watts
        return idle * (b - a) + (limit - idle) * busy


class PlainEngine(Engine):
    """Every query from scratch: no alive cache, no device loads."""

    def __init__(self, scenario):
        super().__init__(scenario)

    def alive(self, t=None, gpu=None, device=None):
        t = self.now if t is None else t
        pool = self._by_device.get(device, ()) if device is not None else (
            self._by_gpu.get(gpu, ()) if gpu is not None else self._by_pid)
        return [p for p in pool if p.alive(t) and (gpu is None or p.gpu == gpu)]

    def _load(self, now, key):
        procs = self.alive(now, device=key)
        return (procs, sum(plain_timeline_value(p.memory, now) if p.alive(now) else 0.0 for p in procs),
                sum(plain_slope_after(p.memory, now) for p in procs))


def state(engine):
    return (engine.now, dict(engine.energy_j), list(engine.oom_events), list(engine.mps_fault_events),
            dict(engine.oom_kills), [(p.pid, p.start, p.killed_at) for p in engine.procs])


@pytest.mark.parametrize("name, times", [
    ("h100-mixed-node", (599.0, 600.0)),        # 8 GPUs, MIG, MPS, 323 processes, a repartition
    ("faults-demo", (1.0, 299.0, 300.0)),       # faults, XIDs, a GPU reset, MPS restarts
    ("node-faults", (450.0,)),
    ("k8s-shared-node", (120.0,)),              # pods
    ("wan22-h100-mps-together", (250.0,)),      # OOM kills at a crossing
    ("a30-mig-dcgm", (240.0,)),
])
def test_jump_equals_the_plain_computation(name, times):
    scenario = load_scenario(resolve_scenario(name))
    fast, plain = Engine(scenario), PlainEngine(scenario)
    plain.telemetry = PlainTelemetry(plain)
    for t in times:
        fast.advance_to(t)
        plain.advance_to(t)
        assert state(fast) == state(plain)
        for t_query in (t, t - 0.5, 0.0):
            for gpu in fast.gpus:
                assert fast.alive(t_query, gpu=gpu) == plain.alive(t_query, gpu=gpu)
            for key in fast.devices:
                assert fast.alive(t_query, device=key) == plain.alive(t_query, device=key)
                assert fast.alive(t_query, gpu=key[0], device=key) == plain.alive(t_query, gpu=key[0], device=key)
            assert fast.alive(t_query) == plain.alive(t_query)
    assert any(state(fast)[1].values())  # energy was integrated


def test_timeline_walk_matches_the_plain_form():
    """timeline_value, slope_after and value_slope (both in one walk) against the zip-of-slices forms,
    on random timelines with steps (two points at one time) and at every point, between and outside."""
    import random

    from exporter.sim.piecewise import timeline_value, value_slope

    rng = random.Random(22)
    grid = [0.0, 1.0, 2.0, 2.5, 3.0, 5.0, 7.25, 10.0]
    for _ in range(3000):
        times = sorted(rng.choice(grid) for _ in range(rng.randint(1, 6)))
        timeline = tuple((t, rng.choice([0.0, 1.0, 3.5, 7e9 + 0.1, -2.0])) for t in times)
        for t in [-1.0, *grid, 0.5, 2.25, 4.0, 11.0, rng.uniform(-1.0, 11.0)]:
            plain = (plain_timeline_value(timeline, t), plain_slope_after(timeline, t))
            assert (timeline_value(timeline, t), slope_after(timeline, t)) == plain
            assert value_slope(timeline, t) == plain


def test_device_activity_equals_the_per_process_sum():
    """Telemetry.device_activity (inlined for the GPM averages' 32 instants) against the sum of
    process_activity over the device's processes, as it was written before."""
    from exporter.snapshot import ACTIVITY_FIELDS

    engine = Engine(load_scenario(resolve_scenario("h100-mixed-node")))
    engine.advance_to(600.0)
    for t in (600.0, 599.5, 598.0 + 1 / 3, 300.0):
        for key in engine.devices:
            procs = engine.alive(t, device=key)
            plain = {pipe: min(1.0, sum(process_activity(p, pipe, t) for p in procs)) for pipe in ACTIVITY_FIELDS}
            assert engine.telemetry.device_activity(key, t) == plain
    assert any(engine.telemetry.device_activity(key, 600.0)["graphics_active"] > 0 for key in engine.devices)
