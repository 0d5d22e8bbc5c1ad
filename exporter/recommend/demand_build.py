"""Builds an observed Workload the same way for every input (snapshots, --from, Prometheus).

Identity: a workload key (the exporter's) *on devices of one size*: the same command often
sizes itself to its device (a batch size, a memory fraction), so what it used in a 10 GiB MIG
instance says nothing about what it uses on a whole GPU. As the foresight keys its learned
profiles (``<key>@<N>GiB``), instances of one key on devices of different sizes are different
workloads, named ``<key>@<N>GiB``; a key seen on one size only keeps its plain name.

- peak: the ``quantile`` (nearest rank) of the instances' peaks; a learned profile's peak (from
  --state-dir, or the exporter's expected peak) raises it, never lowers it;
- margin: on top of the peak, but capped at the smallest device the workload ran on without
  an OOM kill: it ran there, so a plan that fits it there is not worse than today;
- count: the most instances alive at once (the largest value of ``counts``).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from exporter.recommend.demand import Workload, upper_quantile

MAX_LOCATIONS = 3  # devices named in a workload's location; the rest are counted
GIB = 2**30


def size_class(capacity_bytes: int | None) -> int:
    """The device size a workload is learned and planned per: its memory in whole GiB."""
    return round(capacity_bytes / GIB) if capacity_bytes else 0


def names(classes: dict[str, set[tuple[str, int]]]) -> dict[tuple[str, str, int], str]:
    """(key, model, size) -> workload name: the key, plus ``@<N>GiB`` when the key ran on devices
    of several sizes, plus `` [<model>]`` when it ran on several GPU models."""
    out = {}
    for key, seen in classes.items():
        models = {m for m, _ in seen}
        for model, size in seen:
            sizes = {s for m, s in seen if m == model}
            name = key + (f"@{size}GiB" if len(sizes) > 1 else "") + (f" [{model}]" if len(models) > 1 else "")
            out[(key, model, size)] = name
    return out


def observed_workload(*, name: str, model: str, counts: np.ndarray | None, margin: float, quantile: float,
                      devices: Iterable, oom: set, peaks: list[int] | None = None,
                      quantile_peak: int | None = None, max_peak: int | None = None,
                      instances: int | None = None, learned_peak: int = 0, sms: float | None = None,
                      tensor: float | None = None, timeline=None, samples: int | None = None) -> Workload:
    """A Workload from instance peaks (or their quantile and maximum computed elsewhere)."""
    if peaks is not None:
        quantile_peak, max_peak, instances = int(upper_quantile(peaks, quantile)), max(peaks), len(peaks)
    peak = int(quantile_peak or 0)
    sized_by = f"observed peak (q{quantile:g} of {instances} instance{'s' if instances != 1 else ''})"
    if learned_peak > peak:
        peak, sized_by = int(learned_peak), sized_by + ", raised to its learned profile"
    top = max((v for _, v in timeline), default=0) if timeline else 0
    if timeline and 0 < top < peak:  # one run's shape, at the size planned for every run
        timeline = tuple((t, int(round(v * peak / top))) for t, v in timeline)
    devices = list(devices)
    safe = [d.capacity_bytes for d in devices
            if d.capacity_bytes and (d.node, d.uuid, d.gi) not in oom]
    keys = sorted({d.key for d in devices})
    location = ", ".join(keys[:MAX_LOCATIONS]) + (f" and {len(keys) - MAX_LOCATIONS} more"
                                                   if len(keys) > MAX_LOCATIONS else "")
    count = int(counts.max()) if counts is not None and len(counts) else 1
    return Workload(
        name=name, peak_memory_bytes=peak, margin_ratio=margin, count=max(count, 1), counts=counts,
        compute_sms=sms, tensor_ratio=tensor, timeline=timeline, gpu_model=model, location=location,
        sized_by=sized_by, memory_cap_bytes=min(safe) if safe else None, max_peak_bytes=max_peak,
        instances=instances, samples=samples,
        gpus_seen=tuple(sorted({(d.node, d.gpu_index) for d in devices})),
        slots_seen=tuple(sorted({(d.profile or "full").removesuffix("+me") for d in devices})),
    )
