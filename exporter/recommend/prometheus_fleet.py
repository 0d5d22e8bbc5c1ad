"""Turns the answers of prometheus_input's queries into a Demand (no HTTP here).

Scrape gaps: a node whose gpushare_gpu_info is missing for some steps between two steps
where it reported (exporter down, scrape failures) gets, for each of its workloads, the
larger of its counts just before and just after the gap in every step of the gap (the safe
side: a job seen on both sides ran through it). A node silent at the end of the window is
not filled (it may be gone); the basis lists every gap.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import numpy as np

from exporter import catalog
from exporter.catalog import MIB
from exporter.recommend import demand_build, promql
from exporter.recommend.demand import FleetGpu
from exporter.recommend.observed import Device, held_max

MAX_TIMELINE_DEVICES = 50  # shared devices whose instances' memory timelines are read (stagger advice)
MIN_TIMELINE_POINTS = 3


def _key(m: dict) -> str:
    """The workload of a series: its workload label, or (older exporters) its executable name."""
    return m.get("workload") or m.get("process") or "unknown"


class FleetFromHistory:
    def __init__(self, node_label: str, times):
        self.L, self.times, self.points = node_label, times, len(times)
        self.models: dict[tuple[str, str], tuple[catalog.GpuModel, int]] = {}
        self.gpus: dict[tuple[str, int], FleetGpu] = {}
        self.mig: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
        self.nodes: list[str] = []
        self.groups: dict[tuple, dict] = {}
        self.together: dict[tuple, float] = {}
        self.mps: set[tuple] = set()
        self.active: dict[tuple, float] = {}
        self.tensor: dict[tuple, float] = {}
        self.mig_memory: dict[tuple, float] = {}
        self.oom: set[tuple] = set()
        self.quantiles: dict[str, float] = {}
        self.counts: dict[tuple[str, str, int], np.ndarray] = {}  # (key, model, size) -> alive per step
        self.classes: dict[str, set[tuple[str, int]]] | None = None  # key -> {(model, size)}
        self.key_label: dict[str, str] = {}  # key -> the label it came from (workload, or process)
        self.gaps: dict[str, list[tuple[int, int]]] = {}
        self.gap_text: list[str] = []
        self.device_counts: dict[tuple, dict[str, np.ndarray]] = defaultdict(dict)
        self.device_memory: dict[tuple, np.ndarray] = {}
        self.timelines: dict[str, tuple[int, tuple]] = {}
        self._timeline_budget = MAX_TIMELINE_DEVICES
        self._sources: list[str] = []
        self._notes: dict[str, None] = {}

    def source(self, text: str) -> None:
        self._sources.append(text)

    def note(self, text: str) -> None:
        self._notes[text] = None

    # --- the fleet ---------------------------------------------------------------------------

    def read_gpus(self, now: list, any_: list, mig_now: list, mig_any: list) -> None:
        current = set()
        rows = sorted(any_, key=lambda s: json.dumps(s.get("metric", {}), sort_keys=True))
        for s, is_now in [*((s, False) for s in rows), *((s, True) for s in now)]:
            m = s.get("metric", {})
            node, uuid = m.get(self.L, ""), m.get("uuid", "")
            try:
                index = int(m.get("gpu", ""))
            except ValueError:
                continue
            try:
                model = catalog.resolve_model(m.get("name", ""))
            except KeyError:
                self.note(f"GPU model {m.get('name', '')!r} is not in the catalog: its GPUs and processes are skipped")
                continue
            if is_now:
                current.add((node, uuid))
            self.models[(node, uuid)] = (model, index)
            layout = () if m.get("mig_mode") == "enabled" else None
            self.gpus[(node, index)] = FleetGpu(node, index, model.key, uuid, layout, m.get("sharing", ""))
        for source, rows in ((mig_any, False), (mig_now, True)):
            for s in sorted(source, key=lambda s: json.dumps(s.get("metric", {}), sort_keys=True)):
                m = s.get("metric", {})
                node, uuid = m.get(self.L, ""), m.get("uuid", "")
                if rows or (node, uuid) not in current:
                    self.mig[(node, uuid)][m.get("gi", "")] = m
        for (node, uuid), (model, index) in self.models.items():
            gpu = self.gpus[(node, index)]
            if gpu.layout is not None:
                layout = tuple(sorted((gi["profile"], int(gi.get("placement_start", 0) or 0))
                                      for gi in self.mig[(node, uuid)].values() if gi.get("profile")))
                self.gpus[(node, index)] = FleetGpu(node, index, model.key, uuid, layout, gpu.sharing)
            if (node, uuid) not in current:
                self.note(f"{node} gpu{index}: not reporting at the window's end; planned from what it reported last")
        self.nodes = sorted({node for node, _ in self.models})

    def chunks(self, size: int) -> list[list[str]]:
        """Nodes in chunks of at most ``size``, each chunk's nodes of one set of GPU models."""
        kinds: dict[tuple, list[str]] = defaultdict(list)
        for node in self.nodes:
            kinds[tuple(sorted({m.key for (n, _), (m, _) in self.models.items() if n == node}))].append(node)
        return [nodes[i:i + size] for _, nodes in sorted(kinds.items()) for i in range(0, len(nodes), size)]

    def _class_of(self, node: str, uuid: str, gi: str) -> tuple[str, int] | None:
        device = self.device(node, uuid, gi)
        return None if device is None else (device.model, demand_build.size_class(device.capacity_bytes))

    def classes_by_key(self) -> dict[str, set[tuple[str, int]]]:
        """Per workload key, the (model, device size) classes it ran on (known once every chunk's
        devices are read)."""
        if self.classes is None:
            self.classes = defaultdict(set)
            for node, uuid, gi, key in self.groups:
                cls = self._class_of(node, uuid, gi)
                if cls is not None:
                    self.classes[key].add(cls)
        return self.classes

    def several_classes(self, nodes) -> list[str]:
        """Matchers for the keys in ``nodes`` that ran on devices of several sizes or models: their
        counts are read per device."""
        wanted = set(nodes)
        keys = sorted({key for node, _, _, key in self.groups if node in wanted and len(self.classes_by_key()[key]) > 1})
        by_label = defaultdict(list)
        for key in keys:
            by_label[self.key_label.get(key, "workload")].append(key)
        return [promql.one_of(label, values) for label, values in sorted(by_label.items())]

    # --- per device ------------------------------------------------------------------------

    def read_groups(self, *, peaks, instances, samples, util, together, mps, gpu_active, mig_active,
                    gpu_tensor, mig_tensor, mig_memory, oom) -> None:
        L = self.L

        def rows(series, *labels):
            for s in series:
                m = s.get("metric", {})
                yield m, (m.get(L, ""), *(m.get(x, "") for x in labels)), promql.value(s)

        for m, key, v in rows(peaks, "uuid", "gi"):
            self.key_label.setdefault(_key(m), "workload" if m.get("workload") else "process")
            g = self.groups.setdefault((*key, _key(m)), {"peak": 0, "instances": 0, "samples": 0, "util": []})
            g["peak"] = max(g["peak"], int(v or 0))
        for series, field in ((instances, "instances"), (samples, "samples")):
            for m, key, v in rows(series, "uuid", "gi"):
                if (*key, _key(m)) in self.groups:
                    self.groups[(*key, _key(m))][field] += int(v or 0)
        for m, key, v in rows(util, "uuid", "gi"):
            if (*key, _key(m)) in self.groups and v is not None:
                self.groups[(*key, _key(m))]["util"].append(v)
        for _, key, v in rows(together, "uuid", "gi"):
            self.together[key] = v or 0
        for _, key, _ in rows(mps, "uuid", "gi"):
            self.mps.add(key)
        for series, target, labels in ((gpu_active, self.active, ("uuid",)), (mig_active, self.active, ("uuid", "gi")),
                                       (gpu_tensor, self.tensor, ("uuid",)), (mig_tensor, self.tensor, ("uuid", "gi"))):
            for _, key, v in rows(series, *labels):
                target[key if len(key) == 3 else (*key, "")] = v
        for _, key, v in rows(mig_memory, "uuid", "gi"):
            self.mig_memory[key] = v
        uuid_of = {(g.node, str(g.index)): g.uuid for g in self.gpus.values()}
        for _, (node, gpu, gi), v in rows(oom, "gpu", "gi"):
            if v and v > 0:
                self.oom.add((node, uuid_of.get((node, gpu), ""), gi))

    def read_quantiles(self, series) -> None:
        for s in series:
            v = promql.value(s)
            if v is not None:
                key = _key(s.get("metric", {}))
                self.quantiles[key] = max(self.quantiles.get(key, 0.0), v)

    # --- over time ---------------------------------------------------------------------------

    def _add(self, key: str, cls: tuple[str, int] | None, values) -> None:
        if cls is None:
            return
        target = (key, *cls)
        self.counts[target] = self.counts.get(target, np.zeros(self.points)) + np.nan_to_num(values)

    def read_counts(self, series) -> None:
        """Counts by (workload, process) over a chunk: for keys of one class only."""
        classes = self.classes_by_key()
        for m, values in series:
            seen = classes.get(_key(m), set())
            if len(seen) == 1:
                self._add(_key(m), next(iter(seen)), values)

    def read_device_counts(self, series) -> None:
        """Counts by (node, uuid, gi, workload, process): for keys of several classes."""
        classes = self.classes_by_key()
        for m, values in series:
            if len(classes.get(_key(m), ())) > 1:
                self._add(_key(m), self._class_of(m.get(self.L, ""), m.get("uuid", ""), m.get("gi", "")), values)

    def short_of_samples(self, series, seconds: float, resolution: float) -> list[str]:
        """Nodes whose samples do not fill the history (a gap, or a node that came or went): their
        presence is read step by step."""
        expected = seconds / resolution
        return sorted(s.get("metric", {}).get(self.L, "") for s in series
                      if (promql.value(s) or 0) < 0.97 * expected - 2)

    def read_presence(self, series, nodes) -> list[str]:
        """Nodes with interior gaps (missing steps between two reporting ones)."""
        with_gaps = []
        for m, values in series:
            node = m.get(self.L, "")
            seen = ~np.isnan(values)
            idx = np.flatnonzero(seen)
            if not len(idx):
                continue
            runs, k = [], idx[0]
            while k <= idx[-1]:
                if not seen[k]:
                    end = k
                    while not seen[end]:
                        end += 1
                    runs.append((int(k), int(end)))
                    k = end
                k += 1
            if runs:
                self.gaps[node] = runs
                with_gaps.append(node)
                step = float(self.times[1] - self.times[0]) if self.points > 1 else 0.0
                self.gap_text += [f"{node}: no data for {(e - b) * step:g} s after "
                                  f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.times[b - 1]))}"
                                  for b, e in runs]
        return sorted(with_gaps)

    def fill_gaps(self, series) -> None:
        for m, values in series:
            node = m.get(self.L, "")
            cls = self._class_of(node, m.get("uuid", ""), m.get("gi", ""))
            if cls is None or node not in self.gaps:
                continue
            values = np.nan_to_num(values)
            fill = np.zeros(self.points)
            for b, e in self.gaps[node]:
                fill[b:e] = max(values[b - 1], values[e] if e < self.points else 0)
            self._add(_key(m), cls, fill)

    def shared_uuids(self, nodes) -> list[str]:
        wanted = set(nodes)
        return sorted({uuid for (node, uuid, _), n in self.together.items() if node in wanted and n >= 2})

    def _held(self, node: str, values: np.ndarray) -> np.ndarray:
        """``values`` with the node's gaps held at the larger value on either side."""
        values = np.nan_to_num(values)
        for b, e in self.gaps.get(node, ()):
            values[b:e] = max(values[b - 1], values[e] if e < self.points else 0)
        return values

    def read_shared(self, counts, memory) -> None:
        for m, values in counts:
            device = (m.get(self.L, ""), m.get("uuid", ""), m.get("gi", ""))
            if self.together.get(device, 0) >= 2:
                name = _key(m)
                old = self.device_counts[device].get(name, np.zeros(self.points))
                self.device_counts[device][name] = old + self._held(device[0], values)
        for m, values in memory:
            node = m.get(self.L, "")
            self.device_memory[(node, m.get("uuid", ""), m.get("gi", ""))] = self._held(node, values)

    def timeline_devices(self, nodes) -> list[tuple[str, str, str]]:
        wanted = set(nodes)
        devices = sorted(d for d, n in self.together.items() if d[0] in wanted and n >= 2)
        take = devices[:max(0, self._timeline_budget)]
        self._timeline_budget -= len(take)
        if len(take) < len(devices):
            self.note(f"memory timelines read for the first {MAX_TIMELINE_DEVICES} shared devices only "
                      "(the MPS stagger advice of the others uses peaks)")
        return take

    def read_timelines(self, node, uuid, gi, series, start, end, step) -> None:
        for s in series:
            values = [(float(t), float(v)) for t, v in s.get("values", [])]
            if len(values) < MIN_TIMELINE_POINTS or values[0][0] <= start + step or values[-1][0] >= end - step:
                continue  # started before the window or still running: not a whole life
            t0 = values[0][0]
            points = [(t - t0, int(v)) for t, v in values] + [(values[-1][0] + step - t0, int(values[-1][1]))]
            line = held_max(points)
            key, peak = _key(s.get("metric", {})), max(v for _, v in line)
            best = self.timelines.get(key)
            if best is None or (peak, line[-1][0]) > (best[0], best[1][-1][0]):
                self.timelines[key] = (peak, line)


    def device(self, node, uuid, gi) -> Device | None:
        if (node, uuid) not in self.models:
            return None
        model, index = self.models[(node, uuid)]
        if not gi:
            return Device(node, uuid, "", f"{node} gpu{index}", model.key, index, model.memory_capacity_bytes,
                          model.sm_count)
        inst = self.mig[(node, uuid)].get(gi, {})
        profile = inst.get("profile")
        memory = self.mig_memory.get((node, uuid, gi))
        if memory is None and profile:
            try:
                memory = model.profile(profile).memory_mib * MIB
            except KeyError:
                memory = None
        try:
            sms = int(inst.get("sm_count", 0)) or None
        except ValueError:
            sms = None
        return Device(node, uuid, gi, f"{node} gpu{index} gi{gi}" + (f" ({profile})" if profile else ""),
                      model.key, index, int(memory) if memory else None, sms, profile)
