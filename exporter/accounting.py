"""GPU accounting per pod and per namespace: memory byte-seconds, SM-seconds, estimated joules.

Each poll's per-pod shares (exporter.podshare) are integrated over the time since the
previous poll of the same GPU (right rectangles: the shares NVML reports at a poll cover the
interval that ends there). The rules (docs/kubernetes.md, "Accounting"):

- memory byte-seconds += memory bytes x seconds;
- SM-seconds += SM share of the physical GPU x seconds (1 SM-second = every SM of one GPU
  busy for one second);
- energy joules += the GPU's energy over the interval (``nvmlDeviceGetTotalEnergyConsumption``
  difference, else power x seconds) x the pod's SM share. What no pod's share covers (idle
  time, host processes, MPS servers, unknown shares) goes to the GPU's unattributed row
  (namespace "" and pod ""), so a GPU's rows always add up to its energy. The NVML backend
  reads the counter every 10 s and repeats the reading in between (one read costs ~4 ms on an
  H100): polls whose counter has not moved book no energy yet, and the next difference is
  split by each pod's SM share x seconds over all the polls since the last one.

Totals are kept per (GPU, gi, namespace, pod) and per (GPU, namespace). A pod's totals live
on while it has no process on the GPU (its processes come and go: the counter continues) and
are dropped POD_TTL_SECONDS after its last process left; namespace totals are never dropped.
An interval longer than MAX_GAP_SECONDS (the exporter or the GPU was stalled) integrates only
MAX_GAP_SECONDS of memory and SM time, and books its energy as unattributed.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.podshare import UNATTRIBUTED, PodShare, device_shares
from exporter.snapshot import Snapshot

MAX_GAP_SECONDS = 60.0
POD_TTL_SECONDS = 900.0

RowKey = tuple[int, str, "int | None", str, str]  # (gpu index, uuid, gi, namespace, pod)
NamespaceKey = tuple[int, str, str]  # (gpu index, uuid, namespace)


@dataclass
class Totals:
    """Running sums of one row; only ever grow. A sum stays None (its series absent) until a
    value for it is known: a pod on a MIG instance whose SM activity nothing reads (NVML before
    Hopper) has memory byte-seconds but no SM-seconds and no energy, not zeros."""

    memory_byte_seconds: float | None = None
    sm_seconds: float | None = None
    energy_joules: float | None = None

    def add(self, memory: float | None, sm: float | None, energy: float | None) -> None:
        if memory is not None:
            self.memory_byte_seconds = (self.memory_byte_seconds or 0.0) + memory
        if sm is not None:
            self.sm_seconds = (self.sm_seconds or 0.0) + sm
        if energy is not None:
            self.energy_joules = (self.energy_joules or 0.0) + energy


def snapshot_clock(snapshot: Snapshot) -> float:
    """The poll's clock: virtual time in simulation (as foresight uses), else wall time."""
    return snapshot.simulation.clock if snapshot.simulation is not None else snapshot.timestamp


