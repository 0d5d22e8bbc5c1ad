"""Reads one physical GPU into a GpuInfo (receives the NvmlCaller; never imports pynvml).

A GpuReader lives as long as the backend and keeps what does not change between polls:
the handle, identity, supported clock-event reasons, MIG profile table, GPM samples,
XID event set and per-process metadata. Only one thread reads a given GPU at a time.
"""

from __future__ import annotations

import logging
import time

from exporter.backend.nvml_events import XidReader
from exporter.backend.nvml_gpm import GpmReader
from exporter.backend.nvml_health import HealthReader
from exporter.backend.nvml_mig import MigReader
from exporter.backend.nvml_procs import ProcessReader, sharing_mode
from exporter.backend.nvml_types import (
    NA, SECTIONS, DeviceTag, NvmlCallError, PollContext, Supplied, device_tag, field_of, frozen_maker, ok,
)
from exporter.backend.procinfo import ProcFs, device_ref
from exporter.identity import Identifier
from exporter.snapshot import DeviceHealth, GpuInfo

log = logging.getLogger(__name__)

_gpu_info = frozen_maker(GpuInfo)  # 30 fields: built without one object.__setattr__ per field

# Snapshot clock key -> pynvml clock type constant name.
CLOCKS = (("graphics", "NVML_CLOCK_GRAPHICS"), ("sm", "NVML_CLOCK_SM"),
          ("memory", "NVML_CLOCK_MEM"), ("video", "NVML_CLOCK_VIDEO"))

# Exported reason name -> pynvml bit constant suffix (nvmlClocksEventReason<suffix>).
CLOCK_EVENT_REASONS = (
    ("gpu_idle", "GpuIdle"),
    ("applications_clocks_setting", "ApplicationsClocksSetting"),
    ("sw_power_cap", "SwPowerCap"),
    ("hw_slowdown", "HwSlowdown"),
    ("sync_boost", "SyncBoost"),
    ("sw_thermal_slowdown", "SwThermalSlowdown"),
    ("hw_thermal_slowdown", "HwThermalSlowdown"),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown"),
    ("display_clock_setting", "DisplayClockSetting"),
)

# NVML_COMPUTEMODE_* value -> exported name; 1 (EXCLUSIVE_THREAD) was removed from NVML.
COMPUTE_MODES = {0: "default", 2: "prohibited", 3: "exclusive_process"}

# Current / supported reason getters, newest name first (the "Throttle" names predate R535).
_REASON_CALLS = (("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetSupportedClocksEventReasons"),
                 ("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetSupportedClocksThrottleReasons"))


def _mw_to_w(value):
    """Milliwatts (NVML power) or millijoules (NVML energy) -> watts / joules."""
    return None if value is None else value / 1000.0


# Seconds between reads of the energy counter (see GpuReader._energy_joules).
ENERGY_READ_SECONDS = 10.0

