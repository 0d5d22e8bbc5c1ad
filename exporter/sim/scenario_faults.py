"""Scenario loader, part 4: the fault model's events (format and meaning: docs/scenarios.md).

``fault`` (one NVML call failing, slow, or failing at random), ``gpu_lost`` / ``gpu_reset``
(a GPU falls off the bus, then a reset brings it back with its counters cleared),
``gpu_removed`` / ``gpu_attached`` (the GPU count changes), ``nvml_init_failure`` and
``driver_mismatch`` (nvmlInit fails: driver not loaded, library upgraded under a running
module), ``mps_server_death`` (the MPS server dies and nothing restarts it). Failed MIG
repartitions are ``mig_reconfigure`` with ``fails_after`` (exporter.sim.scenario_events).
"""

from __future__ import annotations

import re

import pynvml

from exporter.sim.model import EventSpec, FaultSpec, GpuSpec, gpu_model
from exporter.sim.scenario_fields import (
    as_duration, as_int, as_number, as_str, did_you_mean, fail, fmt_time, key,
)

FAULT_KINDS = ("gpu_reset", "gpu_removed", "gpu_attached", "nvml_init_failure", "driver_mismatch",
               "mps_server_death")
# kind -> (allowed keys, required keys)
FAULT_EVENT_KEYS = {
    "fault": (("call", "gpu", "mig", "error", "until", "delay", "probability"), ("call", "error")),
    "gpu_reset": (("gpu", "mig"), ("gpu",)),
    "gpu_removed": (("gpu",), ("gpu",)),
    "gpu_attached": (("gpu",), ("gpu",)),
    "nvml_init_failure": (("error", "until"), ("error",)),
    "driver_mismatch": (("version", "until"), ("version",)),
    "mps_server_death": (("gpu", "mig"), ("gpu",)),
}
# nvmlInit errors a real host gives (pynvml NVMLError_ suffixes).
INIT_ERRORS = ("DriverNotLoaded", "LibRmVersionMismatch", "NoPermission", "Unknown", "GpuIsLost",
               "InsufficientPower", "IrqIssue", "OperatingSystem", "LibraryNotFound", "Timeout")


def error_names() -> list[str]:
    return sorted(n[len("NVMLError_"):] for n in dir(pynvml) if n.startswith("NVMLError_"))


def _error(body: dict, path: str, allowed: tuple[str, ...] | None = None) -> str:
    error = as_str(body["error"], key(path, "error"))
    names = list(allowed) if allowed else ["Success", *error_names()]
    if error not in names:
        fail(key(path, "error"), f"unknown NVML error {error!r}{did_you_mean(error, names)} "
             f"(NVMLError_ suffixes such as {', '.join(names[:4]) if allowed else 'GpuIsLost, Timeout, NotSupported, Unknown'}"
             f"{'' if allowed else ', or Success with a delay'})")
    return error


def _until(body: dict, path: str, at: float) -> float | None:
    if body.get("until") is None:
        return None
    until = as_duration(body["until"], key(path, "until"), origin=at)
    if until <= at:
        fail(key(path, "until"), f"{fmt_time(until)} must be after the event time {fmt_time(at)}")
    return until


def parse_fault(body: dict, path: str, at: float, gpu: GpuSpec | None, known_calls) -> FaultSpec:
    """The body of a ``fault`` event."""
    call = as_str(body["call"], key(path, "call"))
    if call != "*" and call != "nvmlInit" and call not in known_calls:
        fail(key(path, "call"), f"unknown NVML call {call!r}{did_you_mean(call, known_calls)} "
             "(a pynvml function or C symbol, or '*')")
    error = _error(body, path)
    delay = as_duration(body.get("delay", 0), key(path, "delay"))
    if error == "Success" and delay <= 0:
        fail(key(path, "error"), "Success only slows the call down: give it a delay (e.g. delay: 2s)")
    probability = 1.0
    if body.get("probability") is not None:
        probability = as_number(body["probability"], key(path, "probability"))
        if not 0 < probability <= 1:
            fail(key(path, "probability"), f"{probability:g} is outside (0, 1]: the chance that one "
                 "matching call fails")
    mig = None
    if body.get("mig") is not None:
        if gpu is None:
            fail(key(path, "mig"), "a fault on a MIG instance needs the gpu it is on")
        mig = as_int(body["mig"], key(path, "mig"), minimum=0)
    return FaultSpec(call=call, gpu=gpu and gpu.index, error=error, until=_until(body, path, at),
                     delay_seconds=delay, probability=probability, mig=mig)