class Accounting:
    """Integrates each new snapshot once (observing the same snapshot again changes nothing)."""

    def __init__(self) -> None:
        self.rows: dict[RowKey, Totals] = {}
        self.namespaces: dict[NamespaceKey, Totals] = {}
        self.shares: tuple[PodShare, ...] = ()  # the latest poll's rows
        self._last_seen: dict[RowKey, float] = {}
        self._clock: dict[str, float] = {}  # GPU uuid -> clock of its last good poll
        self._energy: dict[str, float] = {}  # GPU uuid -> its energy counter then
        # GPU uuid -> (seconds, {row: SM share x seconds}) since the counter last moved
        self._pending: dict[str, tuple[float, dict[RowKey, float]]] = {}
        self._observed: Snapshot | None = None
        self.pod_gpus: set[str] = set()  # GPUs on which a pod has ever been seen or allocated

    def observe(self, snapshot: Snapshot) -> None:
        if snapshot is self._observed:
            return
        self._observed = snapshot
        now = snapshot_clock(snapshot)
        self.pod_gpus.update(d.uuid for d in snapshot.pod_devices)
        shares: list[PodShare] = []
        for gpu in snapshot.gpus:
            rows = device_shares(gpu, snapshot.pod_devices)
            if not rows:
                continue  # a GPU that is down keeps its clock: the gap is handled when it is back
            shares.extend(rows)
            if any(r.pod for r in rows):  # r.attributed, without a property call per row
                self.pod_gpus.add(gpu.uuid)
            self._integrate(gpu, rows, now)
        self.shares = tuple(shares)
        self._expire(now)

    def _integrate(self, gpu, rows: list[PodShare], now: float) -> None:
        previous = self._clock.get(gpu.uuid)
        self._clock[gpu.uuid] = now
        elapsed = 0.0 if previous is None else max(0.0, now - previous)
        span = min(elapsed, MAX_GAP_SECONDS)
        energy = self._energy_delta(gpu, span)
        total_share = sum(r.sm_share or 0.0 for r in rows if r.pod)  # the attributed rows'
        scale = 1.0 / total_share if total_share > 1.0 else 1.0  # rounding in MIG activities
        split = energy is not None and elapsed <= MAX_GAP_SECONDS
        seconds, weights = self._pending.pop(gpu.uuid, (0.0, {}))
        if not split:
            seconds, weights = 0.0, {}  # a gap or an unknown counter: the window starts again
        this_poll = {}
        last_seen, add = self._last_seen, self._add
        for row in rows:
            key = (row.gpu, row.uuid, row.gi, row.namespace, row.pod)
            last_seen[key] = now
            sm_share = row.sm_share
            # A pod's energy follows its SM share: unknown share, unknown energy (not 0).
            row_energy = None if row.pod and sm_share is None else 0.0
            if split and row.pod and sm_share is not None:
                this_poll[key] = sm_share * scale
                weights[key] = weights.get(key, 0.0) + sm_share * scale * span
            add(key, None if row.memory_bytes is None else row.memory_bytes * span,
                None if sm_share is None else sm_share * span, row_energy)
        pods_energy = 0.0
        if split and energy == 0.0:  # the counter has not moved (read every 10 s): book later
            self._pending[gpu.uuid] = (seconds + span, weights)
        elif split:
            seconds += span
            shares = {k: w / seconds for k, w in weights.items()} if seconds > 0 else this_poll
            for key, share in shares.items():
                self._add(key, None, None, energy * share)
                pods_energy += energy * share
        if energy is not None:
            rest = (gpu.index, gpu.uuid, None) + UNATTRIBUTED
            self._last_seen[rest] = now
            self._add(rest, None, None, max(0.0, energy - pods_energy))

    def _energy_delta(self, gpu, span: float) -> float | None:
        """Joules the GPU used since its last poll; None when unknown (first poll, counter reset)."""
        if gpu.energy_joules is not None:
            previous = self._energy.get(gpu.uuid)
            self._energy[gpu.uuid] = gpu.energy_joules
            if previous is None or gpu.energy_joules < previous:
                return None
            return gpu.energy_joules - previous
        if gpu.power_watts is not None and span > 0:
            return gpu.power_watts * span
        return None

    def _add(self, key: RowKey, memory: float, sm: float, energy: float) -> None:
        totals = self.rows.get(key)
        if totals is None:
            totals = self.rows[key] = Totals()
        totals.add(memory, sm, energy)
        namespace_key = (key[0], key[1], key[3])
        ns_totals = self.namespaces.get(namespace_key)
        if ns_totals is None:
            ns_totals = self.namespaces[namespace_key] = Totals()
        ns_totals.add(memory, sm, energy)

    def _expire(self, now: float) -> None:
        for key in [k for k, seen in self._last_seen.items() if now - seen > POD_TTL_SECONDS]:
            del self._last_seen[key]
            self.rows.pop(key, None)
