"""Values NVML would report, derived from the simulated load. Scenario overrides win.

Rules (each chosen to be simple and monotone in load, not to model silicon):

- Activity of a device (GPU or MIG instance), per pipe: min(1, sum over its alive
  processes). A process without ``graphics_active`` counts its ``sm_active`` there (the
  graphics/compute engine is busy whenever a kernel runs); other missing pipes are 0.
- GPU-level activity under MIG: sum over instances of instance activity x instance SM count,
  divided by the full GPU's SM count (unpartitioned SMs count as idle).
- Utilization (non-MIG only): ``utilization`` override, else min(1, 1.15 x sm_active),
  because a GPU counts as busy whenever any kernel runs, even one that leaves SMs idle.
  Memory utilization = dram_active.
- Power (W): ``power_watts`` override clipped to the limit, else
  idle + (limit - idle) x GPU-level sm_active. Energy is its exact integral (engine).
- Temperature (C): override, else 30 + 45 x power / limit.
- Clocks (MHz): graphics/SM at max while any process runs (90% of max when power is within
  2% of the limit), 17.5% of max when idle; memory always max; video max busy, 30% idle.
- Clock event reasons: GpuIdle when no process runs, SwPowerCap when power >= 98% of the
  limit, plus the scenario's ``clock_event_reasons`` entry in force.
- ECC counts: the scenario timelines (cumulative, = aggregate), default 0; volatile counts
  start again from 0 at each GPU reset.
- PCIe throughput: the scenario's pcie_tx/rx_bytes_per_second timelines, default 0; the PCIe
  byte counters (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES) are their exact integral from t = 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.sim.activity import ActivityRows
from exporter.sim.piecewise import integral, integrate_clipped, slope_after, timeline_value, value_slope
from exporter.sim.state import Proc
from exporter.snapshot import ACTIVITY_FIELDS

if TYPE_CHECKING:
    from exporter.sim.state import DeviceKey, EngineView

UTILIZATION_GAIN = 1.15
POWER_CAP_FRACTION = 0.98


def _process_timeline(p: Proc, pipe: str):
    timeline = p.activity.get(pipe)
    if timeline is None and pipe == "graphics_active":
        timeline = p.activity.get("sm_active")
    return timeline


def process_activity(p: Proc, pipe: str, t: float) -> float:
    """Ratio 0..1 of ``pipe`` that process ``p`` uses at t (0 when not alive)."""
    timeline = _process_timeline(p, pipe)
    return timeline_value(timeline, t) if timeline and p.alive(t) else 0.0


class Telemetry:
    """Read-only views of an Engine; every method takes a virtual time t <= engine.now."""

    def __init__(self, engine: EngineView):
        self.engine = engine
        # Device activity at instants before now, kept while now stays (see _activity_before_now).
        self._past_now: float | None = None
        self._past: dict = {}
        self._rows = ActivityRows(engine)

    def device_activity(self, key: DeviceKey, t: float) -> dict[str, float]:
        """Per-pipe activity ratios of one device (GPU or MIG instance) at t."""
        # A GPM or DCGM average asks this at 32 instants per device: the sums of process_activity
        # over the device's processes, from rows kept while their timelines stay flat
        # (exporter/sim/activity.py), the same floats.
        return self._rows.device_activity(key, t)

    def gpu_activity(self, gpu: int, t: float, device=None) -> dict[str, float]:
        """Per-pipe activity ratios of the whole GPU at t (SM-weighted under MIG). ``device``: what
        reads a device's activity (device_activity unless the caller keeps them)."""
        device = device or self.device_activity
        ep = self.engine.epoch(gpu, t)
        if not ep.mig_enabled:
            return device((gpu, 0), t)
        total_sms = self.engine.models[gpu].sm_count
        result = dict.fromkeys(ACTIVITY_FIELDS, 0.0)
        for inst in ep.instances:
            activity = device((gpu, inst.serial), t)
            for pipe in ACTIVITY_FIELDS:
                result[pipe] += activity[pipe] * inst.profile.sm_count / total_sms
        return result

    def busy(self, gpu: int, t: float) -> bool:
        """True while any process other than an MPS server runs on the GPU."""
        return any(not p.mps_server for p in self.engine.alive(t, gpu=gpu))

    def utilization(self, gpu: int, t: float) -> tuple[float, float]:
        """(GPU utilization, memory utilization) as ratios 0..1 (callers check MIG mode)."""
        activity = self.gpu_activity(gpu, t)
        override = self.engine.gpus[gpu].utilization
        if override is not None:
            util = timeline_value(override, t)
        else:
            util = UTILIZATION_GAIN * activity["sm_active"]
        return min(1.0, max(0.0, util)), activity["dram_active"]

    def power_w(self, gpu: int, t: float) -> float:
        """Board power draw in watts at t."""
        model = self.engine.models[gpu]
        override = self.engine.gpus[gpu].power_watts
        if override is not None:
            return min(model.power_limit_watts, timeline_value(override, t))
        sm = self.gpu_activity(gpu, t)["sm_active"]
        return model.idle_power_watts + (model.power_limit_watts - model.idle_power_watts) * sm

    def energy_between(self, gpu: int, a: float, b: float) -> float:
        """Exact energy in joules over [a, b], which must hold no breakpoint or kill inside."""
        if b <= a:
            return 0.0
        model = self.engine.models[gpu]
        limit, idle = model.power_limit_watts, model.idle_power_watts
        override = self.engine.gpus[gpu].power_watts
        if override is not None:
            return integrate_clipped(timeline_value(override, a), slope_after(override, a),
                                     b - a, cap=limit)
        ep = self.engine.epoch(gpu, a)
        devices = [((gpu, 0), model.sm_count)] if not ep.mig_enabled else [
            ((gpu, inst.serial), inst.profile.sm_count) for inst in ep.instances]
        busy_integral = 0.0
        for key, sms in devices:
            # Called for every GPU at every step of the engine: the processes are alive at a, so
            # process_activity(p, "sm_active", a) is the value of its timeline (0 without one).
            points = [value_slope(tl, a) if tl else None for tl in
                      [p.activity.get("sm_active") for p in self.engine.alive(a, device=key)]]
            level = sum([point[0] if point else 0.0 for point in points])
            slope = sum([point[1] for point in points if point])
            busy_integral += integrate_clipped(level, slope, b - a) * sms / model.sm_count
        return idle * (b - a) + (limit - idle) * busy_integral

    def temperature_c(self, gpu: int, t: float) -> float:
        """GPU core temperature in degrees Celsius at t."""
        override = self.engine.gpus[gpu].temperature_celsius
        if override is not None:
            return timeline_value(override, t)
        return 30.0 + 45.0 * self.power_w(gpu, t) / self.engine.models[gpu].power_limit_watts

    def power_capped(self, gpu: int, t: float) -> bool:
        return self.power_w(gpu, t) >= POWER_CAP_FRACTION * self.engine.models[gpu].power_limit_watts

    def clocks_mhz(self, gpu: int, t: float) -> tuple[int, int, int, int]:
        """(graphics, SM, memory, video) clocks in MHz at t."""
        graphics, sm, memory, video = self.engine.models[gpu].max_clocks_mhz
        if not self.busy(gpu, t):
            return round(graphics * 0.175), round(sm * 0.175), memory, round(video * 0.3)
        if self.power_capped(gpu, t):
            return round(graphics * 0.9), round(sm * 0.9), memory, video
        return graphics, sm, memory, video

    def clock_reasons(self, gpu: int, t: float) -> set[str]:
        """Active clock event reason names (pynvml nvmlClocksEventReason<Name>) at t."""
        reasons = set()
        if not self.busy(gpu, t):
            reasons.add("GpuIdle")
        if self.power_capped(gpu, t):
            reasons.add("SwPowerCap")
        in_force = [names for since, names in self.engine.gpus[gpu].clock_event_reasons if since <= t]
        if in_force:  # scenario files spell them sw_power_cap; pynvml's suffix is SwPowerCap
            reasons.update("".join(w[:1].upper() + w[1:] for w in n.split("_")) for n in in_force[-1])
        return reasons

    def ecc_errors(self, gpu: int, t: float, uncorrected: bool, volatile: bool = False) -> int:
        """ECC error count at t: aggregate (the scenario's cumulative timeline), or volatile
        (since the last GPU reset, when NVML clears the volatile counters)."""
        spec = self.engine.gpus[gpu]
        timeline = spec.ecc_uncorrected if uncorrected else spec.ecc_corrected
        if not timeline:
            return 0
        count = int(round(timeline_value(timeline, t)))
        reset = self.engine.lifecycle.last_reset(gpu, t) if volatile else None
        return count if reset is None else count - int(round(timeline_value(timeline, reset)))

    def pcie_bytes_per_second(self, gpu: int, t: float) -> tuple[float, float]:
        """(TX, RX) PCIe throughput in bytes/s: the scenario's timelines, else 0."""
        spec = self.engine.gpus[gpu]
        return tuple(timeline_value(tl, t) if tl else 0.0
                     for tl in (spec.pcie_tx_bytes_per_second, spec.pcie_rx_bytes_per_second))

    def pcie_bytes(self, gpu: int, t: float) -> tuple[int, int]:
        """(TX, RX) PCIe bytes moved up to t: the integral of the throughput timelines."""
        spec = self.engine.gpus[gpu]
        return tuple(int(integral(tl, t)) if tl else 0
                     for tl in (spec.pcie_tx_bytes_per_second, spec.pcie_rx_bytes_per_second))

    def counter(self, gpu: int, t: float, name: str) -> int:
        """A cumulative health count of the scenario at t (pcie_replays, remapped_rows_*); 0 unset."""
        timeline = getattr(self.engine.gpus[gpu], name)
        return int(round(timeline_value(timeline, t))) if timeline else 0

    def flag(self, gpu: int, t: float, name: str) -> bool:
        """A 0/1 health flag (row_remap_pending, row_remap_failure): the last point at or before t."""
        timeline = getattr(self.engine.gpus[gpu], name)
        if not timeline:
            return False
        current = [v for at, v in timeline if at <= t]
        return bool(current[-1]) if current else False

    def violation_ns(self, gpu: int, t: float, policy: str) -> int:
        """Nanoseconds the clocks were held down by ``policy`` ("power", "thermal") up to t;
        0 for the other policies and when the scenario sets none."""
        timeline = getattr(self.engine.gpus[gpu], f"{policy}_violation_seconds", None)
        return int(round(timeline_value(timeline, t) * 1e9)) if timeline else 0

    def mean_activity(self, key: DeviceKey | None, gpu: int, t1: float, t2: float) -> dict[str, float]:
        """Average activity over [t1, t2] of a device (key) or the GPU (key None), as GPM
        reports between two samples: the mean of 32 midpoint evaluations."""
        lo, hi = min(t1, t2), max(t1, t2)
        if hi == lo:
            return self.gpu_activity(gpu, hi) if key is None else self.device_activity(key, hi)
        points = [lo + (hi - lo) * (k + 0.5) / 32 for k in range(32)]
        past = self._activity_before_now
        if key is not None:
            samples = [past(key, t) for t in points]
        else:
            # The GPU's activity at an instant is a function of its MIG epoch and its devices'
            # activities there: where an instant sees the same objects as an earlier one (the
            # kept sums of the same rows), its GPU activity is that instant's, the same floats.
            samples, seen = [], {}
            for t in points:
                ep = self.engine.epoch(gpu, t)
                parts = (ep, *[past((gpu, inst.serial), t) for inst in ep.instances]) if ep.mig_enabled else (
                    ep, past((gpu, 0), t))
                ident = tuple([id(part) for part in parts])
                got = seen.get(ident)
                if got is None:
                    got = seen[ident] = (parts, self.gpu_activity(gpu, t, past))  # parts held: their ids stay theirs
                samples.append(got[1])
        return {pipe: sum([s[pipe] for s in samples]) / len(samples) for pipe in ACTIVITY_FIELDS}

    def _activity_before_now(self, key: DeviceKey, t: float) -> dict[str, float]:
        """device_activity(key, t), read only (ActivityRows.sums), kept for instants before now
        until now moves.

        A GPU's average and each of its GPU instances' averages over the same window ask the same
        32 instants of the same devices (a DCGM update of a MIG GPU and its instances; GPM next to
        it): each is computed once. The activity at an instant before now never changes: the
        processes, their timelines and the MIG epochs are fixed when the engine is built, and a
        kill happens at now, so it sets killed_at to an instant later than every earlier one. The
        instant now itself is not kept (a kill at now changes it)."""
        now = self.engine.now
        if t >= now:
            return self._rows.sums(key, t)
        if self._past_now != now:
            self._past_now, self._past = now, {}
        past = self._past
        got = past.get((key, t))
        if got is None:
            got = past[(key, t)] = self._rows.sums(key, t)
        return got