def parse_fault_event(kind: str, body: dict, path: str, at: float, gpu: GpuSpec | None,
                      history, layout_of) -> EventSpec:
    """One of FAULT_KINDS; ``layout_of(raw, path, model)`` parses a mig list (gpu_reset)."""
    if kind == "gpu_reset":
        layout = None
        if gpu.mig is None:
            if body.get("mig") is not None:
                fail(key(path, "mig"), f"GPU {gpu.index} has MIG disabled (remove mig)")
        else:  # MIG stays enabled across a reset, its instances do not (mig-parted recreates them)
            raw = body.get("mig")
            layout = () if raw is None else layout_of(raw, key(path, "mig"), gpu_model(gpu))
            history.add(gpu.index, at, layout)
        return EventSpec(at=at, kind=kind, gpu=gpu.index, mig=layout)
    if kind in ("gpu_removed", "gpu_attached"):
        return EventSpec(at=at, kind=kind, gpu=gpu.index)
    if kind == "nvml_init_failure":
        error = _error(body, path, INIT_ERRORS)
        return EventSpec(at=at, kind=kind, fault=FaultSpec("nvmlInit", None, error, _until(body, path, at)))
    if kind == "driver_mismatch":
        version = body["version"]
        if not isinstance(version, str) or not re.fullmatch(r"\d+(\.\d+)+", version):
            fail(key(path, "version"), f"must be a quoted version string like \"580.105.08\", got {version!r}")
        until = _until(body, path, at)
        fault = FaultSpec("nvmlInit", None, "LibRmVersionMismatch", until)
        return EventSpec(at=at, kind=kind, fault=fault, version=version, until=until)
    gi = as_int(body["mig"], key(path, "mig"), minimum=0) if body.get("mig") is not None else None
    return EventSpec(at=at, kind=kind, gpu=gpu.index, gi=gi)  # mps_server_death


class PresenceHistory:
    """Which GPUs are on the bus at a given time (``present`` key, gpu_removed/attached)."""

    def __init__(self, gpus: dict[int, GpuSpec]):
        self._changes = {g.index: [(float("-inf"), g.present)] for g in gpus.values()}

    def check_and_add(self, event: EventSpec, path: str) -> None:
        """Record a removal/attachment (events in time order); fail if it cannot happen."""
        present = self.at(event.gpu, event.at)
        if event.kind == "gpu_removed" and not present:
            fail(path, f"GPU {event.gpu} is not on the bus at {fmt_time(event.at)} (already removed)")
        if event.kind == "gpu_attached" and present:
            fail(path, f"GPU {event.gpu} is already on the bus at {fmt_time(event.at)} (set present: "
                 "false on it, or remove it first)")
        self._changes[event.gpu].append((event.at, event.kind == "gpu_attached"))

    def at(self, gpu: int, t: float) -> bool:
        return [present for when, present in self._changes[gpu] if when <= t][-1]


def check_fault_refs(event: EventSpec, path: str, gpus, history, presence: PresenceHistory) -> None:
    """Cross-checks that need every event known, in time order."""
    if event.kind in ("gpu_removed", "gpu_attached"):
        presence.check_and_add(event, path)
        return
    if event.kind in ("gpu_lost", "gpu_reset", "xid", "mps_restart", "mps_server_death") and \
            not presence.at(event.gpu, event.at):
        fail(key(path, "gpu"), f"GPU {event.gpu} is not on the bus at {fmt_time(event.at)}")
    if event.kind == "fault" and event.fault.mig is not None:
        layout = history.at(event.fault.gpu, event.at)
        if layout is None:
            fail(key(path, "mig"), f"GPU {event.fault.gpu} has MIG disabled at {fmt_time(event.at)}")
        if event.fault.mig >= len(layout):
            fail(key(path, "mig"), f"GPU {event.fault.gpu} has {len(layout)} MIG instance(s) at "
                 f"{fmt_time(event.at)}; mig is an index into its mig list")
        if not layout[event.fault.mig].compute_instance:
            fail(key(path, "mig"), "that GPU instance has no compute instance (no MIG device to fail)")
