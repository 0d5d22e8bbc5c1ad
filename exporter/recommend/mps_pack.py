"""The MPS alternative: whole GPUs shared by MPS clients instead of MIG instances.

Every instance alive at once is a *lane* (a workload with at most 3 instances alive at once
has lanes 1..3; lane j is busy whenever at least j run). First-fit decreasing by limit (among the
``OPEN_GPUS`` open GPUs with the most room, so that it stays linear on big fleets): a lane joins
the first open GPU where the pinned limits (peak + margin, the margin MIG slots get too) plus one
CUDA context per lane busy at each time point stay below the usable memory (mps.advise's test;
time-resolved: jobs that never ran together do not add up), their known compute needs
stay within the SMs and the client count within MPS's limit; failing that, a GPU whose
clients all have timelines and that a stagger keeps under capacity (the seed talk's case);
failing that, a new GPU. Workloads whose limit and context exceed the usable memory take whole
GPUs of their own (as many as the MIG plan gives them), counted in. A heuristic (bin packing is NP-hard), reported beside the exact MIG plan with its cost:
no memory isolation and shared fault domains.
"""

from __future__ import annotations

import math

import numpy as np

from exporter.recommend import mps
from exporter.recommend.demand import Workload

STAGGER_TRIES = 16  # GPUs tried for a stagger before opening a new one
OPEN_GPUS = 32  # GPUs first-fit tries (those with the most room) before opening a new one: linear time


def pack(model, workloads: list[Workload], points: int) -> list[mps.MpsAdvice]:
    """GPUs of ``model`` (MIG off, MPS on) holding ``workloads``; one advice per GPU."""
    capacity = model.memory_capacity_bytes
    usable = capacity - mps.SERVER_BYTES - 1  # strictly below: "fits" always leaves room
    lanes, big = [], []
    matrix = np.array([w.alive(points) for w in workloads]) if workloads else np.zeros((0, points))
    columns = np.unique(matrix, axis=1) if matrix.size else matrix  # equal time points need one check
    for w, counts in zip(workloads, columns):
        if mps.limit_mib(w) * mps.MIB + mps.CONTEXT_BYTES > usable:
            big.append(w)
            continue
        for j in range(int(counts.max(initial=0))):
            lanes.append((w, j, counts > j))
    lanes.sort(key=lambda lane: (-mps.limit_mib(lane[0]), lane[0].name, lane[1]))
    # Start offsets are advice for planned jobs; observed ones are packed where they really ran.
    staggerable = any(w.timeline and w.counts is None for w, _, _ in lanes)
    width = columns.shape[1] if columns.size else 1
    loads = np.zeros((max(1, len(lanes)), width))  # limits + contexts
    limits = np.zeros((max(1, len(lanes)), width))  # limits alone
    alive = np.zeros((max(1, len(lanes)), width), dtype=int)
    sms_left = np.zeros(max(1, len(lanes)))
    count = np.zeros(max(1, len(lanes)), dtype=int)
    members: list[list[tuple[Workload, int]]] = []
    highest = np.zeros(max(1, len(lanes)))  # each GPU's largest summed peak over time
    is_open = np.zeros(max(1, len(lanes)), dtype=bool)
    smallest = mps.limit_mib(lanes[-1][0]) * mps.MIB + mps.CONTEXT_BYTES if lanes else 0
    for w, j, mask in lanes:
        limit = mps.limit_mib(w) * mps.MIB
        need, sms = limit + mps.CONTEXT_BYTES, w.sms_on(model)
        candidates = np.flatnonzero(is_open[:len(members)])
        if len(candidates) > OPEN_GPUS:  # the OPEN_GPUS with the most room, in first-fit order
            roomy = np.argpartition(highest[candidates], OPEN_GPUS - 1)[:OPEN_GPUS]
            candidates = np.sort(candidates[roomy])
        target = None
        if len(candidates):
            fit = ((loads[candidates] + need * mask).max(axis=1) <= usable) & (sms_left[candidates] >= sms) \
                & (count[candidates] < mps.MAX_MPS_CLIENTS)
            ok = np.flatnonzero(fit)
            if len(ok):
                target = int(candidates[ok[0]])
        if target is None:
            target = _stagger_target(model, members, w, sms_left, count, sms)
        if target is None:
            members.append([])
            target = len(members) - 1
            sms_left[target] = model.sm_count
            is_open[target] = True
        members[target].append((w, j))
        loads[target] += need * mask
        limits[target] += limit * mask
        alive[target] += mask.astype(int)
        highest[target] = loads[target].max()
        sms_left[target] -= sms
        count[target] += 1
        if count[target] >= mps.MAX_MPS_CLIENTS or loads[target].min() + smallest > usable and not staggerable:
            is_open[target] = False  # no moment has room for the smallest lane: closed for good
    out = []
    for i, group in enumerate(members):
        clients: dict[str, list] = {}
        for w, j in group:
            clients.setdefault(w.name, [w, []])[1].append(j + 1)
        out.append(mps.advise(f"MPS GPU {i + 1}", model, capacity, model.sm_count,
                              [(w, n) for w, n in clients.values()], together=int(limits[i].max()),
                              at_once=int(alive[i].max()), footprint=int(loads[i].max())))
    for w in sorted(big, key=lambda w: w.name):
        gpus = max(1, math.ceil(w.memory_need_bytes / capacity))  # as the MIG plan sizes it
        for k in range(w.count):  # instances numbered as in the MIG plan: "name #k" when several
            out.append(mps.dedicated(f"whole GPUs {len(out) + 1}", model, w, gpus,
                                     f"{w.name} #{k + 1}" if w.count > 1 else w.name))
    return out


def _stagger_target(model, members, w, sms_left, count, sms) -> int | None:
    if w.timeline is None or w.counts is not None:
        return None
    tried = 0
    for i, group in enumerate(members):
        if count[i] >= mps.MAX_MPS_CLIENTS or sms_left[i] < sms:
            continue
        if any(m.timeline is None or m.counts is not None for m, _ in group):
            continue
        timelines = [mps.footprint_timeline(m) for m, _ in group] + [mps.footprint_timeline(w)]
        shortest = min(t[-1][0] for t in timelines)
        if mps.find_stagger(timelines, model.memory_capacity_bytes - mps.SERVER_BYTES - 1,
                            mps.MAX_STAGGER_SHARE * shortest) is not None:
            return i
        tried += 1
        if tried >= STAGGER_TRIES:
            break
    return None


def gpus_needed(advice: list[mps.MpsAdvice]) -> int:
    """GPUs the MPS alternative takes, whole GPUs of too-big workloads included."""
    return sum(a.gpus for a in advice)
