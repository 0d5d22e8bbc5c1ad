"""The third foresight corpus (bench/foresight_corpus3.py, issue 24): seeded, accepted by the
scenario loader, and its ground truth is what the simulator does with it.

Cheap: the 40 episodes of seed 0 generated and run through the simulator's engine alone (no
exporter, no polling); the accuracy bench itself is smoke-tested in tests/test_bench_smoke.py.
"""

from __future__ import annotations

import pytest

from exporter.foresight.workload import workload_key
from exporter.sim.engine import Engine
from exporter.sim.scenario import parse_scenario
from tests.conftest import bench_module

EPISODES = 40


@pytest.fixture(scope="module")
def corpus():
    return bench_module("foresight_corpus3")


@pytest.fixture(scope="module")
def episodes(corpus):
    return corpus.make_corpus(0, EPISODES)


def test_same_seed_same_corpus_another_seed_another(corpus, episodes):
    assert [e.runs for e in episodes] == [e.runs for e in corpus.make_corpus(0, EPISODES)]
    assert [e.runs for e in episodes] != [e.runs for e in corpus.make_corpus(2, EPISODES)]


@pytest.mark.parametrize("index", range(EPISODES))
def test_episode_truth_is_what_the_simulator_does(corpus, episodes, index):
    """The loader accepts the episode; played to its end, the simulator kills nothing while
    workloads learn alone, and its first kill on the test device is the episode's `first_oom`
    (present exactly when the pattern is colliding, i.e. its ratio is above 1)."""
    e = episodes[index]
    engine = Engine(corpus.to_scenario(e))
    engine.advance_to(e.end)
    kills = engine.oom_events
    assert all(k.reason == "oom" for k in kills), kills  # no MPS pinned limit, no MPS fault in this corpus
    assert [k for k in kills if k.time < e.test_start] == []
    test_kills = [k.time for k in kills if k.gpu == 0]
    assert (e.first_oom is not None) == (e.classes["pattern"] == "colliding") == (e.ratio > 1.0) == bool(test_kills)
    if test_kills:
        assert test_kills[0] == pytest.approx(e.first_oom, abs=0.5)
        assert e.test_start <= e.first_oom <= e.end
    if e.classes["pattern"] == "near_miss":
        assert 0.9 <= e.ratio < 0.99  # 1-10 % short of the device, drawn at 2-8 %


@pytest.mark.parametrize("index", range(EPISODES))
def test_episode_classes_hold(corpus, episodes, index):
    """Each workload keeps one key over its runs (volatile parts differ), different jobs get
    different keys; first runs were not learned on the test device; a declared size is on
    every test run of the declaring job; a never-seen job is one that jumps."""
    e = episodes[index]
    keys: dict[int, set] = {}
    for r in e.runs:
        keys.setdefault(r.workload, set()).add(workload_key(r.cmdline, "python3"))
    assert all(len(k) == 1 for k in keys.values()), keys
    assert len(set.union(*keys.values())) == len(keys)
    assert len({r.pid for r in e.runs}) == len(e.runs)
    assert all(r.start >= e.test_start and r.gpu == 0 for r in e.test_runs())
    assert all(r.end <= e.test_start for r in e.runs if r.phase == "learn")
    learned_here = {r.workload for r in e.runs if r.phase == "learn" and r.gpu == 0}
    first_run = e.classes["first_run"] == "yes"
    assert (0 not in learned_here) == first_run
    assert (e.other is not None) == (e.classes["learned"] == "other_size")
    declared = [dict(r.env).get("GPUSHARE_EXPECTED_PEAK") for r in e.test_runs() if r.workload == 0]
    assert all(declared) == any(declared) == (e.classes["learned"] == "declared")
    if e.classes["learned"] == "never":
        assert e.workloads[0].family in bench_module("foresight_families3").JUMPS


def test_forty_episodes_cover_every_class(corpus, episodes):
    """Seed 0's 40 episodes hold every pattern, sharing mode, first-run class and family."""
    families = bench_module("foresight_families3").FAMILIES
    assert {e.classes["pattern"] for e in episodes} == set(corpus.PATTERNS)
    assert {e.classes["sharing"] for e in episodes} == set(corpus.SHARING)
    assert {e.classes["learned"] for e in episodes} == {"here", *corpus.FIRST_RUNS}
    assert {e.classes["mix"] for e in episodes} == {"replicas", "mixed"}
    assert {w.family for e in episodes for w in e.workloads} == set(families)


def test_capacity_is_the_simulators_for_every_device(corpus):
    """The ground truth's device sizes are the simulator's: a MIG instance is as large as the
    scenarios' driver branch makes it (A100-40GB 3g.20gb: 20096 MiB there, 19968 MiB in the
    smallest branch), a whole GPU its total less reserved memory."""
    devices = {d for _, options in corpus.SHARING.values() for d in options}
    for model, mig in sorted(devices, key=str):
        gpu = {"model": model} if mig is None else {"model": model, "mig": [{"profile": mig}]}
        proc = {"pid": 10, "cmdline": "python3 x.py", "gpu": 0, "memory": "1GiB", **({} if mig is None else {"mig": 0})}
        engine = Engine(parse_scenario({"name": "capacity", "gpus": [gpu], "processes": [proc]}, "capacity"))
        (device,) = {p.device for p in engine.procs}
        assert engine.devices[device].capacity == corpus.capacity(model, mig), (model, mig)
