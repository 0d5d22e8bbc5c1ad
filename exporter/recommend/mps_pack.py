"""The MPS alternative: whole GPUs shared by MPS clients instead of MIG instances.

First-fit decreasing by peak (margins are per client limits, see mps.py): a workload joins the first open GPU where the
clients' peaks still fit together, their known compute needs stay within the SMs and the
client count within MPS's limit; failing that, a GPU whose clients all have timelines and
that a stagger keeps under capacity (the seed talk's case); failing that, a new GPU. This
is a heuristic (bin packing is NP-hard); it is reported beside the exact MIG optimum, with
its cost: no memory isolation and shared fault domains.
"""

from __future__ import annotations

import numpy as np

from exporter.recommend import mps
from exporter.recommend.demand import Workload

STAGGER_TRIES = 16  # GPUs tried for a stagger before opening a new one


def pack(model, workloads: list[Workload]) -> list[mps.MpsAdvice]:
    """GPUs of ``model`` (MIG off, MPS on) holding ``workloads``; one advice per GPU."""
    capacity = model.memory_capacity_bytes
    order = sorted(workloads, key=lambda w: -w.peak_memory_bytes)
    fitting = [w for w in order if w.peak_memory_bytes <= capacity]
    members: list[list[Workload]] = []
    n = len(fitting)
    mem_left = np.zeros(n)  # per open GPU; only the first len(members) entries are live
    sms_left = np.zeros(n)
    count = np.zeros(n, dtype=int)
    smallest = fitting[-1].peak_memory_bytes if fitting else 0
    lo = 0  # GPUs before lo cannot take even the smallest workload: closed for good
    staggerable = any(w.timeline for w in fitting)
    for w in fitting:
        need, sms = w.peak_memory_bytes, w.sms_on(model)
        live = len(members)
        while not staggerable and lo < live and (mem_left[lo] < smallest or count[lo] >= mps.MAX_MPS_CLIENTS):
            lo += 1
        ok = np.flatnonzero((mem_left[lo:live] >= need) & (sms_left[lo:live] >= sms)
                            & (count[lo:live] < mps.MAX_MPS_CLIENTS))
        target = lo + int(ok[0]) if len(ok) else _stagger_target(model, members, w, sms_left, count, sms)
        if target is None:
            members.append([])
            target = live
            mem_left[target], sms_left[target] = capacity, model.sm_count
        members[target].append(w)
        mem_left[target] -= need
        sms_left[target] -= sms
        count[target] += 1
    return [
        mps.advise(f"MPS GPU {i + 1}", model, capacity, model.sm_count, group)
        for i, group in enumerate(members)
    ]


def _stagger_target(model, members, w, sms_left, count, sms) -> int | None:
    if w.timeline is None:
        return None
    tried = 0
    for i, group in enumerate(members):
        if count[i] >= mps.MAX_MPS_CLIENTS or sms_left[i] < sms:
            continue
        if any(m.timeline is None for m in group):
            continue
        timelines = [m.timeline for m in (*group, w)]
        shortest = min(t[-1][0] for t in timelines)
        if mps.find_stagger(timelines, model.memory_capacity_bytes,
                            mps.MAX_STAGGER_SHARE * shortest) is not None:
            return i
        tried += 1
        if tried >= STAGGER_TRIES:
            break
    return None