class GpuReader:
    """All state and logic to read physical GPU ``index``."""

    def __init__(self, caller, index: int, procfs: ProcFs, identifier: Identifier | None = None,
                 clock=time.time):
        """``clock``: Unix seconds now (the simulated host's clock in simulation), stamps XIDs."""
        self.caller = caller
        self.nv = caller.nv
        self.index = index
        self.handle = None
        self.name = ""
        self.uuid = ""
        self.pci_bus_id = ""
        self._identity_read = False
        self._reason_calls: tuple[str, str] | None = None
        self._supported_reasons: int | None = None
        # (reason, bit) for the reasons this pynvml names, looked up once rather than every poll.
        self._reason_bits = tuple((name, getattr(self.nv, "nvmlClocksEventReason" + suffix, 0))
                                  for name, suffix in CLOCK_EVENT_REASONS)
        self._clock_types = tuple((key, getattr(self.nv, const)) for key, const in CLOCKS)
        self._sharing = "idle"  # last sharing mode computed from a complete process list
        self._last_unexpected: str | None = None  # the last unexpected read error logged
        self.mig = MigReader(caller)
        self.procs = ProcessReader(caller, procfs, identifier)
        self.gpm = GpmReader(caller)
        self.xid = XidReader(caller, clock)
        self._clock = clock
        self._energy_read: tuple[float, float | None] | None = None  # (clock then, joules)
        self.health = HealthReader(caller, clock)
        # Values another source (the DCGM backend) supplies for this GPU this poll, so they are
        # not read twice: "utilization", "power", "power_limit", "energy", "temperature",
        # "clock:<sm|memory|video>", "ecc", "activity" (GPM of the GPU), "mig_activity" (GPM of
        # its GPU instances), "health" (see exporter.backend.nvml_health.HealthReader.read). Set
        # by the owner before each read; empty for the NVML backend.
        self.provided: frozenset[str] = frozenset()
        # What that source supplies for this GPU this poll, put into the GpuInfo as it is built
        # (Supplied; None: nothing, the NVML backend). ``filled``: the last GpuInfo built with
        # it, so the owner can tell a GPU that already holds its values from one that does not
        # (a GPU down or timed out is built without them).
        self.supplied: Supplied | None = None
        self.filled: GpuInfo | None = None

    # -- public -------------------------------------------------------------------------

    def read(self) -> tuple[GpuInfo, set[str]]:
        """One poll of this GPU: (info, failed sections). Never raises."""
        ctx = PollContext(self.caller, device_tag(self.name, self.uuid))
        try:
            info = self._read(ctx)
            if ctx.answers == 0 and ctx.failures:
                # Every call failed (e.g. Unknown from all of them): nothing was read.
                return self.down(ctx.first_error), set(SECTIONS)
            return info, ctx.failed
        except NvmlCallError as exc:  # GPU lost, or its handle/identity unreadable
            # Logged once when the GPU goes down and once when it is back (exporter.transitions).
            log.debug("GPU %d reported down: %s", self.index, exc)
            self._forget_handle()
            return self.down(exc.error), set(SECTIONS)
        except Exception as exc:  # a bug or a driver returning garbage must not kill the poll
            message = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            if message != self._last_unexpected:  # one line per distinct error, not per poll
                log.warning("GPU %d: unexpected error while reading: %s", self.index, message)
                self._last_unexpected = message
            log.debug("GPU %d read traceback", self.index, exc_info=exc)
            self._forget_handle()
            return self.down(type(exc).__name__), set(SECTIONS)

    def down(self, error: str) -> GpuInfo:
        """GpuInfo for a GPU that could not be read, labelled with the last known identity."""
        return GpuInfo(index=self.index, uuid=self.uuid, name=self.name, pci_bus_id=self.pci_bus_id,
                       up=False, error=error, xid_errors=self.xid.counts, health=self._xid_health())

    def adopt(self, previous: dict[str, "GpuReader"], same_index: "GpuReader | None" = None) -> None:
        """Carry identity and XID counts from the reader that read this GPU before NVML
        enumerated again: matched by UUID (the identity that survives a renumbering), or,
        when this GPU cannot answer (lost) and the enumeration order did not change, by
        index (``same_index``), so a lost GPU keeps its labels."""
        before = None
        try:
            handle = self.caller.call("nvmlDeviceGetHandleByIndex", self.index)
            uuid = self.caller.call("nvmlDeviceGetUUID", handle) if ok(handle) else None
            before = previous.get(uuid) if isinstance(uuid, str) else None
        except NvmlCallError:  # counted; the first read will find out again
            before = same_index
        if before is not None:
            self.xid.counts, self.xid.last = before.xid.counts, before.xid.last
            self.name, self.uuid, self.pci_bus_id = before.name, before.uuid, before.pci_bus_id

    def close(self) -> None:
        """Release GPM samples and the XID event set."""
        self.gpm.close()
        self.xid.close()

    # -- steps --------------------------------------------------------------------------

    def _forget_handle(self) -> None:
        # A lost or reset GPU may come back with a new handle: fetch it (and re-check the
        # identity) on the next poll. Resources tied to the old handle are released.
        self.handle = None
        self._identity_read = False
        self.xid.close()
        self.health.reset()

    def _must(self, fn: str, *args):
        value = self.caller.call(fn, *args)
        if not ok(value):
            raise NvmlCallError(fn, "NotAvailable")
        return value

    def _ensure_handle(self) -> None:
        if self.handle is None:
            self.handle = self._must("nvmlDeviceGetHandleByIndex", self.index)
        if not self._identity_read:
            self.name = self._must("nvmlDeviceGetName", self.handle)
            self.uuid = self._must("nvmlDeviceGetUUID", self.handle)
            pci = self.caller.call("nvmlDeviceGetPciInfo", self.handle, gpu=DeviceTag(self.name))
            if ok(pci):
                bus_id = pci.busId or pci.busIdLegacy
                self.pci_bus_id = bus_id.decode("ascii", "replace") if isinstance(bus_id, bytes) else str(bus_id)
            self._identity_read = True

    def _read(self, ctx: PollContext) -> GpuInfo:
        self._ensure_handle()
        h = self.handle
        ctx.tag = device_tag(self.name, self.uuid)
        # XIDs first: when the GPU falls off the bus the XID is the one thing worth having.
        xid_errors = self.xid.drain(ctx, h)
        mode = ctx.get("gpu", "nvmlDeviceGetMigMode", h)
        mig_mode = None if mode is None else mode[0] == self.nv.NVML_DEVICE_MIG_ENABLE
        ctx.tag = device_tag(self.name, self.uuid, mig_mode)
        total, used, free, reserved = ctx.memory("gpu", h)
        values = dict(
            index=self.index, uuid=self.uuid, name=self.name, pci_bus_id=self.pci_bus_id, up=True,
            mig_mode=mig_mode, xid_errors=xid_errors,
            memory_total_bytes=total, memory_used_bytes=used, memory_free_bytes=free,
            memory_reserved_bytes=reserved,
        )
        values.update(self._sensors(ctx, h, mig_mode))
        provided = self.provided
        if "activity" in provided and "mig_activity" in provided:
            self.gpm.close()  # another source measures activity: stale GPM samples must not linger
        if not mig_mode:
            util = None if "utilization" in provided else ctx.get("gpu", "nvmlDeviceGetUtilizationRates", h)
            if util is not None:
                values["utilization_ratio"] = field_of(util, "gpu") / 100.0
                values["memory_utilization_ratio"] = field_of(util, "memory") / 100.0
            mode_value = ctx.get("gpu", "nvmlDeviceGetComputeMode", h)  # needs a MIG handle under MIG
            values["compute_mode"] = COMPUTE_MODES.get(mode_value, "unknown")
        self.procs.begin_poll()
        supplied = self.supplied
        if mig_mode:
            gpm = None if "mig_activity" in provided else self.gpm
            if supplied is not None and supplied.mig_activity is not None:
                gpm = supplied.mig_activity  # each GPU instance's activity from the other source
            instances, processes, servers, capacity = self.mig.read(ctx, h, self.index, self.uuid, self.procs, gpm)
            values.update(mig_instances=tuple(instances), mig_free_capacity=capacity)
        else:
            self.mig.disabled()
            self.gpm.prune_gpu_instances(set())
            processes, servers = self.procs.read(ctx, h, device_ref(self.index, self.uuid), on_mig=False)
        self.procs.end_poll()
        activity = None if "activity" in provided else self.gpm.gpu(ctx, h)
        if activity is not None:
            values["activity"] = activity
        if "process" in ctx.failed or (servers and "mps" in ctx.failed):
            sharing = self._sharing  # an incomplete process list says nothing about sharing
        else:
            sharing = self._sharing = sharing_mode(mig_mode, processes, servers)
        values.update(processes=tuple(processes), mps_servers=tuple(servers), sharing=sharing)
        self.health.last_xid = self.xid.last
        if supplied is None:
            values["health"] = self.health.read(ctx, h, mig_mode, provided)
            return _gpu_info(**values)
        values["health"] = self.health.read(ctx, h, mig_mode, provided, supplied.health)
        values.update(supplied.values)
        if supplied.clocks is not None:
            values["clocks_hertz"] = {**values["clocks_hertz"], **supplied.clocks}
        info = self.filled = _gpu_info(**values)
        return info

    def _xid_health(self) -> DeviceHealth:
        """A down GPU keeps its last XID (often the reason it went down)."""
        last = self.xid.last
        return DeviceHealth() if last is None else DeviceHealth(last_xid=last[0], last_xid_timestamp=last[1])

    def _energy_joules(self, ctx: PollContext, h) -> float | None:
        """The energy counter (J), read from the GPU at most every ENERGY_READ_SECONDS and the
        last reading given in between: on an H100 (driver 580.159.04) one read costs about 4 ms
        of CPU, however it is asked (its own call or a field value), half of a whole poll's CPU
        (bench/real_gpu_cost.py). A counter up to 10 s old is what rate() over minutes needs;
        DCGM samples it no more often by default."""
        now = self._clock()
        last = self._energy_read
        if last is not None and 0 <= now - last[0] < ENERGY_READ_SECONDS:
            return last[1]
        joules = _mw_to_w(ctx.get("gpu", "nvmlDeviceGetTotalEnergyConsumption", h))
        # A failed read is asked again next poll; the reading before it is too old to give.
        self._energy_read = None if joules is None else (now, joules)
        return joules

    def _sensors(self, ctx: PollContext, h, mig_mode: bool | None) -> dict:
        """Power (W), limit (W), energy (J), temperature (°C), clocks (Hz), reasons, ECC counts."""
        nv = self.nv
        skip = self.provided
        # ctx.get called here, not through a helper closure: a frame less on each of the ~9
        # sensor calls of a GPU (72 a poll on the mixed 8-GPU node); the same calls, in order.
        get = ctx.get
        out: dict = {
            "power_watts": None if "power" in skip else _mw_to_w(get("gpu", "nvmlDeviceGetPowerUsage", h)),
            "power_limit_watts": (None if "power_limit" in skip
                                  else _mw_to_w(get("gpu", "nvmlDeviceGetEnforcedPowerLimit", h))),
            "energy_joules": None if "energy" in skip else self._energy_joules(ctx, h),
        }
        temp = None if "temperature" in skip else get("gpu", "nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
        out["temperature_celsius"] = None if temp is None else float(temp)
        clocks = {}
        for key, clock_type in self._clock_types:
            mhz = None if "clock:" + key in skip else get("gpu", "nvmlDeviceGetClockInfo", h, clock_type)
            if mhz is not None:
                clocks[key] = mhz * 1e6
        out["clocks_hertz"] = clocks
        out["clock_event_reasons"] = self._clock_event_reasons(ctx, h)
        ecc = {}
        for key, const in (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                           ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):
            count = None if "ecc" in skip else get("gpu", "nvmlDeviceGetTotalEccErrors", h, getattr(nv, const),
                                                   nv.NVML_VOLATILE_ECC)
            if count is not None:
                ecc[key] = int(count)
        out["ecc_errors"] = ecc
        return out

    def _clock_event_reasons(self, ctx: PollContext, h) -> dict[str, bool]:
        """reason -> active, for the reasons this GPU supports (all known ones if it cannot say)."""
        current = None
        calls = [self._reason_calls] if self._reason_calls else _REASON_CALLS
        for pair in calls:
            current = ctx.raw("gpu", pair[0], h)
            if current is not NA:
                self._reason_calls = pair
                break
        if not ok(current):
            return {}
        if self._supported_reasons is None:
            supported = ctx.raw("gpu", self._reason_calls[1], h)
            if supported is NA:
                self._supported_reasons = -1  # every bit: the GPU cannot tell which it supports
            elif supported is not None:
                self._supported_reasons = int(supported)
        mask = self._supported_reasons if self._supported_reasons is not None else -1
        return {name: bool(current & bit) for name, bit in self._reason_bits if mask & bit}


__all__ = ["GpuReader", "CLOCK_EVENT_REASONS", "COMPUTE_MODES"]
