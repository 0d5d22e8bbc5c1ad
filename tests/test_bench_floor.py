"""bench/perf/floor.py: the floor makes every minimum call with arguments that reach the driver.

An earlier floor passed a handle alone to nvmlDeviceGetFieldValues, nvmlGpmSampleGet,
nvmlGpmMetricsGet and nvmlEventSetWait_v2: they failed in pynvml or at the argument check and
were timed as cheap errors, leaving out most of a real H100's poll. Here each shipped node's
floor must form every call, and each call must reach the (fake) driver.
"""

from __future__ import annotations

import pynvml
import pytest

from exporter.backend.nvml import NvmlBackend
from exporter.shipped import resolve_scenario
from exporter.sim import Simulation
from exporter.sim.scenario import load_scenario
from tests.conftest import bench_module

floor_module = bench_module("perf.floor")
minimum = bench_module("perf.minimum")


@pytest.mark.parametrize("scenario", ["h100-mixed-node", "a100-40gb-two-3g", "a30-mig-dcgm", "k8s-shared-node"])
def test_every_minimum_call_is_formed_and_reaches_the_driver(scenario, install_simulation):
    sim = install_simulation(Simulation(load_scenario(resolve_scenario(scenario)), start_at=300))
    backend = NvmlBackend(pynvml, procfs_root=sim.procfs_root)
    backend.open()
    try:
        backend.poll()
        snapshot = backend.poll()
        floor = floor_module.floor_plan(pynvml, snapshot)
        try:
            need = minimum.minimum_calls(snapshot)
            assert floor.unformed == [] and len(floor.calls) == sum(need.values())
            before = sim.call_counts.copy()
            floor.run(pynvml)
            made = sim.call_counts.copy()
            made.subtract(before)
            for name in ("nvmlDeviceGetFieldValues", "nvmlGpmMetricsGet", "nvmlEventSetWait_v2"):
                if need[name]:
                    assert made[name] == need[name], name
        finally:
            floor.close()
    finally:
        backend.close()
