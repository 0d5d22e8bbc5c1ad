"""MPS advice: limits, thread percentages, and the stagger that avoids the seed talk's OOM."""

from __future__ import annotations

import numpy as np
import pytest

from exporter import catalog
from exporter.recommend import mps, mps_pack
from exporter.recommend.demand import Workload
from exporter.sim.model import timeline_value
from exporter.units import parse_mps_pinned_limits

GB = 10**9
GIB = 2**30
H100 = catalog.MODELS["H100-80GB"]
# Seed 000: a Wan 2.2 5B job loads (~30 s), holds ~22 GB, and needs ~33 GB in its last 30 s.
WAN = ((0.0, 0), (30.0, 22 * GB), (480.0, 22 * GB), (480.0, 33 * GB), (510.0, 33 * GB))


def total_at(timelines, offsets, t):
    """Summed memory at time t, each job present only during [offset, offset + duration)."""
    total = 0.0
    for tl, o in zip(timelines, offsets):
        if o <= t < o + tl[-1][0]:
            total += timeline_value(tl, t - o)
    return total


def worst_total(timelines, offsets, step=0.05):
    """Largest summed memory, sampled finely and at every breakpoint (independent of mps.py's grid)."""
    end = max(o + tl[-1][0] for tl, o in zip(timelines, offsets))
    times = set(np.arange(0.0, end, step).round(6))
    for tl, o in zip(timelines, offsets):
        for t, _ in tl:
            times |= {o + t, o + t - 1e-6}
    return max(total_at(timelines, offsets, t) for t in times if t >= 0)


def wan_jobs(n=3):
    return [Workload(f"wan#{i + 1}", 33 * GB, timeline=WAN) for i in range(n)]


def each(workloads):
    """Clients for mps.advise: one instance of every workload."""
    return [(w, 1) for w in workloads]


def test_wan_jobs_started_together_exceed_an_h100():
    """The seed talk's crash: three peaks at once need 99 GB, more than the H100 holds."""
    assert worst_total([WAN] * 3, [0, 0, 0]) > H100.memory_capacity_bytes


def test_stagger_avoids_the_wan_oom():
    """The advice staggers the three jobs so their summed memory stays under capacity at every instant."""
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(wan_jobs()))
    assert advice.verdict == "stagger"
    offsets = [c.start_offset_seconds for c in advice.clients]
    assert worst_total([WAN] * 3, offsets) <= H100.memory_capacity_bytes
    # Two 33 GB peaks plus a 22 GB plateau exceed 85 GB, so the 30 s peaks must not overlap;
    # 30 s apart is therefore the least, and it is tighter than the talk's one minute.
    assert sorted(offsets) == [0.0, 30.0, 60.0]


def test_stagger_is_not_needed_when_peaks_fit():
    """Two Wan jobs peak at 66 GB together: they may start at once."""
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(wan_jobs(2)))
    assert advice.verdict == "fits"
    assert all(c.start_offset_seconds is None for c in advice.clients)


def test_without_timelines_the_advice_limits_concurrency():
    """Servers with no learned timeline cannot be staggered: only as many as fit at their peaks may run."""
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, [(Workload("s", 30 * GIB, count=3), 3)])
    assert advice.verdict == "limit-concurrency"
    assert advice.max_concurrency == 2  # 60 GiB fit in 79 GiB, 90 GiB do not


def test_a_client_larger_than_the_device_is_flagged():
    """No stagger helps a client whose own peak exceeds the device."""
    ws = [Workload("big", 90 * GIB), Workload("small", 1 * GIB)]
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(ws))
    assert advice.verdict == "too-big"


