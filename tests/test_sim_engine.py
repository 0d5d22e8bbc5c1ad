"""Tests for the simulation engine: OOM kills, MPS, MIG reconfigures, energy, fake /proc."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from exporter.catalog import MIB, MODELS
from exporter.errors import UserError
from exporter.sim import Simulation
from exporter.sim.engine import Engine
from exporter.sim.mig_layout import gi_id_for
from exporter.sim.model import EventSpec, GpuSpec, MigSpec, ProcessSpec, Scenario
from exporter.sim.setup import MPS_SERVER_PID_BASE

GIB = 2**30
H100 = MODELS["H100-80GB"]
H100_CAPACITY = (H100.memory_total_mib - H100.memory_reserved_mib) * MIB


def gpu(index=0, model="H100-80GB", mig=None, mps=False, **kw) -> GpuSpec:
    return GpuSpec(index=index, model=model, uuid=f"GPU-{index:08x}-1111-2222-3333-444455556666",
                   pci_bus_id=f"00000000:{0x1B + index:02X}:00.0", mig=mig, mps=mps, **kw)


def proc(pid, start, memory, gpu=0, mig=None, end=None, sm=None, env=None, mps_client=None,
         name="python3") -> ProcessSpec:
    memory = ((start, float(memory)),) if isinstance(memory, (int, float)) else memory
    activity = {} if sm is None else {"sm_active": sm if isinstance(sm, tuple) else ((start, sm),)}
    return ProcessSpec(pid=pid, name=name, cmdline=f"{name} job{pid}.py --epochs 3", gpu=gpu,
                       mig=mig, start=start, end=end, memory=memory, activity=activity,
                       env=env or {}, mps_client=mps_client)


def scenario(gpus, procs, events=()) -> Scenario:
    return Scenario(name="t", source="test.yaml", duration=None, gpus=tuple(gpus),
                    processes=tuple(procs), events=tuple(events))


def wan_job(pid, t0):
    """Wan-style video job: 22 GiB resident, a VAE-decode spike to 33 GiB at t0+40."""
    return proc(pid, t0, ((t0, 22 * GIB), (t0 + 20, 22 * GIB), (t0 + 40, 33 * GIB), (t0 + 50, 22 * GIB)),
                sm=0.6)


def kills(events):
    return [(e.pid, e.reason, e.gpu, e.gi) for e in events]


# --- OOM -------------------------------------------------------------------------------------

def test_wan_jobs_started_together_lose_exactly_one_at_the_crossing():
    """Three 22->33 GiB spikes in step overflow the H100 once, when their sum reaches capacity."""
    sim = Engine(scenario([gpu()], [wan_job(1001, 0), wan_job(1002, 0), wan_job(1003, 0)]))
    sim.advance_to(300)
    # Between 20 s and 40 s the sum grows from 66 GiB at 3 x 11 GiB per 20 s.
    crossing = 20 + 20 * (H100_CAPACITY - 66 * GIB) / (33 * GIB)
    assert kills(sim.oom_events) == [(1003, "oom", 0, None)]  # equal slopes, same start: highest pid
    assert sim.oom_events[0].time == pytest.approx(crossing, abs=1e-9)
    assert sim.oom_events[0].capacity_bytes == H100_CAPACITY
    assert dict(sim.oom_kills) == {(0, ""): 1}


def test_wan_jobs_staggered_by_60s_never_overflow():
    """Staggered spikes peak at 33 + 22 + 22 = 77 GiB, below the H100's ~79.2 GiB."""
    sim = Engine(scenario([gpu()], [wan_job(1001, 0), wan_job(1002, 60), wan_job(1003, 120)]))
    sim.advance_to(600)
    assert sim.oom_events == [] and not sim.oom_kills


def test_a_process_starting_into_a_full_gpu_is_the_one_killed():
    """The newcomer, not the large resident with a positive slope, fails its allocation."""
    resident = proc(10, 0, ((0, 70 * GIB), (1000, 75 * GIB)))
    newcomer = proc(5, 30, 20 * GIB)
    sim = Engine(scenario([gpu()], [resident, newcomer]))
    sim.advance_to(100)
    assert kills(sim.oom_events) == [(5, "oom", 0, None)]
    assert sim.oom_events[0].time == 30


