"""The simulated host engine's cheap paths answer exactly what the plain paths answer.

The simulated DCGM host engine is Python in the exporter's process, so its cost per poll is
kept low (issue 22, item 3; docs/performance.md, eighth pass): device activity is summed from
rows fixed per process once its timelines are past their last point, a GPU's profiling window
reuses its GPU instances' instants, and numeric field values are written into the caller's
array as the C library writes them. Each is compared here, bit for bit (repr of every float,
int or float type included, or the raw bytes of the array), with the plain computation it
replaces. bench/dcgm_engine.py --digest checks the same on whole scenarios between two trees.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import pytest
from dcgm_helpers import embedded_engine

from exporter.backend import dcgm_bindings
from exporter.sim import fakedcgm
from exporter.sim.engine import Engine
from exporter.sim.fakedcgm import hostwatch, valuewriter
from exporter.sim.scenario import load_scenario
from exporter.sim.telemetry import process_activity
from exporter.snapshot import ACTIVITY_FIELDS

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"
B = dcgm_bindings.load((fakedcgm.BINDINGS_DIR,))


def plain_device(engine: Engine, key, t: float) -> dict:
    """Telemetry.device_activity as it was first written: process_activity summed per pipe."""
    procs = engine.alive(t, device=key)
    return {pipe: min(1.0, sum(process_activity(p, pipe, t) for p in procs)) for pipe in ACTIVITY_FIELDS}


def plain_mean(engine: Engine, key, gpu: int, t1: float, t2: float) -> dict:
    """Telemetry.mean_activity without kept instants: the mean of 32 midpoints, plain reads."""
    lo, hi = min(t1, t2), max(t1, t2)

    def read(t):
        if key is None:
            return engine.telemetry.gpu_activity(gpu, t, lambda k, at: plain_device(engine, k, at))
        return plain_device(engine, key, t)
    if hi == lo:
        return read(hi)
    samples = [read(lo + (hi - lo) * (k + 0.5) / 32) for k in range(32)]
    return {pipe: sum(s[pipe] for s in samples) / len(samples) for pipe in ACTIVITY_FIELDS}


# Ramps (a100-40gb-two-3g, wan22: 4-5 point timelines), settled steps (a30), OOM kills at a
# crossing (wan22-together 541.99 s) and at a step (faults-demo 240 s), MIG on Hopper (h200-mig).
RAMPS = ("a100-40gb-two-3g", "a30-mig-dcgm", "wan22-h100-mps-together", "faults-demo", "h200-mig",
         "k8s-shared-node")


@pytest.mark.parametrize("name", RAMPS)
def test_device_activity_is_the_plain_sum_bit_for_bit(name):
    engine = Engine(load_scenario(SCENARIOS / f"{name}.yaml"))
    end = min(engine.scenario.duration, 900.0)
    engine.advance_to(end)
    instants = sorted({*(k * 7.3 for k in range(int(end / 7.3) + 1)), *(float(t) for t in range(0, int(end), 60)),
                       40.0, 40.0 + 1e-9, 240.0, 541.9878965435606, end})
    for _ in range(2):  # the second pass reads the kept sums
        for t in instants:
            for key in engine.devices:
                assert repr(engine.telemetry.device_activity(key, t)) == repr(plain_device(engine, key, t)), (key, t)


@pytest.mark.e2e  # six scenarios, 32-instant windows read twice: seconds
@pytest.mark.parametrize("name", RAMPS)
def test_mean_activity_is_the_plain_mean_bit_for_bit(name):
    """GPU windows and GPU-instance windows over the same instants, in either order, and windows
    that end at now: the kept instants give what the plain reads give."""
    engine = Engine(load_scenario(SCENARIOS / f"{name}.yaml"))
    end = min(engine.scenario.duration, 900.0)
    telemetry = engine.telemetry
    for now in (30.0, 41.0, 239.5, 241.0, 542.0, end):
        if now > end or now < engine.now:
            continue
        engine.advance_to(now)
        for lo in (now - 1.0, now - 0.5, now - 15.0, now):
            for gpu in engine.gpus:
                keys = [None, *sorted(k for k in engine.devices if k[0] == gpu)]
                for key in (keys if lo != now - 0.5 else reversed(keys)):
                    got = telemetry.mean_activity(key, gpu, max(lo, 0.0), now)
                    assert repr(got) == repr(plain_mean(engine, key, gpu, max(lo, 0.0), now)), (key, lo, now)


def test_instants_before_now_do_not_change_when_processes_are_killed_later():
    """What _activity_before_now keeps: the activity at an instant before now. A kill happens at
    now, so an engine that has since killed processes (OOM at a crossing, 541.99 s) gives, at the
    earlier instants, what the same engine gave before the kill, and what a fresh engine gives."""
    scenario = load_scenario(SCENARIOS / "wan22-h100-mps-together.yaml")
    engine = Engine(scenario)
    engine.advance_to(541.0)
    window = [541.0 - 1.0 + (k + 0.5) / 32 for k in range(32)]
    before = [repr(engine.telemetry._activity_before_now((0, 0), t)) for t in window]
    engine.advance_to(600.0)
    assert any(p.killed_at is not None and 541.0 < p.killed_at < 600.0 for p in engine.procs)
    after = [repr(engine.telemetry.device_activity((0, 0), t)) for t in window]
    fresh = Engine(scenario)
    fresh.advance_to(600.0)
    assert before == after == [repr(plain_device(fresh, (0, 0), t)) for t in window]
    # now itself is never kept: a kill at now changes it
    engine.telemetry._activity_before_now((0, 0), engine.now)
    assert ((0, 0), engine.now) not in engine.telemetry._past


@pytest.fixture
def engine(tmp_path):
    """An embedded host engine over an A100 with a 2g and a 3g instance (a job on each) and an A30."""
    data = {"name": "fake", "gpus": [
        {"model": "A100-80GB", "mig": [{"profile": "2g.20gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]},
        {"model": "A30"}],
        "processes": [{"pid": 11, "cmdline": "a", "gpu": 0, "mig": 0, "memory": "1GiB",
                       "sm_active": [[0, 0.1], [20, 0.9]], "tensor_active": 0.3},
                      {"pid": 12, "cmdline": "b", "gpu": 0, "mig": 1, "memory": "1GiB", "sm_active": 0.5},
                      {"pid": 13, "cmdline": "c", "gpu": 1, "memory": "1GiB", "dram_active": [[0, 0.0], [50, 1.0]]}],
        "dcgm": {"gpu_ids": [3, 1]}}
    with embedded_engine(tmp_path, data, B) as running:
        yield running


def _garbage(kind, count: int):
    values = (kind * count)()
    ctypes.memset(values, 0xAB, ctypes.sizeof(values))
    return values


def test_value_writer_writes_the_bytes_the_attribute_path_writes(engine):
    sim, lib, _ = engine
    impl = lib._impl
    S = hostwatch.Sample
    samples = [(155, S(12.5, 250.125)), (155, S(12.5)), (155, S(12.5, blank=2)), (155, S(None, status=-16)),
               (155, S(3.0, float("nan"))), (155, S(3.0, -0.0)), (155, S(3.0, math.inf)), (1002, S(7.25, 0.3333)),
               (150, S(12.5, 61)), (150, S(12.5, blank=1, status=-18)), (150, S(None)), (156, S(1e9, 2**62)),
               (156, S(4.0, -5)), (156, S(4.0, 2**64 + 5)), (156, S(4.0, -2**63 - 1)), (999, S(None, status=-13)),
               (54, S(2.0, "GPU-abc")), (54, S(2.0)), (230, S(9.0, True))]
    kind = B.structs.c_dcgmFieldValue_v2
    fast, slow = _garbage(kind, len(samples)), _garbage(kind, len(samples))
    writer = valuewriter.ValueWriter.of(fast)
    assert writer is not None
    took = []
    for n, (fid, sample) in enumerate(samples):
        written = writer.write(n, 4, 7, fid, sample, sim.boot_time)
        took.append(written)
        if not written:  # what dcgmEntitiesGetLatestValues does then
            out = fast[n]
            out.version, out.entityGroupId, out.entityId = 2 << 24, 4, 7
            impl._fill(out, sample, fid)
        out = slow[n]
        out.version, out.entityGroupId, out.entityId = 2 << 24, 4, 7
        impl._fill(out, sample, fid)
        assert bytes(fast[n]) == bytes(slow[n]), (fid, sample)
    # strings and integers ctypes would wrap take the attribute path; the rest is written straight
    assert took == [True] * 13 + [False, False, True, False, False, True]
    assert valuewriter.ValueWriter.of(_garbage(B.structs.c_dcgmFieldValue_v1, 2)) is None  # another layout


def test_latest_values_answer_the_same_with_and_without_the_writer(engine, monkeypatch):
    """Whole calls: the same statuses, timestamps, values and blanks in the caller's array, with
    unwatched fields, unknown entities, GPU fields on GPU instances and profiling windows."""
    sim, _, handle = engine
    agent, structs, fields = B.agent, B.structs, B.fields
    group = agent.dcgmGroupCreate(handle, structs.DCGM_GROUP_EMPTY, "g")
    entities = [(fields.DCGM_FE_GPU, 3), (fields.DCGM_FE_GPU, 1)]
    entities += [(e.entity.entityGroupId, e.entity.entityId)
                 for e in agent.dcgmGetGpuInstanceHierarchy(handle).entityList[:4]]
    for eg, eid in entities:
        agent.dcgmGroupAddEntity(handle, group, eg, eid)
    watched = [1001, 1002, 1004, 1005, 150, 155, 156, 54, 203, 100, 230]
    field_group = agent.dcgmFieldGroupCreate(handle, watched, "f")
    agent.dcgmWatchFields(handle, group, field_group, 1_000_000, 60.0, 0)
    asked = [*watched, 1003, 57]  # two fields nobody watches
    pairs = [structs.c_dcgmGroupEntityPair_t(eg, eid) for eg, eid in entities + [(fields.DCGM_FE_GPU_I, 500)]]
    for t in (0.0, 1.0, 2.0, 21.0, 22.5, 60.0):
        sim.engine.advance_to(t)
        answers = []
        for use_writer in (True, False):
            if not use_writer:
                monkeypatch.setattr(valuewriter.ValueWriter, "of", classmethod(lambda cls, values: None))
            fast = agent.dcgmEntitiesGetLatestValues(handle, pairs, asked, 0)
            answers.append([(v.version, v.entityGroupId, v.entityId, v.fieldId, v.fieldType, v.status, v.ts,
                             repr(v.value.dbl) if v.fieldType == ord("d") else
                             v.value.str if v.fieldType == ord("s") else v.value.i64) for v in fast])
            monkeypatch.undo()
        assert answers[0] == answers[1], t
        assert any(a[5] == -16 for a in answers[0]) and any(a[5] == -45 for a in answers[0])  # not watched; no such GI
        if t >= 2.0:
            assert any(a[3] == 1002 and a[6] and 0 < float(a[7]) < 1 for a in answers[0])  # a profiling window


def _answers(tmp_path, tick: bool) -> list:
    """Every value a30-mig-dcgm's host engine gives the DCGM backend over its profiling lock and
    host engine restart, read at 1 s steps; with ``tick``, the engine's update thread (update_due)
    samples at each step before the read."""
    from exporter.backend.sim import SimBackend

    backend = SimBackend(SCENARIOS / "a30-mig-dcgm.yaml", backend="dcgm")
    answers = []
    try:
        backend.step_to(350.0)
        backend.open()
        original = type(backend.dcgm_lib).invoke

        def record(lib, name, method, args):
            status = original(lib, name, method, args)
            if name == "dcgmEntitiesGetLatestValues":
                answers.append((status, bytes(memoryview(args[-1]).cast("B"))))
            return status
        type(backend.dcgm_lib).invoke = record
        try:
            for t in range(351, 740, 1):
                backend.step_to(float(t))
                if tick:
                    backend.sim.advance_to(backend.virtual_time())
                    backend.dcgm_lib.update_due()
                backend.poll()
        finally:
            type(backend.dcgm_lib).invoke = original
    finally:
        backend.close()
    return answers


@pytest.mark.e2e  # plays a30-mig-dcgm's faults through the DCGM backend twice
def test_update_due_moves_the_sampling_out_of_the_read_and_changes_no_value(tmp_path, monkeypatch):
    """The engine thread's sampling at each instant (FakeDcgmLib.update_due, bench/dcgm_pairs.py
    --engine-thread) gives the reads the same bytes as sampling lazily in the read: through the
    profiling lock (6-8 min, blanks) and the host engine's restart (11-12 min: calls fail, the
    tick leaves a down engine alone, the backend reconnects and watches again)."""
    import time
    import types

    import exporter.sim

    # one boot time for both hosts (it comes from the wall clock; every DCGM timestamp holds it)
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(exporter.sim, "time", types.SimpleNamespace(**{**clock, "time": lambda: 1.8e9}))
    lazy, ticked = _answers(tmp_path, False), _answers(tmp_path, True)
    assert len(lazy) == len(ticked) > 300
    assert lazy == ticked
    assert any(status != 0 for status, _ in lazy) or len(lazy) < 2 * 389  # the restart: failed or skipped reads


def test_update_due_samples_only_what_is_due(engine):
    sim, lib, handle = engine
    agent, structs, fields = B.agent, B.structs, B.fields
    group = agent.dcgmGroupCreate(handle, structs.DCGM_GROUP_EMPTY, "g")
    agent.dcgmGroupAddEntity(handle, group, fields.DCGM_FE_GPU, 1)
    agent.dcgmWatchFields(handle, group, agent.dcgmFieldGroupCreate(handle, [155, 1005], "f"), 2_000_000, 60.0, 0)
    state = lib._impl._handles[handle.value].engine
    assert state.updated[(1, 1)] == 0.0 and not state.samples  # watched at 0 s: the first window starts
    sim.engine.advance_to(0.5)
    lib.update_due()  # 0.5 s after, half the 2 s period is 1 s: not due
    assert state.updated[(1, 1)] == 0.0 and not state.samples
    sim.engine.advance_to(1.0)
    calls = sum(lib.call_counts.values())
    lib.update_due()
    assert state.updated[(1, 1)] == 1.0 and state.samples[(1, 1, 155)].t == 1.0
    assert state.samples[(1, 1, 1005)].value is not None  # the first profiling window, 0-1 s
    assert sum(lib.call_counts.values()) == calls  # a simulator hook, not a C call
    sim.engine.advance_to(1.9)
    lib.update_due()
    assert state.updated[(1, 1)] == 1.0


@pytest.mark.e2e  # runs the bench twice
def test_engine_bench_times_the_engine_and_digests_the_same_answers_twice():
    """bench/dcgm_engine.py --smoke: a digest of every engine answer that does not change from one
    run to the next (boot time fixed, pid masked), and the engine's ms per poll."""
    import re
    import subprocess
    import sys

    runs = [subprocess.run([sys.executable, str(REPO / "bench" / "dcgm_engine.py"), "--smoke"], cwd=REPO,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    for out in runs:
        assert out.returncode == 0, out.stderr[-2000:]
        assert re.search(r"a100-40gb-two-3g@300s\s+host engine [\d.]+ ms \[IQR [\d.]+-[\d.]+\], 2\.0 calls a poll",
                         out.stdout), out.stdout
    digests = [re.search(r"a100-40gb-two-3g 0-30s every 3s: (\d+) engine calls, sha256 ([0-9a-f]{64})", out.stdout)
               for out in runs]
    assert all(digests) and int(digests[0][1]) > 10
    assert digests[0][2] == digests[1][2]
