"""The fields the simulated host engine serves, and where each value comes from.

Values come from the simulation engine and its telemetry: the same numbers the fake NVML
reports for the same instant, rounded as NVML rounds them (DCGM reads NVML), so a DCGM and
an NVML exporter on one scenario agree. Profiling fields (1001-1008) are the mean activity
over the update window, exactly as the fake GPM computes it between two samples.

Each field has the lowest entity level it is defined for (shared/reference/dcgm_k8s_facts.md
§A6) and the NVML symbol DCGM reads it with: a scenario fault on that symbol (or "*") for
the GPU makes DCGM's value fail too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from exporter.sim.telemetry import Telemetry

GLOBAL, GPU, GI = "global", "gpu", "gi"  # entity levels, coarse to fine

# Profiling field -> telemetry activity pipe.
PROFILING = {1001: "graphics_active", 1002: "sm_active", 1003: "sm_occupancy", 1004: "tensor_active",
             1005: "dram_active", 1006: "fp64_active", 1007: "fp32_active", 1008: "fp16_active"}
# Architectures whose GPUs have the profiling (DCP) metrics: datacenter Volta and newer.
PROFILING_ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")


@dataclass(frozen=True)
class FieldDef:
    id: int
    type: str  # DCGM_FT_* letter: "i" int64, "d" double, "s" string
    level: str  # lowest entity level the field exists for: GLOBAL, GPU or GI
    nvml: str | None  # NVML symbol DCGM reads it with (faults on it blank the value)
    read: Callable | None  # (sim, gpu index, instance or None, t) -> value, or None if not supported


def _clock(index: int):
    return lambda sim, gpu, inst, t: sim.engine.telemetry.clocks_mhz(gpu, t)[index]


def _util(pick: int):
    def read(sim, gpu, inst, t):
        if sim.engine.epoch(gpu, t).mig_enabled:
            return None  # GPU utilization is N/A while MIG is on
        return round(100 * sim.engine.telemetry.utilization(gpu, t)[pick])
    return read


def _reasons(sim, gpu, inst, t):
    import pynvml  # the bit values are NVML's (DCGM_CLOCKS_EVENT_REASON_* equal them)

    mask = 0
    for name in sim.engine.telemetry.clock_reasons(gpu, t):
        mask |= getattr(pynvml, "nvmlClocksEventReason" + name, 0)
    return mask


def _last_xid(sim, gpu, inst, t):
    seen = [x.xid for x in sim.engine.xids if x.gpu == gpu and x.at <= t]
    return seen[-1] if seen else None  # blank when none (DCGM 4.5+)


def _remap(index: int):
    """Row-remapper field: (correctable, uncorrectable, pending, failure)[index]; blank where NVML
    says NotSupported (no row remapper, or MIG with instances)."""
    def read(sim, gpu, inst, t):
        from exporter.sim.fakelib_health import model_has_row_remapper  # the fake NVML's rule

        epoch = sim.engine.epoch(gpu, t)
        if not model_has_row_remapper(sim.engine.models[gpu]) or (epoch.mig_enabled and epoch.instances):
            return None
        tel = _telemetry(sim)
        return (tel.counter(gpu, t, "remapped_rows_correctable"), tel.counter(gpu, t, "remapped_rows_uncorrectable"),
                int(tel.flag(gpu, t, "row_remap_pending")), int(tel.flag(gpu, t, "row_remap_failure")))[index]
    return read


def _retired(sim, gpu, inst, t):
    """Retired pages (any cause) and pending: 0 on Volta/Turing, blank on Ampere and newer."""
    return 0 if sim.engine.models[gpu].architecture in ("volta", "turing") else None


def _memory_temp(sim, gpu, inst, t):
    """As the fake NVML's NVML_FI_DEV_MEMORY_TEMP: HBM boards only."""
    if not sim.engine.models[gpu].temperature_limits_c[3]:
        return None
    return round(_telemetry(sim).temperature_c(gpu, t)) + 8


def _media(sim, gpu, inst, t):
    """Encoder / decoder utilization %: 0, blank while MIG is enabled (as the fake NVML)."""
    return None if sim.engine.epoch(gpu, t).mig_enabled else 0


def _violation(policy: str | None):
    return lambda sim, gpu, inst, t: _telemetry(sim).violation_ns(gpu, t, policy) if policy else 0


def _uuid(sim, gpu, inst, t):
    return inst.uuid if inst is not None else sim.engine.gpus[gpu].uuid


def _telemetry(sim) -> Telemetry:
    return sim.engine.telemetry


