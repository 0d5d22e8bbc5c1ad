"""The whole recommendation per GPU model: seed cases, baselines, whole GPUs, the fleet as it runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import catalog
from exporter.errors import UserError
from exporter.recommend.baselines import Need, best_homogeneous, gpus_for_config, greedy_first_fit
from exporter.recommend.demand import Demand, FleetGpu, SharedDevice, Workload
from exporter.recommend.mps_pack import gpus_needed
from exporter.recommend.patterns import model_patterns
from exporter.recommend.plan_file import load_plan, parse_plan
from exporter.recommend.report import recommend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"
GIB = 2**30
GB = 10**9


def only_plan(rec):
    (plan,) = rec.plans
    return plan


def used_profiles(plan):
    return Counter(i.profile for g in plan.gpus for i in g.instances if i.workload)


def needs(sizes_gib):
    return [Need(f"w{i}", int(s * 1024), 1, np.array([1])) for i, s in enumerate(sizes_gib)]


def test_seed_llama_8b_example_gives_one_h100_all_1g20gb():
    """examples/workloads/llama-8b-x4.yaml: four 1g.20gb on one H100, as OCI's all-1g.20gb."""
    plan = only_plan(recommend(load_plan(str(EXAMPLES / "llama-8b-x4.yaml"))))
    assert plan.gpus_needed == 1
    assert [g.config for g in plan.gpus] == ["all-1g.20gb"]
    assert plan.optimal


def test_seed_small_model_example_gives_seven_per_h100():
    """examples/workloads/llama-3b-x14.yaml: 7.2 GB models, seven 1g.10gb per H100."""
    plan = only_plan(recommend(load_plan(str(EXAMPLES / "llama-3b-x14.yaml"))))
    assert plan.gpus_needed == 2
    assert used_profiles(plan) == {"1g.10gb": 14}


def test_seed_wan_example_compares_mig_and_staggered_mps():
    """examples/workloads/wan22-5b-x3.yaml: MIG needs two H100s (3g.40gb), MPS one with a stagger."""
    plan = only_plan(recommend(load_plan(str(EXAMPLES / "wan22-5b-x3.yaml"))))
    assert plan.gpus_needed == 2
    assert used_profiles(plan) == {"3g.40gb": 3}
    assert len(plan.mps) == 1 and plan.mps[0].verdict == "stagger"
    offsets = sorted(c.start_offset_seconds for c in plan.mps[0].clients)
    assert offsets[0] == 0 and offsets[-1] <= 120  # no later than the talk's one minute apart


def test_model_larger_than_a_gpu_gets_whole_gpus_and_a_bigger_model_named():
    """Llama-70B fp16 (168 GB) needs two H100s with MIG off, and fits one B200."""
    demand = parse_plan({"gpu_model": "H100-80GB",
                         "workloads": [{"name": "llama-70b", "params": "70B", "precision": "fp16"}]})
    plan = only_plan(recommend(demand))
    assert plan.gpus_needed == plan.gpus_mig_off == 2
    assert all(not g.mig_enabled and g.config == "all-disabled" for g in plan.gpus)
    assert any("B200" in r and "2 GPUs" in r for r in plan.reasons)


def test_workload_that_only_fits_7g_runs_with_mig_off():
    """A GPU holding one workload larger than a 4g is better off with MIG disabled than as one 7g."""
    demand = parse_plan({"gpu_model": "H100-80GB", "workloads": [{"name": "big", "memory": "60GiB"}]})
    (gpu,) = only_plan(recommend(demand)).gpus
    assert gpu.config == "all-disabled" and not gpu.mig_enabled


def test_non_mig_model_gets_one_gpu_per_workload_and_an_mps_alternative():
    """An L40S has no MIG: the plan is whole GPUs, the MPS alternative packs them."""
    demand = parse_plan({"gpu_model": "L40S", "workloads": [{"name": "s", "count": 4, "memory": "10GiB"}]})
    plan = only_plan(recommend(demand))
    assert plan.gpus_needed == 4
    assert gpus_needed(list(plan.mps)) == 1