def test_pinned_limit_is_the_peak_with_margin_in_a_form_cuda_accepts():
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT parses back (G/M units) to at least the peak plus margin."""
    w = Workload("x", 20 * GIB, margin_ratio=0.1)
    limit = parse_mps_pinned_limits(mps.pinned_limit(w.memory_need_bytes))
    assert set(limit) == {"0"}
    assert w.memory_need_bytes <= limit["0"] < w.memory_need_bytes + 2**20


def test_pinned_limit_carries_its_explicit_margin_even_where_the_planning_need_is_capped():
    """A workload that ran in a 9.75 GiB slice has its planning need capped there, but its MPS limit is
    the learned peak plus the stated margin, and the advice says which peak and which margin."""
    w = Workload("svc", 9 * GIB, margin_ratio=0.2, memory_cap_bytes=int(9.75 * GIB))
    assert w.memory_need_bytes == int(9.75 * GIB)
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, [(w, 2)])
    (one, two) = advice.clients
    assert (one.workload, two.workload) == ("svc #1", "svc #2")
    assert one.peak_bytes == 9 * GIB and one.margin_ratio == 0.2
    assert parse_mps_pinned_limits(one.pinned_limit)["0"] >= 9 * GIB * 1.2


def test_clients_that_never_ran_together_are_not_added_up():
    """Ten time-sliced jobs of 16 GiB that never held more than 32 GiB at once fit: the advice judges the
    most needed at one time, not the sum of every peak (160 GiB)."""
    w = Workload("job", 16 * GIB, count=10)
    advice = mps.advise("gpu3", H100, H100.memory_capacity_bytes, H100.sm_count, [(w, 10)], together=32 * GIB)
    assert advice.verdict == "fits"
    assert advice.sum_of_peaks_bytes == 160 * GIB and advice.together_bytes == 32 * GIB
    summed = mps.advise("gpu3", H100, H100.memory_capacity_bytes, H100.sm_count, [(w, 10)])
    assert summed.verdict == "limit-concurrency"


def test_thread_percentage_follows_compute_need_or_fair_share():
    """33 SMs of 132 is 25%, plus 25% headroom -> 32%; unknown needs share evenly like the device plugin."""
    assert mps.thread_percentage(Workload("a", GIB, compute_sms=33), 132, 3, H100) == 32
    assert mps.thread_percentage(Workload("b", GIB), 132, 4, H100) == 25
    assert mps.thread_percentage(Workload("c", GIB, compute_sms=500), 132, 2, H100) == 100


def test_safe_concurrency_takes_the_worst_case():
    """Any k clients must fit, so the k largest peaks decide."""
    assert mps.safe_concurrency([50, 10, 10, 10], 70) == 3
    assert mps.safe_concurrency([50, 40, 10], 70) == 1


def test_discretize_keeps_the_maximum_of_each_bucket():
    """A 1 s spike inside a 10 s bucket still counts, so a grid-feasible stagger is feasible in continuous time."""
    tl = ((0.0, 0), (14.0, 0), (14.0, 100), (15.0, 100), (15.0, 0), (30.0, 0))
    grid = mps.discretize(tl, 10.0)
    assert list(grid) == [0, 100, 0]


def test_stagger_respects_the_maximum_offset():
    """A stagger longer than allowed is refused (queueing jobs one after another is not sharing)."""
    assert mps.find_stagger([WAN] * 3, H100.memory_capacity_bytes, max_offset=45) is None
    assert mps.find_stagger([WAN] * 3, H100.memory_capacity_bytes, max_offset=60) is not None


def test_packing_puts_the_three_wan_jobs_on_one_staggered_gpu():
    """Seed 000's MPS answer: one H100 with staggered starts instead of two MIG GPUs."""
    gpus = mps_pack.pack(H100, wan_jobs(), 1)
    assert len(gpus) == 1
    assert gpus[0].verdict == "stagger"
    offsets = [c.start_offset_seconds for c in gpus[0].clients]
    assert worst_total([WAN] * 3, offsets) <= H100.memory_capacity_bytes