FIELDS: dict[int, FieldDef] = {f.id: f for f in (
    FieldDef(1, "s", GLOBAL, None, lambda sim, gpu, inst, t: sim.engine.scenario.driver_version),
    FieldDef(50, "s", GPU, "nvmlDeviceGetName",
             lambda sim, gpu, inst, t: sim.engine.gpus[gpu].product_name or sim.engine.models[gpu].nvml_name),
    FieldDef(52, "i", GPU, None, lambda sim, gpu, inst, t: gpu),
    FieldDef(54, "s", GI, "nvmlDeviceGetUUID", _uuid),
    FieldDef(57, "s", GPU, "nvmlDeviceGetPciInfo", lambda sim, gpu, inst, t: sim.engine.gpus[gpu].pci_bus_id),
    FieldDef(67, "i", GPU, "nvmlDeviceGetMigMode", lambda sim, gpu, inst, t: int(sim.engine.epoch(gpu, t).mig_enabled)),
    FieldDef(94, "i", GPU, "nvmlGpmQueryDeviceSupport",
             lambda sim, gpu, inst, t: int(sim.engine.models[gpu].gpm_supported)),
    FieldDef(100, "i", GPU, "nvmlDeviceGetClockInfo", _clock(1)),
    FieldDef(101, "i", GPU, "nvmlDeviceGetClockInfo", _clock(2)),
    FieldDef(102, "i", GPU, "nvmlDeviceGetClockInfo", _clock(3)),
    FieldDef(112, "i", GPU, "nvmlDeviceGetCurrentClocksEventReasons", _reasons),
    FieldDef(150, "i", GPU, "nvmlDeviceGetTemperature",
             lambda sim, gpu, inst, t: round(_telemetry(sim).temperature_c(gpu, t))),
    # NVML reports milliwatts; DCGM divides by 1000.
    FieldDef(155, "d", GPU, "nvmlDeviceGetPowerUsage",
             lambda sim, gpu, inst, t: round(1000 * _telemetry(sim).power_w(gpu, t)) / 1000.0),
    FieldDef(156, "i", GPU, "nvmlDeviceGetTotalEnergyConsumption",
             lambda sim, gpu, inst, t: int(sim.engine.energy_j[gpu] * 1000)),
    FieldDef(164, "d", GPU, "nvmlDeviceGetEnforcedPowerLimit",
             lambda sim, gpu, inst, t: round(1000 * sim.engine.models[gpu].power_limit_watts) / 1000.0),
    FieldDef(203, "i", GPU, "nvmlDeviceGetUtilizationRates", _util(0)),
    FieldDef(204, "i", GPU, "nvmlDeviceGetUtilizationRates", _util(1)),
    FieldDef(230, "i", GI, None, _last_xid),
    # Health fields (issue 21): the same truth the fake NVML serves.
    FieldDef(140, "i", GPU, "nvmlDeviceGetFieldValues", _memory_temp),
    FieldDef(202, "i", GPU, "nvmlDeviceGetPcieReplayCounter",
             lambda sim, gpu, inst, t: _telemetry(sim).counter(gpu, t, "pcie_replays")),
    FieldDef(206, "i", GPU, "nvmlDeviceGetEncoderUtilization", _media),
    FieldDef(207, "i", GPU, "nvmlDeviceGetDecoderUtilization", _media),
    # Violation time in ns (dcgm_fields.py: "Power Violation time in nsec", ...).
    *(FieldDef(fid, "i", GPU, "nvmlDeviceGetViolationStatus", _violation(policy))
      for fid, policy in ((240, "power"), (241, "thermal"), (242, None), (243, None), (244, None), (245, None))),
    FieldDef(390, "i", GPU, "nvmlDeviceGetRetiredPages", _retired),
    FieldDef(391, "i", GPU, "nvmlDeviceGetRetiredPages", _retired),
    FieldDef(392, "i", GPU, "nvmlDeviceGetRetiredPagesPendingStatus", _retired),
    *(FieldDef(fid, "i", GPU, "nvmlDeviceGetRemappedRows", _remap(i))
      for fid, i in ((394, 0), (393, 1), (396, 2), (395, 3))),
    FieldDef(310, "i", GPU, "nvmlDeviceGetTotalEccErrors",
             lambda sim, gpu, inst, t: _telemetry(sim).ecc_errors(gpu, t, uncorrected=False)),
    FieldDef(311, "i", GPU, "nvmlDeviceGetTotalEccErrors",
             lambda sim, gpu, inst, t: _telemetry(sim).ecc_errors(gpu, t, uncorrected=True)),
    *(FieldDef(fid, "d", GI, None, None) for fid in PROFILING),
)}


def profiling_window(sim, gpu: int, inst, t1: float, t2: float) -> dict[int, float]:
    """Profiling field id -> mean ratio over [t1, t2] for the GPU (inst None) or a GPU instance."""
    key = None if inst is None else (gpu, inst.serial)
    mean = sim.engine.telemetry.mean_activity(key, gpu, t1, t2)
    return {fid: min(1.0, max(0.0, mean[pipe])) for fid, pipe in PROFILING.items()}


def profiling_supported(sim, gpu: int, unsupported: frozenset) -> tuple[int, ...]:
    """Profiling field ids GPU ``gpu`` has (none on architectures without DCP metrics)."""
    if sim.engine.models[gpu].architecture not in PROFILING_ARCHITECTURES:
        return ()
    return tuple(fid for fid in PROFILING if (gpu, fid) not in unsupported)
