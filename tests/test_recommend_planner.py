"""The MIG planner: exact optimum (against brute force), valid layouts, the seed cases."""

from __future__ import annotations

import dataclasses
from collections import Counter
from functools import lru_cache
from itertools import product

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import catalog
from exporter.catalog import MIB
from exporter.recommend import planner, report
from exporter.recommend.demand import Workload, rule_sized_bytes
from exporter.recommend.patterns import model_patterns
from exporter.recommend.slots import model_slots

GIB = 2**30
H100 = "H100-80GB"


def solve(workloads, points=1, groups=(), current=None, key=H100):
    """The planner's answer for ``workloads`` (and shared ``groups``) on ``key``."""
    ms = model_slots(key)
    return ms, planner.plan(ms, report._items(ms, workloads, points), list(groups), current or {})


def slots_of(ms, plan) -> Counter:
    """Slots by memory (MiB) over every planned GPU."""
    out = Counter()
    for gpu in plan.gpus:
        for name, _ in gpu.layout or (("full", 0),):
            out[next(s.memory_mib for s in ms.slots if s.name == name)] += 1
    return out


def check(ms, workloads, plan, points=1):
    """Valid layouts, and at every time point the instances alive fit the plan's slots (Hall's
    condition on nested sizes, computed here from the raw counts)."""
    for gpu in plan.gpus:
        if gpu.layout:
            assert catalog.layout_fits(ms.model, gpu.layout) is None
    slots = slots_of(ms, plan)
    for t in range(points):
        for level in ms.levels:
            alive = sum(int(w.alive(points)[t]) * ms.gpus_per_instance(w.memory_need_bytes)
                        for w in workloads if ms.levels[ms.tier(w.memory_need_mib)] >= level)
            assert alive <= sum(n for size, n in slots.items() if size >= level), (t, level)


def occupants(plan) -> Counter:
    return Counter(who.split(" #")[0] for g in plan.gpus for who in g.occupants if who)


def test_four_llama_8b_fp16_fill_one_h100_as_all_1g20gb():
    """Seed 004: 8B x 2 bytes x 1.2 = 19.2 GB each, so four 1g.20gb on one H100 (no 2g where 1g will do)."""
    ws = [Workload("llama", rule_sized_bytes(8e9, "fp16"), count=4)]
    ms, plan = solve(ws)
    check(ms, ws, plan)
    assert len(plan.gpus) == 1
    assert sorted(p for p, _ in plan.gpus[0].layout) == ["1g.20gb"] * 4
    assert occupants(plan) == {"llama": 4}


def test_seven_small_models_per_h100_as_all_1g10gb():
    """Seed 004: a 3B fp16 model needs ~7.2 GB, so seven 1g.10gb per H100; 14 of them need exactly 2 GPUs."""
    ws = [Workload("small", rule_sized_bytes(3e9, "fp16"), count=14)]
    ms, plan = solve(ws)
    check(ms, ws, plan)
    assert len(plan.gpus) == 2
    for gpu in plan.gpus:
        assert Counter(p for p, _ in gpu.layout) == {"1g.10gb": 7}


def test_three_wan_jobs_need_two_h100s_with_3g40gb():
    """Seed 000: 33 GB peaks fit only 3g.40gb or larger, two per H100, so three jobs need two GPUs."""
    ws = [Workload("wan", 33 * 10**9, count=3)]
    ms, plan = solve(ws)
    assert len(plan.gpus) == 2
    used = [p for g in plan.gpus for (p, _), w in zip(g.layout, g.occupants) if w]
    assert used == ["3g.40gb"] * 3


def test_compute_need_moves_a_workload_to_a_profile_with_enough_sms():
    """At equal GPU count and memory, a 30-SM need goes to 2g.20gb (32 SMs), not 1g.20gb (26 SMs)."""
    ms, plan = solve([Workload("busy", 15 * GIB, compute_sms=30)])
    (gpu,) = plan.gpus
    profile = next(p for (p, _), w in zip(gpu.layout, gpu.occupants) if w == "busy")
    assert profile == "2g.20gb"
    assert plan.shortfall_sms == 0


