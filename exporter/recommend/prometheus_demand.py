"""The Demand a history read by prometheus_input.py / prometheus_fleet.py describes: one workload
per key and device size with its instances alive per step, the shared devices, the basis."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from exporter.recommend import demand_build
from exporter.recommend.demand import DEFAULT_OBSERVED_MARGIN, Basis, Demand, Grid, SharedDevice
from exporter.recommend.observed import Device


def to_demand(fleet, hist, margin, quantile, min_window) -> Demand:
    """The Demand the history read into ``fleet`` describes."""
    margin = DEFAULT_OBSERVED_MARGIN if margin is None else margin
    classes = fleet.classes_by_key()
    naming = demand_build.names(classes)
    per_workload: dict[tuple[str, str, int], list[tuple[Device, dict]]] = defaultdict(list)
    for (node, uuid, gi, key), g in sorted(fleet.groups.items()):
        device = fleet.device(node, uuid, gi)
        if device is not None:
            per_workload[(key, device.model, demand_build.size_class(device.capacity_bytes))].append((device, g))
    workloads = []
    for cls, members in sorted(per_workload.items()):
        key, model, _ = cls
        name = naming[cls]
        counts = fleet.counts.get(cls)
        if counts is None or not counts.max():
            fleet.note(f"{name}: seen only between two looks of the history, left out")
            continue
        largest = max(g["peak"] for _, g in members)
        # The fleet-wide quantile mixes device sizes: for a key on several, its largest instance.
        peak = fleet.quantiles.get(key, largest) if len(classes[key]) == 1 else largest
        workloads.append(demand_build.observed_workload(
            name=name, model=model, counts=np.rint(counts).astype(np.int64), margin=margin, quantile=quantile,
            devices=[d for d, _ in members], oom=fleet.oom, quantile_peak=int(peak),
            max_peak=max(g["peak"] for _, g in members), instances=sum(g["instances"] for _, g in members),
            sms=_sms(fleet, members), tensor=_tensor(fleet, members),
            timeline=fleet.timelines.get(key, (0, None))[1], samples=sum(g["samples"] for _, g in members)))
    shared = []
    for device_key, counts in sorted(fleet.device_counts.items()):
        device = fleet.device(*device_key)
        if device is None or not device.capacity_bytes:
            continue
        size = demand_build.size_class(device.capacity_bytes)
        named = {naming.get((k, device.model, size), k): np.rint(v).astype(np.int64) for k, v in counts.items()}
        together = np.sum(list(named.values()), axis=0)
        shared.append(SharedDevice(
            key=device.key, model=device.model, capacity_bytes=int(device.capacity_bytes),
            sms=int(device.sms or 0), mps=device_key in fleet.mps, workloads=tuple(sorted(named)),
            node=device.node, gpu_index=device.gpu_index, gi=device.gi, counts=named,
            concurrency=int(fleet.together.get(device_key, together.max())),
            together_peak_bytes=int(fleet.device_memory.get(device_key, np.zeros(1)).max()),
            alive=together > 0, oom=device_key in fleet.oom, profile=device.profile))
    basis = Basis(start=hist.end - hist.seconds, end=hist.end, clock="unix",
                  samples=sum(g["samples"] for g in fleet.groups.values()),
                  instances=sum(g["instances"] for g in fleet.groups.values()), nodes=len(fleet.nodes),
                  min_window_seconds=min_window, gaps=tuple(fleet.gap_text),
                  learned_profiles=0)
    return Demand(workloads=tuple(workloads), gpus=tuple(fleet.gpus[k] for k in sorted(fleet.gpus)),
                  shared=tuple(shared), sources=tuple(fleet._sources), notes=tuple(fleet._notes),
                  grid=Grid(tuple(float(t) for t in hist.times), hist.step, "unix"), basis=basis)

def _sms(fleet, members) -> float | None:
    values = []
    for device, g in members:
        sms = device.sms
        if not sms:
            continue
        if g["util"]:
            values.append(float(np.mean(g["util"])) * sms)
            continue
        active = fleet.active.get((device.node, device.uuid, device.gi))
        if active is not None:
            values.append(active * sms / max(1.0, fleet.together.get((device.node, device.uuid, device.gi), 1)))
    return float(np.mean(values)) if values else None

def _tensor(fleet, members) -> float | None:
    values = [fleet.tensor[(d.node, d.uuid, d.gi)] for d, _ in members
              if fleet.together.get((d.node, d.uuid, d.gi), 1) <= 1 and (d.node, d.uuid, d.gi) in fleet.tensor]
    return float(np.mean(values)) if values else None