def test_the_fastest_grower_is_killed():
    """Of two growing processes the one with the larger slope is the one that 'just grew'."""
    slow = proc(20, 0, ((0, 30 * GIB), (100, 45 * GIB)))
    fast = proc(10, 0, ((0, 30 * GIB), (100, 60 * GIB)))
    sim = Engine(scenario([gpu()], [slow, fast]))
    sim.advance_to(100)
    assert kills(sim.oom_events) == [(10, "oom", 0, None)]
    # Sum = 60 GiB + 45 GiB * t / 100 s reaches capacity at:
    assert sim.oom_events[0].time == pytest.approx(100 * (H100_CAPACITY - 60 * GIB) / (45 * GIB))


def test_oom_on_a_mig_instance_uses_the_profile_memory():
    """On MIG the capacity is the instance's profile memory and the kill is keyed by GI id."""
    mig = (MigSpec("3g.40gb", 0), MigSpec("3g.40gb", 4))
    profile_bytes = H100.profile("3g.40gb").memory_mib * MIB
    sim = Engine(scenario([gpu(mig=mig)], [proc(1, 0, 30 * GIB, mig=1), proc(2, 10, 30 * GIB, mig=1),
                                           proc(3, 10, 30 * GIB, mig=0)]))
    sim.advance_to(20)
    # 3g at start 4 is GI 1 (slot tree); 3g at 0 (GI 2) has room for its single process.
    assert kills(sim.oom_events) == [(2, "oom", 0, 1)]
    assert sim.oom_events[0].capacity_bytes == profile_bytes
    assert dict(sim.oom_kills) == {(0, "1"): 1}


def _busy_scenario():
    return scenario([gpu(0), gpu(1, mps=True)], [
        proc(1, 0, ((0, 10 * GIB), (50, 40 * GIB)), sm=((0, 0.2), (80, 0.9))),
        proc(2, 5, ((5, 20 * GIB), (45, 50 * GIB)), sm=0.5),
        proc(3, 12.5, ((12.5, 5 * GIB), (20, 5 * GIB), (20, 30 * GIB)), end=200, sm=0.7),
        proc(4, 30, 8 * GIB, end=90),
        proc(7, 0, ((0, 1 * GIB), (90, 12 * GIB)), gpu=1, env={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=6G"}),
        proc(8, 3, ((3, 30 * GIB), (90, 70 * GIB)), gpu=1, sm=0.4),
        proc(9, 50, ((50, 10 * GIB), (150, 60 * GIB)), gpu=1, sm=0.4),
    ])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=0.01, max_value=37.0), min_size=1, max_size=25))
def test_kills_and_energy_do_not_depend_on_stepping(steps):
    """Advancing in arbitrary steps gives the same kills (and energy) as one jump to the end."""
    jumped = Engine(_busy_scenario())
    jumped.advance_to(240)
    stepped = Engine(_busy_scenario())
    t = 0.0
    for step in steps:
        t = min(240.0, t + step)
        stepped.advance_to(t)
    stepped.advance_to(240)
    assert kills(stepped.oom_events) == kills(jumped.oom_events)
    times = [e.time for e in jumped.oom_events]
    assert [e.time for e in stepped.oom_events] == pytest.approx(times, abs=1e-6)
    assert stepped.energy_j == pytest.approx(jumped.energy_j, rel=1e-9)
    assert len(jumped.oom_events) >= 3  # the scenario does exercise OOM and the pinned limit


def test_advancing_backwards_is_refused():
    """Virtual time is monotonic."""
    sim = Engine(scenario([gpu()], []))
    sim.advance_to(10)
    with pytest.raises(ValueError):
        sim.advance_to(9.5)


# --- MPS -------------------------------------------------------------------------------------