def test_the_mps_alternative_counts_the_gpus_of_workloads_too_big_to_share():
    """examples/workloads/mixed-inference.yaml: the 70B fp16 model takes two whole GPUs in the MPS
    alternative too; leaving them out made MPS look cheaper than MIG."""
    rec = recommend(load_plan(str(EXAMPLES / "mixed-inference.yaml")))
    for plan in rec.plans:
        dedicated = [a for a in plan.mps if a.verdict == "dedicated"]
        assert sum(a.gpus for a in dedicated) == 2
        assert gpus_needed(list(plan.mps)) == sum(a.gpus for a in plan.mps) >= 2 + len(plan.mps) - len(dedicated)


def test_existing_layouts_are_kept_and_unneeded_gpus_released():
    """A GPU already at all-1g.20gb keeps it for four Llamas; the spare GPU is released."""
    demand = parse_plan({
        "gpu_model": "H100-80GB",
        "fleet": [{"node": "n1", "gpu_model": "H100-80GB", "gpus": 2, "layout": {"1g.20gb": 4}}],
        "workloads": [{"name": "llama", "count": 4, "params": "8B", "precision": "fp16"}],
    })
    plan = only_plan(recommend(demand))
    changes = sorted((g.node, g.index, g.change) for g in plan.gpus)
    assert changes == [("n1", 0, "keep"), ("n1", 1, "release")]
    assert (plan.kept, plan.reconfigured, plan.released, plan.added) == (1, 0, 1, 0)


def test_plan_needing_more_gpus_than_the_fleet_counts_what_to_add():
    """Three GPUs needed on a one-GPU fleet (MIG off): it keeps its configuration for one job (any
    arrangement needs three GPUs), two GPUs with two 3g.40gb each are added."""
    demand = parse_plan({
        "gpu_model": "H100-80GB",
        "fleet": [{"node": "n1", "gpu_model": "H100-80GB"}],
        "workloads": [{"name": "wan", "count": 5, "memory": "33GB"}],
    })
    plan = only_plan(recommend(demand))
    assert Counter(g.change for g in plan.gpus) == {"keep": 1, "new": 2}
    assert (plan.kept, plan.reconfigured, plan.released, plan.added) == (1, 0, 0, 2)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([5, 9, 15, 30, 39, 60]), min_size=1, max_size=8),
       st.lists(st.sampled_from([None, {"1g.10gb": 7}, {"3g.40gb": 2}, {"1g.20gb": 4}]), min_size=1, max_size=4))
def test_summary_counts_add_up(sizes, layouts):
    """Every planned GPU is kept, reconfigured or added; every fleet GPU kept, reconfigured or released."""
    fleet = [{"node": f"n{i}", "gpu_model": "H100-80GB", **({"layout": lay} if lay else {})}
             for i, lay in enumerate(layouts)]
    demand = parse_plan({"gpu_model": "H100-80GB", "fleet": fleet,
                         "workloads": [{"name": f"w{i}", "memory": f"{s}GiB"} for i, s in enumerate(sizes)]})
    plan = only_plan(recommend(demand))
    assert plan.kept + plan.reconfigured + plan.added == plan.gpus_needed
    assert plan.kept + plan.reconfigured + plan.released == plan.available_gpus == len(layouts)
    for g in plan.gpus:
        if g.change == "keep":
            current = next(f for f in demand.gpus if (f.node, f.index) == (g.node, g.index))
            kept = Counter(i.profile for i in g.instances) if g.mig_enabled else None
            assert kept == (Counter(p for p, _ in current.layout) if current.layout is not None else None)


def test_workloads_without_a_model_and_no_target_are_an_error():
    """Nothing says which GPU to plan for: a one-line error naming the workload."""
    with pytest.raises(UserError, match="names no GPU model"):
        recommend(Demand(workloads=(Workload("orphan", GIB),)))


