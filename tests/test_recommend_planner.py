"""The MIG planner: exact optimum (against brute force), valid layouts, the seed cases."""

from __future__ import annotations

import dataclasses
from collections import Counter
from functools import lru_cache
from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import catalog
from exporter.catalog import MIB
from exporter.recommend.demand import Workload, rule_sized_bytes
from exporter.recommend.patterns import model_patterns
from exporter.recommend.planner import plan_mig

GIB = 2**30
H100 = "H100-80GB"


def _check_solution(mp, workloads, solution):
    """Every workload placed once, in an instance holding its need, on layouts the catalog accepts."""
    placed = Counter()
    needs = {w.name: w.memory_need_mib for w in workloads}
    for gpu in solution.gpus:
        assert catalog.layout_fits(mp.model, gpu.layout) is None
        for (profile, _), name in zip(gpu.layout, gpu.workloads):
            if name is not None:
                placed[name] += 1
                assert mp.model.profile(profile).memory_mib >= needs[name]
    assert placed == Counter(list(needs))


def test_four_llama_8b_fp16_fill_one_h100_as_all_1g20gb():
    """Seed 004: 8B x 2 bytes x 1.2 = 19.2 GB each, so four 1g.20gb on one H100 (no 2g where 1g will do)."""
    mp = model_patterns(H100)
    ws = [Workload(f"llama#{i}", rule_sized_bytes(8e9, "fp16")) for i in range(4)]
    solution = plan_mig(mp, ws)
    _check_solution(mp, ws, solution)
    assert len(solution.gpus) == 1
    assert sorted(p for p, _ in solution.gpus[0].layout) == ["1g.20gb"] * 4


def test_seven_small_models_per_h100_as_all_1g10gb():
    """Seed 004: a 3B fp16 model needs ~7.2 GB, so seven 1g.10gb per H100; 14 of them need exactly 2 GPUs."""
    mp = model_patterns(H100)
    ws = [Workload(f"small#{i}", rule_sized_bytes(3e9, "fp16")) for i in range(14)]
    solution = plan_mig(mp, ws)
    _check_solution(mp, ws, solution)
    assert len(solution.gpus) == 2
    for gpu in solution.gpus:
        assert Counter(p for p, _ in gpu.layout) == {"1g.10gb": 7}


def test_three_wan_jobs_need_two_h100s_with_3g40gb():
    """Seed 000: 33 GB peaks fit only 3g.40gb or larger, two per H100, so three jobs need two GPUs."""
    mp = model_patterns(H100)
    ws = [Workload(f"wan#{i}", 33 * 10**9) for i in range(3)]
    solution = plan_mig(mp, ws)
    _check_solution(mp, ws, solution)
    assert len(solution.gpus) == 2
    used = [p for g in solution.gpus for (p, _), w in zip(g.layout, g.workloads) if w]
    assert used == ["3g.40gb"] * 3


def test_compute_need_moves_a_workload_to_a_profile_with_enough_sms():
    """At equal GPU count and memory, a 30-SM need goes to 2g.20gb (32 SMs), not 1g.20gb (26 SMs)."""
    mp = model_patterns(H100)
    ws = [Workload("busy", 15 * GIB, compute_sms=30)]
    solution = plan_mig(mp, ws)
    (gpu,) = solution.gpus
    profile = next(p for (p, _), w in zip(gpu.layout, gpu.workloads) if w == "busy")
    assert profile == "2g.20gb"
    assert solution.shortfall_sms == 0


def test_problem_size_depends_on_classes_not_workload_count():
    """A thousand identical workloads make one class: the model stays as small as for one."""
    mp = model_patterns(H100)
    ws = [Workload(f"w{i}", 9 * GIB) for i in range(1000)]
    solution = plan_mig(mp, ws)
    assert solution.classes == 1
    assert len(solution.gpus) == -(-1000 // 7)


def test_a_workload_larger_than_every_profile_is_refused():
    """The planner only takes workloads some profile holds; the caller sends the rest to dedicated GPUs."""
    with pytest.raises(ValueError):
        plan_mig(model_patterns(H100), [Workload("huge", 100 * GIB)])


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
    solution = plan_mig(mp, ws)
    _check_solution(mp, ws, solution)
    assert solution.optimal
    assert (len(solution.gpus), solution.stranded_mib, solution.shortfall_sms) == brute_force(key, ws)