def test_packing_respects_memory_and_client_limits():
    """Every packed GPU holds its clients' peaks and at most 48 clients."""
    ws = [Workload(f"w{i}", (1 + i % 7) * GIB) for i in range(200)]
    gpus = mps_pack.pack(H100, ws, 1)
    assert sorted(c.workload for g in gpus for c in g.clients) == sorted(w.name for w in ws)
    for g in gpus:
        assert g.sum_of_peaks_bytes <= H100.memory_capacity_bytes
        assert len(g.clients) <= mps.MAX_MPS_CLIENTS
    # First-fit decreasing is within 11/9 OPT + 1 of the memory lower bound.
    lower = -(-sum(w.memory_need_bytes for w in ws) // H100.memory_capacity_bytes)
    assert len(gpus) <= 11 * lower // 9 + 1


@pytest.mark.parametrize("step", [1.0, 0.5])
def test_grid_step_is_round_and_bounded(step):
    """The stagger grid uses round steps and never more than GRID_POINTS points."""
    horizon = step * mps.GRID_POINTS
    chosen = mps.grid_step(horizon)
    assert chosen in mps.NICE_STEPS
    assert horizon / chosen <= mps.GRID_POINTS


def test_the_margin_that_sizes_mig_slots_sizes_the_mps_limits_and_the_fit_too():
    """The scenario's Wan jobs in GiB (22 -> 33). Without a margin, staggered they need 77 GiB plus three
    CUDA contexts: below the H100's 79.2 GiB less the MPS server, so they stagger (tight, and the room is
    stated). With the 10% observed margin MIG slots get, each limit is 36.3 GiB and the plateaus 24.2:
    36.3 + 2 x 24.2 exceeds the device at any spacing, so only two may run at once. The verdict never
    rests on bare peaks while the limits say more."""
    tl = ((0.0, 2 * GIB), (60.0, 22 * GIB), (540.0, 22 * GIB), (545.0, 33 * GIB), (570.0, 33 * GIB))
    bare = [Workload(f"wan#{i}", 33 * GIB, timeline=tl) for i in range(3)]
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(bare))
    assert advice.verdict == "stagger"
    offsets = [c.start_offset_seconds for c in advice.clients]
    usable = H100.memory_capacity_bytes - mps.SERVER_BYTES
    assert worst_total([tl] * 3, offsets) + 3 * mps.CONTEXT_BYTES <= usable
    assert advice.room_left_bytes == usable - advice.staggered_peak_bytes > 0
    assert any(r.startswith("tight") and "GiB left" in r or "MiB left" in r for r in advice.reasons)
    margined = [Workload(f"wan#{i}", 33 * GIB, margin_ratio=0.1, timeline=tl) for i in range(3)]
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(margined))
    assert advice.verdict == "limit-concurrency" and advice.max_concurrency == 2
    limit = parse_mps_pinned_limits(advice.clients[0].pinned_limit)["0"]
    assert limit >= 33 * GIB * 1.1


def test_fits_means_limits_and_contexts_leave_room():
    """Two clients whose limits fill the device exactly do not fit: each also holds a CUDA context."""
    half = (H100.memory_capacity_bytes - mps.SERVER_BYTES) // 2
    ws = [Workload(f"svc{i}", half - half % mps.MIB) for i in range(2)]
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(ws))
    assert advice.verdict == "limit-concurrency" and advice.room_left_bytes is None
    small = [Workload(f"svc{i}", 30 * GIB) for i in range(2)]
    advice = mps.advise("gpu0", H100, H100.memory_capacity_bytes, H100.sm_count, each(small))
    assert advice.verdict == "fits"
    assert advice.footprint_bytes == 60 * GIB + 2 * mps.CONTEXT_BYTES
    assert advice.room_left_bytes == H100.memory_capacity_bytes - mps.SERVER_BYTES - advice.footprint_bytes


def test_packing_is_time_resolved_and_counts_whole_gpus_of_workloads_too_big_to_share():
    """Two 50 GiB jobs that never ran at the same time share one MPS GPU; a 100 GiB model takes two
    whole GPUs of its own, and the MPS alternative counts them."""
    night = Workload("night", 50 * GIB, count=1, counts=np.array([1, 1, 0, 0]))
    day = Workload("day", 50 * GIB, count=1, counts=np.array([0, 0, 1, 1]))
    big = Workload("llama-70b", 100 * GIB, count=1)
    gpus = mps_pack.pack(H100, [night, day, big], 4)
    shared = [g for g in gpus if g.verdict != "dedicated"]
    assert len(shared) == 1 and {c.workload for c in shared[0].clients} == {"night", "day"}
    assert shared[0].together_bytes == 50 * GIB
    assert mps_pack.gpus_needed(gpus) == 3