def test_shared_devices_get_mps_advice():
    """Workloads sharing a device now get limits and a verdict."""
    ws = (Workload("a", 50 * GIB, gpu_model="H100-80GB"), Workload("b", 40 * GIB, gpu_model="H100-80GB"))
    shared = (SharedDevice("n1 gpu0", "H100-80GB", catalog.MODELS["H100-80GB"].memory_capacity_bytes,
                           132, True, ("a", "b")),)
    rec = recommend(Demand(workloads=ws, gpus=(FleetGpu("n1", 0, "H100-80GB"),), shared=shared))
    (advice,) = rec.shared_now
    assert advice.verdict == "limit-concurrency" and advice.max_concurrency == 1


def test_what_runs_now_is_described_on_every_fleet_gpu():
    """The report says what each GPU is now: MIG off and how it is shared, or its MIG layout."""
    demand = Demand(
        workloads=(Workload("w", 9 * GIB, count=2, gpu_model="H100-80GB"),),
        gpus=(FleetGpu("n1", 0, "H100-80GB", sharing="mps"),
              FleetGpu("n1", 1, "H100-80GB", layout=(("3g.40gb", 0), ("3g.40gb", 4)), sharing="mig")))
    plan = only_plan(recommend(demand))
    now = {g.index: g.current for g in plan.gpus}
    assert now == {0: "MIG off, MPS", 1: "MIG 2x3g.40gb"}


def test_greedy_first_fit_fragments_where_the_optimum_does_not():
    """30, 15, 8, 8 GiB arriving in that order: first-fit puts 3g.40gb at slice 0 and strands slice 7,
    so the last 1g.10gb needs a second GPU; 3g at 4 with 1g.20gb + 2x1g.10gb before it fits one."""
    mp = model_patterns("H100-80GB")
    assert greedy_first_fit(mp, needs([30, 15, 8, 8]))[0].gpus == 2
    demand = parse_plan({"gpu_model": "H100-80GB",
                         "workloads": [{"name": f"w{i}", "memory": f"{s}GiB"} for i, s in enumerate([30, 15, 8, 8])]})
    assert only_plan(recommend(demand)).gpus_needed == 1


def test_homogeneous_counts_by_hand():
    """all-balanced (2x1g.10gb, 2g.20gb, 3g.40gb): three 35 GB jobs need three GPUs (one 3g each);
    four 5 GB and one 35 GB need two (five workloads, four instances per GPU)."""
    mp = model_patterns("H100-80GB")
    balanced = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    gb = lambda n: n * GB / GIB  # noqa: E731
    assert gpus_for_config(mp, balanced, needs([gb(35)] * 3)) == 3
    assert gpus_for_config(mp, balanced, needs([gb(5)] * 4 + [gb(35)])) == 2
    assert gpus_for_config(mp, {"1g.10gb": 7}, needs([gb(5)] * 4 + [gb(35)])) is None


def test_homogeneous_baseline_is_time_resolved():
    """Two 35 GiB jobs alive at different times need one all-3g.40gb GPU, not two... and one slot."""
    mp = model_patterns("H100-80GB")
    apart = [Need("a", 35 * 1024, 1, np.array([1, 0, 1])), Need("b", 35 * 1024, 1, np.array([0, 1, 0])),
             Need("c", 35 * 1024, 1, np.array([0, 1, 0]))]
    assert gpus_for_config(mp, {"3g.40gb": 2}, apart) == 1
    assert gpus_for_config(mp, {"3g.40gb": 2}, [Need(n.name, n.mib, 1, np.array([1])) for n in apart]) == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([3, 8, 15, 19, 30, 39, 70]), min_size=1, max_size=12))
def test_baselines_never_beat_the_optimum(sizes):
    """The optimum is a lower bound for every single configuration and for greedy first-fit."""
    demand = parse_plan({"gpu_model": "H100-80GB",
                         "workloads": [{"name": f"w{i}", "memory": f"{s}GiB"} for i, s in enumerate(sizes)]})
    plan = only_plan(recommend(demand))
    best = plan.gpus_needed
    assert plan.homogeneous.gpus >= best
    assert all(b.gpus is None or b.gpus >= best for b in plan.homogeneous_tried)
    assert plan.greedy.gpus >= best
    homogeneous, _ = best_homogeneous(model_patterns("H100-80GB"), needs(sizes))
    assert homogeneous.gpus == plan.homogeneous.gpus