def test_problem_size_depends_on_slots_not_on_instances():
    """A thousand instances of one workload: the model is as small as for one, and exact."""
    ws = [Workload("w", 9 * GIB, count=1000)]
    ms, plan = solve(ws)
    assert len(plan.gpus) == -(-1000 // 7)
    assert plan.rows <= len(ms.levels)


def test_jobs_that_never_ran_together_share_slots():
    """Four 35 GiB jobs, two alive at a time (A and B, then C and D): one GPU with two 3g.40gb, not two."""
    on, off = np.array([1, 1, 0, 0]), np.array([0, 0, 1, 1])
    ws = [Workload("a", 35 * GIB, counts=on), Workload("b", 35 * GIB, counts=on),
          Workload("c", 35 * GIB, counts=off), Workload("d", 35 * GIB, counts=off)]
    ms, plan = solve(ws, points=4)
    check(ms, ws, plan, points=4)
    assert len(plan.gpus) == 1


def test_sequential_jobs_of_one_slot_need_one_gpu():
    """Ten 60 GiB jobs run one after another: one GPU with MIG off, whatever their number."""
    ws = [Workload(f"job{i}", 60 * GIB, counts=np.eye(10, dtype=int)[i]) for i in range(10)]
    ms, plan = solve(ws, points=10)
    check(ms, ws, plan, points=10)
    assert [g.pattern[ms.full] for g in plan.gpus] == [1]


def test_a_model_larger_than_a_gpu_takes_whole_gpus():
    """168 GB (Llama-70B fp16 by the rule) needs two H100s with MIG off per instance."""
    ws = [Workload("llama-70b", rule_sized_bytes(70e9, "fp16"))]
    ms, plan = solve(ws)
    assert len(plan.gpus) == 2 and all(g.pattern[ms.full] for g in plan.gpus)
    assert occupants(plan) == {"llama-70b (1 of 2 GPUs)": 1, "llama-70b (2 of 2 GPUs)": 1}


def test_a_current_layout_is_kept_before_memory_is_saved():
    """Four 8 GiB services fit one H100 in 1g.10gb instances (little memory stranded) or in the
    balanced layout the GPU already has (a 2g and a 3g for 8 GiB each); keeping the layout comes first."""
    ms = model_slots(H100)
    balanced = ms.current_pattern((("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)))
    _, plan = solve([Workload("svc", 8 * GIB, count=4)], current={balanced: 1})
    (gpu,) = plan.gpus
    assert gpu.keep and gpu.pattern == balanced
    _, fresh = solve([Workload("svc", 8 * GIB, count=4)])
    assert fresh.gpus[0].pattern != balanced and fresh.stranded_mib < plan.stranded_mib
    assert [p for (p, _), who in zip(fresh.gpus[0].layout, fresh.gpus[0].occupants) if who] == ["1g.10gb"] * 4


def test_a_shared_device_stays_together_when_it_costs_no_gpu():
    """Three 12 GiB replicas that share a device (36 GiB together) stay together in one 40 GiB slot:
    same GPU count as three slots of their own, and nothing changes for them."""
    ws = [Workload("web", 12 * GIB, count=3)]
    group = planner.Group("n1 gpu1", 36 * 1024, 3, np.array([1]), {"web": np.array([3])}, "full")
    ms, plan = solve(ws, groups=[group])
    assert plan.kept_groups == ("n1 gpu1",) and len(plan.gpus) == 1


def test_a_shared_device_is_broken_up_when_that_saves_a_gpu():
    """Three 15 GiB replicas that held 45 GiB together need a whole GPU as a group (more than a 4g);
    with a fourth replica elsewhere, four 1g.20gb on one H100 hold them all: the group is broken up."""
    ms = model_slots(H100)
    ws = [Workload("web", 15 * GIB, count=4)]
    need = 45 * 1024
    group = planner.Group("n1 gpu1", need, ms.tier(need), np.array([1]), {"web": np.array([3])}, "full")
    _, plan = solve(ws, groups=[group])
    assert plan.kept_groups == () and len(plan.gpus) == 1


def test_the_same_input_gives_the_same_plan():
    """No clock in the search: two runs of a tie-rich problem give identical plans."""
    ws = [Workload(f"w{i}", (3 + 7 * i % 31) * GIB, count=1 + i % 3, compute_sms=(i * 13) % 60)
          for i in range(12)]
    assert solve(ws)[1].gpus == solve(ws)[1].gpus


# --- brute force --------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _layout_counts(key):
    mp = model_patterns(key)
    plain = dataclasses.replace(mp.model, mig_profiles=mp.profiles)
    return [Counter(n for n, _ in layout) for layout in catalog.enumerate_layouts(plain)]


@lru_cache(maxsize=None)
def _least_uncovered(key, multiset):
    """Fewest MiB outside instances among valid layouts containing ``multiset`` (None: none)."""
    mp = model_patterns(key)
    want = Counter(dict(multiset))
    best = None
    for counts in _layout_counts(key):
        if all(counts[p] >= n for p, n in want.items()):
            covered = sum(mp.model.profile(p).memory_mib * n for p, n in counts.items())
            uncovered = mp.full_memory_mib - covered
            best = uncovered if best is None else min(best, uncovered)
    return best


def _block_cost(key, block):
    """Lexicographic (stranded MiB, shortfall SMs) for the workloads of one GPU, None if impossible."""
    mp = model_patterns(key)
    choices = [[p for p in mp.profiles if p.memory_mib >= w.memory_need_mib] for w in block]
    best = None
    for combo in product(*choices):
        multiset = tuple(sorted(Counter(p.name for p in combo).items()))
        uncovered = _least_uncovered(key, multiset)
        if uncovered is None:
            continue
        stranded = uncovered + sum(p.memory_mib - w.memory_need_mib for p, w in zip(combo, block))
        shortfall = sum(max(0, w.sms_on(mp.model) - p.sm_count) for p, w in zip(combo, block))
        if best is None or (stranded, shortfall) < best:
            best = (stranded, shortfall)
    return best


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]


def brute_force(key, workloads):
    """(GPUs, stranded MiB, shortfall SMs): lexicographic minimum over every grouping of workloads."""
    best = None
    for part in _partitions(list(workloads)):
        costs = [_block_cost(key, block) for block in part]
        if any(c is None for c in costs):
            continue
        value = (len(part), sum(c[0] for c in costs), sum(c[1] for c in costs))
        best = value if best is None or value < best else best
    return best


workload_sizes = st.sampled_from([3, 8, 9.5, 12, 19, 21, 30, 39, 45, 70, 79])
workload_sms = st.sampled_from([None, 10, 20, 28, 40, 62, 100])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(workload_sizes, workload_sms), min_size=1, max_size=5),
       st.sampled_from(["H100-80GB", "A100-40GB", "A30"]))
def test_optimum_equals_brute_force(specs, key):
    """On small random cases the planner's (GPUs, stranded memory, shortfall) equals exhaustive search."""
    mp = model_patterns(key)
    scale = mp.full_memory_mib * MIB / (80 * GIB)  # the same shapes on smaller GPUs
    ws = [Workload(f"w{i}", int(size * GIB * scale), compute_sms=sms) for i, (size, sms) in enumerate(specs)]
    ws = [w for w in ws if w.memory_need_mib <= mp.full_memory_mib]
    if not ws:
        return
    ms, plan = solve(ws, key=key)
    check(ms, ws, plan)
    assert plan.optimal
    # The planner may also turn a GPU's MIG off (a whole GPU, more memory than the largest
    # profile): never more GPUs than MIG-only brute force, and the same when it uses no such GPU.
    best = brute_force(key, ws)
    assert len(plan.gpus) <= best[0]
    if not any(g.pattern[ms.full] for g in plan.gpus):
        # The planner also counts the memory MIG mode itself takes (usable memory minus the largest
        # profile's) as stranded on every MIG GPU.
        overhead = ms.model.memory_capacity_bytes // MIB - mp.full_memory_mib
        assert (len(plan.gpus), plan.stranded_mib - overhead * len(plan.gpus), plan.shortfall_sms) == best