def test_mps_pinned_limit_kills_only_that_client():
    """A client ramping 2->8 GiB over 60 s with a 4G limit dies at 20 s; the GPU is far from full."""
    limited = proc(11, 0, ((0, 2 * GIB), (60, 8 * GIB)),
                   env={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G,1=1G"})
    by_uuid = proc(12, 0, ((0, 1 * GIB), (60, 4 * GIB)),
                   env={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{gpu().uuid}=3G"})
    free = proc(13, 0, ((0, 2 * GIB), (60, 8 * GIB)))
    sim = Engine(scenario([gpu(mps=True)], [limited, by_uuid, free]))
    sim.advance_to(100)
    assert [(e.pid, e.reason) for e in sim.oom_events] == [(11, "mps_pinned_limit"), (12, "mps_pinned_limit")]
    assert sim.oom_events[0].time == pytest.approx(20.0)  # 2 + 6 * t / 60 = 4
    assert sim.oom_events[1].time == pytest.approx(40.0)  # 1 + 3 * t / 60 = 3
    assert sim.oom_events[0].capacity_bytes == 4 * GIB
    assert 13 in [p.pid for p in sim.alive()]


def test_mps_server_starts_with_first_client_and_restart_kills_running_clients():
    """The server appears with the first client; a restart renews its pid and kills older clients."""
    sim = Engine(scenario([gpu(mps=True)], [proc(21, 10, 4 * GIB), proc(22, 20, 4 * GIB),
                                            proc(23, 60, 4 * GIB)],
                          [EventSpec(at=50, kind="mps_restart", gpu=0)]))
    servers = lambda: [p for p in sim.alive() if p.mps_server]  # noqa: E731
    assert servers() == []
    sim.advance_to(10)
    (first,) = servers()
    assert first.pid == MPS_SERVER_PID_BASE and first.memory_at(10) == 60 * MIB
    sim.advance_to(70)
    (second,) = servers()
    assert second.pid != first.pid
    assert [(e.pid, e.reason) for e in sim.mps_fault_events] == [(21, "mps_restart"), (22, "mps_restart")]
    assert sim.oom_events == [] and not sim.oom_kills  # a restart is not an OOM
    assert [p.pid for p in sim.alive() if not p.mps_server] == [23]


# --- MIG -------------------------------------------------------------------------------------

def test_gi_ids_follow_the_mig_guide_examples():
    """A100 guide example and H100 1g example (nvml_facts.md 2.4), and the A30 4-slice tree."""
    assert [gi_id_for(8, 4, 0), gi_id_for(8, 4, 4)] == [2, 1]
    assert [gi_id_for(8, 2, 2), gi_id_for(8, 2, 4)] == [4, 5]
    assert [gi_id_for(8, 1, s) for s in (0, 1, 2, 3, 6)] == [7, 8, 9, 10, 13]
    assert gi_id_for(8, 8, 0) == 0
    assert [gi_id_for(4, 4, 0), gi_id_for(4, 2, 2), gi_id_for(4, 2, 0), gi_id_for(4, 1, 3)] == [0, 1, 2, 6]


def test_reconfigure_drains_processes_and_reuses_freed_indices():
    """Old processes end at the reconfigure; a kept instance keeps its index, new ones fill holes."""
    before = (MigSpec("3g.40gb", 0), MigSpec("3g.40gb", 4))
    after = (MigSpec("3g.40gb", 4), MigSpec("1g.10gb", 0), MigSpec("1g.10gb", 1))
    sim = Engine(scenario([gpu(mig=before)], [proc(1, 0, 5 * GIB, mig=0), proc(2, 0, 5 * GIB, mig=1),
                                              proc(3, 150, 2 * GIB, mig=1)],
                          [EventSpec(at=100, kind="mig_reconfigure", gpu=0, mig=after)]))
    sim.advance_to(99.9)
    assert [p.pid for p in sim.alive()] == [1, 2]
    old_3g_at_4 = sim.epoch(0).instances[1]
    sim.advance_to(100)
    assert sim.alive() == []
    layout = sim.epoch(0).instances
    assert [(i.profile.name, i.start, i.gi, i.mig_index) for i in layout] == [
        ("3g.40gb", 4, 1, 1), ("1g.10gb", 0, 7, 0), ("1g.10gb", 1, 8, 2)]
    assert layout[0].uuid == old_3g_at_4.uuid
    sim.advance_to(150)
    assert [(p.pid, p.gi) for p in sim.alive()] == [(3, 7)]  # mig=1 indexes the new list
    assert sim.oom_events == []


def test_bad_mig_index_is_a_one_line_user_error():
    """A process pointing past its GPU's MIG list fails to load with the place named."""
    with pytest.raises(UserError) as err:
        Engine(scenario([gpu(mig=(MigSpec("7g.80gb", 0),))], [proc(1, 0, GIB, mig=3)]))
    assert "test.yaml" in str(err.value) and "pid=1" in str(err.value) and "\n" not in str(err.value)


# --- telemetry and energy ----------------------------------------------------------------------

def test_energy_is_monotonic_and_equals_the_integral_of_power():
    """Cumulative energy never decreases and matches a numerical integral of reported power."""
    sim = Engine(_busy_scenario())
    readings = []
    for t in range(0, 241, 7):
        sim.advance_to(t)
        readings.append(sim.energy_j[0])
    assert readings == sorted(readings) and readings[-1] > readings[0]
    points = sorted({t for t in sim._breaks if 0 < t < 238} | {e.time for e in sim.oom_events})
    integral, _ = quad(lambda t: sim.telemetry.power_w(0, t), 0, 238, points=points, limit=500)
    assert sim.energy_j[0] == pytest.approx(integral, rel=1e-6)


def test_power_utilization_and_clock_reasons_follow_load():
    """Idle GPU: idle power and GpuIdle; saturated GPU: limit power, SwPowerCap, utilization 1."""
    sim = Engine(scenario([gpu(0), gpu(1)], [proc(1, 10, GIB, gpu=1, sm=0.7), proc(2, 10, GIB, gpu=1, sm=0.6),
                                             proc(3, 10, GIB, gpu=0, sm=0.4)]))
    sim.advance_to(20)
    t = sim.telemetry
    assert t.power_w(1, 20) == H100.power_limit_watts  # sm_active sum 1.3 clips at 1
    assert t.clock_reasons(1, 20) == {"SwPowerCap"}
    assert t.utilization(0, 20)[0] == pytest.approx(0.4 * 1.15)
    assert t.power_w(0, 5) == H100.idle_power_watts and "GpuIdle" in t.clock_reasons(0, 5)


def test_gpu_activity_under_mig_is_sm_weighted():
    """One busy 3g instance (60 SMs) of a 132-SM H100 makes the GPU 60/132 SM-active."""
    mig = (MigSpec("3g.40gb", 0), MigSpec("3g.40gb", 4))
    sim = Engine(scenario([gpu(mig=mig)], [proc(1, 0, GIB, mig=0, sm=1.0)]))
    assert sim.telemetry.gpu_activity(0, 0)["sm_active"] == pytest.approx(60 / 132)


# --- fake /proc --------------------------------------------------------------------------------

def test_procfs_entries_appear_and_vanish_with_processes(tmp_path):
    """/proc/<pid> exists exactly while the process lives, including an OOM kill."""
    procs = [proc(10, 5, GIB, end=20, env={"CUDA_VISIBLE_DEVICES": "0"}),
             proc(11, 0, ((0, 70 * GIB), (30, 70 * GIB), (50, 90 * GIB)))]
    with Simulation(scenario([gpu()], procs), procfs_dir=str(tmp_path)) as sim:
        assert sorted(os.listdir(tmp_path)) == ["11", "stat"]  # stat holds btime
        sim.advance_to(5)
        entry = tmp_path / "10"
        argv = [b"python3", b"job10.py", b"--epochs", b"3"]
        assert (entry / "cmdline").read_bytes() == b"".join(a + b"\x00" for a in argv)
        assert (entry / "environ").read_bytes() == b"CUDA_VISIBLE_DEVICES=0\x00"
        assert (entry / "comm").read_text() == "python3\n"
        assert "Name:\tpython3" in (entry / "status").read_text()
        assert "Pid:\t10" in (entry / "status").read_text()
        sim.advance_to(20)
        assert sorted(os.listdir(tmp_path)) == ["11", "stat"]  # stat holds btime
        sim.advance_to(60)  # 11 grows past capacity and is killed
        assert [e.pid for e in sim.oom_events] == [11]
        assert os.listdir(tmp_path) == ["stat"]
    assert os.listdir(tmp_path) == []  # closing removes everything the simulation wrote
