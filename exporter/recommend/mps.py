"""MPS advice: per-client limits, start offsets that keep clients from killing each other.

MPS gives no memory isolation (nvml_facts §3.3): when the clients' allocations together
exceed the device, one of them fails, and a fatal fault in one client takes down every
client on the device. So, per device shared by several clients:

- CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = the client's peak plus margin, so a runaway client
  fails alone instead of starving the others;
- CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = its compute need (SM-equivalents / device SMs) with
  ``COMPUTE_HEADROOM``, or a fair share 100/n when the need is unknown (as the
  k8s-device-plugin does);
- when the peaks together exceed the device and every client has a learned memory
  timeline, the smallest start offsets that keep the summed memory under the capacity at
  every instant (seed talk: three Wan 5B jobs of ~22 GB each spiking to ~33 GB in their last
  30 s crash together and run fine staggered); otherwise the largest number of clients that
  may safely run at once.

One margin policy for MIG and MPS: a MIG slot holds a workload's peak plus its margin, and an
MPS client's pinned limit is its peak plus the same margin. Clients fit *together* when the
limits of the clients alive at one time, plus one CUDA context per client, stay within the
device's memory less the MPS server's own (``usable``): then no client can push a neighbour
out of memory while staying under its own limit. "fits" always states the room left.
Overheads (docs/recommend.md "MPS advice"): ``CONTEXT_BYTES`` per client, ``SERVER_BYTES``
per device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.catalog import MIB
from exporter.recommend.demand import Timeline, Workload
from exporter.recommend.mps_stagger import (  # noqa: F401 - the stagger search, re-exported
    GRID_POINTS, NICE_STEPS, _curve, discretize, find_stagger, grid_step)

MAX_MPS_CLIENTS = 48  # client contexts per device since Volta (nvml_facts §3.3)
COMPUTE_HEADROOM = 1.25  # thread percentage = need x 1.25: the need is an average, bursts go above
# A stagger longer than this share of the shortest job is queueing, not sharing.
MAX_STAGGER_SHARE = 0.5
HEADROOM_WARNING = 0.05  # say "tight" when less than 5% of the device is left at the worst instant
# Device memory a client's CUDA context takes outside its own allocations (module images, stacks,
# heaps). The MIG user guide's H100 example lists a minimal MPS client (BlackScholes) at 326 MiB
# (nvml_facts section 3.4); a bare PyTorch process shows 781 MB in nvidia-smi (pytorch#34323).
# 512 MiB per client is the planning figure; a pinned limit does not cover it.
CONTEXT_BYTES = 512 * MIB
# The MPS server process itself: 60 MiB in the same MIG guide example, rounded up.
SERVER_BYTES = 64 * MIB


@dataclass(frozen=True)
class ClientAdvice:
    workload: str  # the workload; "name #2" for its second instance alive at once
    peak_bytes: int  # learned or planned peak of one instance
    margin_ratio: float  # the limit's margin over that peak
    need_bytes: int  # peak + margin: what the limit allows
    pinned_limit: str | None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value, e.g. "0=20480M"; None: no MPS
    active_thread_percentage: int | None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; None: no MPS
    start_offset_seconds: float | None  # None when starts need no stagger or none exists
    duration_seconds: float | None


@dataclass(frozen=True)
class MpsAdvice:
    device: str  # "node-a gpu0", "node-a gpu0 gi3 (3g.40gb)", "MPS GPU 1"
    model: str
    capacity_bytes: int
    sms: int
    clients: tuple[ClientAdvice, ...]
    verdict: str  # fits | stagger | limit-concurrency | too-big | dedicated
    sum_of_peaks_bytes: int  # every client's peak added up, as if all peaked at once (no margin)
    together_bytes: int  # the most the clients' limits take at one time (time-resolved when known)
    max_concurrency: int  # any this many clients may run at once, limits and contexts within usable
    staggered_peak_bytes: int | None  # max of limits-scaled memory + contexts with the offsets applied
    curve: tuple[tuple[float, int], ...]  # summed memory over time with offsets, for pictures
    reasons: tuple[str, ...]
    gpus: int = 1  # GPUs this entry stands for (a workload larger than one GPU takes several)
    clients_at_once: int = 0  # most clients alive at one time (each holds a CUDA context)
    footprint_bytes: int = 0  # most memory at one time: limits + contexts (staggered: with offsets)
    room_left_bytes: int | None = None  # usable - footprint for fits/stagger; None otherwise

    @property
    def usable_bytes(self) -> int:
        """Memory the clients may take: the device less the MPS server (dedicated: all of it)."""
        return self.capacity_bytes - (0 if self.verdict == "dedicated" else SERVER_BYTES)

    @property
    def limits_sum_bytes(self) -> int:
        return sum(limit_bytes_of(c) for c in self.clients)


def limit_bytes_of(c: ClientAdvice) -> int:
    """The pinned limit of a client in bytes (whole MiB as written); 0 without one."""
    if not c.pinned_limit:
        return 0
    return int(c.pinned_limit.split("=", 1)[1].rstrip("M")) * MIB


def safe_concurrency(needs: list[int], capacity: int) -> int:
    """Largest k such that ANY k of the clients fit together at their peaks."""
    total, k = 0, 0
    for need in sorted(needs, reverse=True):
        if total + need > capacity:
            break
        total += need
        k += 1
    return k


def thread_percentage(w: Workload, device_sms: int, clients: int, model) -> int:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for ``w``: need + headroom, or a fair share."""
    if not w.compute_known or device_sms <= 0:
        return max(1, 100 // clients)
    share = w.sms_on(model) * COMPUTE_HEADROOM / device_sms
    return int(min(100, max(1, math.ceil(share * 100 - 1e-9))))


def limit_bytes(w: Workload) -> int:
    """The pinned limit of one client: its learned or planned peak plus its margin (never capped by
    the device it ran on, unlike its planning need: the limit is what lets a runaway fail alone)."""
    return math.ceil(w.peak_memory_bytes * (1.0 + w.margin_ratio))


def pinned_limit(need_bytes: int) -> str:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for the client's device 0 in whole MiB."""
    return f"0={-(-need_bytes // MIB)}M"


def expand(clients: list[tuple[Workload, int | list[int]]]) -> list[tuple[str, Workload]]:
    """One (label, workload) per instance: ``name`` alone, or ``name #k`` for instance k of several.

    A client given with a list of numbers is those instances of its workload (the MPS
    alternative numbers a workload's instances across every GPU it spreads over).
    """
    out = []
    for w, count in clients:
        numbers = list(count) if isinstance(count, (list, tuple)) else list(range(1, max(1, count) + 1))
        several = w.count > 1 or len(numbers) > 1
        for k in numbers:
            out.append((f"{w.name} #{k}" if several else w.name, w))
    return out


def footprint_timeline(w: Workload) -> Timeline:
    """One client's memory over its life as the device sees it: the timeline with the margin (what
    its limit allows at each moment) plus its CUDA context."""
    scale = 1.0 + w.margin_ratio
    return tuple((t, math.ceil(v * scale) + CONTEXT_BYTES) for t, v in w.timeline)


def size_text(n: int) -> str:
    """'12.3 GiB', or '300 MiB' below one GiB (never '0.0 GiB' for room that is there)."""
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n // MIB} MiB"


def advise(device: str, model, capacity: int, sms: int, clients: list[tuple[Workload, int]],
           together: int | None = None, at_once: int | None = None, footprint: int | None = None,
           max_stagger_share: float = MAX_STAGGER_SHARE) -> MpsAdvice:
    """MPS settings and start offsets for ``clients`` ((workload, instances at once)) on one device.

    When known (time-resolved: instances that never ran together are not added up),
    ``together`` is the most the clients' pinned limits take at one time, ``at_once`` the most
    clients alive at one time and ``footprint`` the most limits + contexts at one time; else
    every instance counts at once.
    """
    instances = expand(clients)
    workloads = [w for _, w in instances]
    limits = [limit_mib(w) * MIB for w in workloads]
    peaks = [w.peak_memory_bytes for w in workloads]
    usable = capacity - SERVER_BYTES
    n_at_once = len(instances) if at_once is None else at_once
    limits_at_once = sum(limits) if together is None else together
    worst = limits_at_once + n_at_once * CONTEXT_BYTES if footprint is None else footprint
    reasons: list[str] = []
    offsets: tuple[float, ...] | None = None
    step = 1.0
    timelines = [footprint_timeline(w) if w.timeline else None for w in workloads]
    room = None
    ctx = f"{n_at_once} CUDA context{'s' if n_at_once != 1 else ''} of {size_text(CONTEXT_BYTES)}"
    if max(limits, default=0) + CONTEXT_BYTES > usable:
        verdict = "too-big"
        reasons.append(f"a client's limit (peak + margin) and its context exceed the {size_text(usable)} usable: "
                       "it needs a larger slice")
    elif worst < usable:
        verdict, room = "fits", usable - worst
        if len(instances) == 1:
            reasons.append("a single client: nothing to share")
        reasons.append(f"limits of the clients alive at one time {size_text(limits_at_once)} + {ctx} = "
                       f"{size_text(worst)} of {size_text(usable)} usable (the device less "
                       f"{size_text(SERVER_BYTES)} for the MPS server): {size_text(room)} left")
        if together is not None and together < sum(limits):
            reasons.append("clients that never ran together are not added up: all may run as they did")
    elif all(timelines):
        shortest = min(t[-1][0] for t in timelines)
        found = find_stagger(timelines, usable - 1, max_stagger_share * shortest)
        if found is not None:
            offsets, step = found
            verdict = "stagger"
            reasons.append(f"limits and contexts together ({size_text(worst)}) exceed the {size_text(usable)} "
                           "usable; these start offsets keep the sum below it at every instant (the limits "
                           "alone do not: start them staggered)")
        else:
            verdict = "limit-concurrency"
            reasons.append(f"no stagger within {max_stagger_share:.0%} of the shortest job fits the "
                           f"{size_text(usable)} usable")
            reasons += _without_margin(workloads, usable, max_stagger_share * shortest)
    else:
        verdict = "limit-concurrency"
        reasons.append(f"limits and contexts together ({size_text(worst)}) exceed the {size_text(usable)} usable "
                       "and not every client has a timeline")
    if len(instances) > MAX_MPS_CLIENTS:
        reasons.append(f"more than {MAX_MPS_CLIENTS} clients: MPS refuses the rest")
    advice = tuple(
        ClientAdvice(
            workload=label, peak_bytes=w.peak_memory_bytes, margin_ratio=w.margin_ratio, need_bytes=limit,
            pinned_limit=pinned_limit(limit),
            active_thread_percentage=thread_percentage(w, sms, len(instances), model),
            start_offset_seconds=None if offsets is None else offsets[i],
            duration_seconds=w.duration_seconds,
        )
        for i, ((label, w), limit) in enumerate(zip(instances, limits))
    )
    known = [w.sms_on(model) for w in workloads if w.compute_known]
    if len(instances) == 1 and known and known[0] > sms:
        reasons.append(f"needs {known[0]} SMs, the device has {sms}: it will run slower than observed")
    elif known and sum(known) > sms:
        reasons.append(f"compute needs add up to {sum(known)} SMs of {sms}: clients will slow each other")
    curve, peak = _curve(timelines, offsets, step) if all(timelines) and timelines else ((), None)
    if verdict == "stagger":
        room = usable - peak
    if room is not None and room < HEADROOM_WARNING * capacity:
        reasons.append(f"tight: {size_text(room)} left at the worst instant (under "
                       f"{HEADROOM_WARNING:.0%} of the device)")
    return MpsAdvice(device, model.key, capacity, sms, advice, verdict, sum(peaks), limits_at_once,
                     safe_concurrency([x + CONTEXT_BYTES for x in limits], usable - 1),
                     peak if verdict == "stagger" else None, curve, tuple(reasons), 1, n_at_once,
                     peak if verdict == "stagger" else worst, room)


def _without_margin(workloads: list[Workload], usable: int, max_offset: float) -> list[str]:
    """The other figure: whether a stagger would fit on bare peaks (no margin), said, never judged on."""
    if all(w.margin_ratio == 0 for w in workloads):
        return []
    bare = [tuple((t, v + CONTEXT_BYTES) for t, v in w.timeline) for w in workloads]
    found = find_stagger(bare, usable - 1, max_offset)
    if found is None:
        return []
    offsets = ", ".join(f"+{o:g}s" for o in found[0])
    return [f"on bare peaks (no margin) starts at {offsets} would fit: the margin MIG slots get too rules "
            "that out here (--margin 0 plans on bare peaks)"]


def limit_mib(w: Workload) -> int:
    """The pinned limit of one client in whole MiB (as CUDA_MPS_PINNED_DEVICE_MEM_LIMIT writes it)."""
    return -(-limit_bytes(w) // MIB)


def dedicated(device: str, model, w: Workload, gpus: int, label: str | None = None) -> MpsAdvice:
    """An entry for a workload too large to share: ``gpus`` whole GPUs, no MPS server, so no limits."""
    client = ClientAdvice(label or w.name, w.peak_memory_bytes, w.margin_ratio, w.memory_need_bytes, None, None,
                          None, w.duration_seconds)
    usable = model.memory_capacity_bytes - SERVER_BYTES - CONTEXT_BYTES
    why = (f"needs {size_text(w.memory_need_bytes)} with its margin, more than one MPS client may take on a "
           f"{model.key} ({size_text(usable)}): {gpus} whole GPU{'s' if gpus != 1 else ''} of its own per instance, "
           "not shared; no MPS server runs there, so no pinned limit or thread percentage applies")
    return MpsAdvice(device, model.key, model.memory_capacity_bytes * gpus, model.sm_count * gpus, (client,),
                     "dedicated", w.peak_memory_bytes, w.memory_need_bytes, 1, None, (), (why,), gpus, 1,
                     w.memory_need_bytes, None)
