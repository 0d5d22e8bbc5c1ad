"""MIG layouts of each simulated GPU over virtual time, with the ids NVML would report.

A GPU's layout only changes at ``mig_reconfigure`` events, which are known in advance, so
the whole history is computed once: a list of *epochs* per GPU, each the layout in force on
[start, end). Identity rules (documented in nvml_facts.md §2.4, chosen to match real output):

- GPU-instance id follows the slot tree of the memory slices. 8 slices: 7g -> 0; size-4 at
  start 4 -> 1, at 0 -> 2; size-2 at 0,2,4,6 -> 3..6; size-1 at s -> 7+s (the MIG guide's
  A100 example and the H100 1g example). 4 slices (A30): size 4 -> 0; size-2 at 2 -> 1,
  at 0 -> 2; size-1 at s -> 3+s. Compute-instance id is 0 (one CI per GI).
- MIG device index: creation order. On a reconfigure an instance that stays (same profile
  and start) keeps its index, UUID and GI id; destroyed ones leave holes, and new ones take
  the lowest free index, so indices become sparse exactly as on a real GPU.
  ``MigSpec.device_index`` forces an index (sparse on purpose), ``MigSpec.gpu_instance_id``
  a GI id (real drivers also number by creation history).
- A GPU reset destroys every instance: the layout recreated after it is all new (new
  UUIDs), indices allocated afresh. A GPU instance created without its compute instance
  (``MigSpec.compute_instance`` false) holds its slices and GI id but has no MIG device:
  no MIG index (-1), no MIG UUID ("").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from exporter.catalog import GpuModel, MigProfile
from exporter.errors import UserError
from exporter.sim.model import EventSpec, GpuSpec, MigSpec

_UUID_NAMESPACE = uuid.UUID("6f1d1f8e-4a5c-4f34-9d7e-2b8a51c0e0a1")


def gi_id_for(memory_slices: int, size: int, start: int) -> int:
    """GPU-instance id of a placement [start, start+size) on a GPU with ``memory_slices``."""
    if size >= memory_slices:
        return 0
    if size == memory_slices // 2:  # the two halves: upper half first
        return 1 if start else 2
    return memory_slices // size - 1 + start // size


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance (with its single compute instance) during one or more epochs."""

    serial: int  # unique per simulation: encodes MIG/GI/CI handles, detects stale ones
    gpu: int
    profile: MigProfile
    start: int
    gi: int
    mig_index: int
    uuid: str
    mps: bool
    has_ci: bool = True  # False: GPU instance without a compute instance (no MIG device)

    @property
    def ci(self) -> int:
        return 0


@dataclass(frozen=True)
class Epoch:
    """The layout of one GPU on [start, end): ``instances`` in scenario list order."""

    start: float
    end: float
    mig_enabled: bool
    instances: tuple[MigInstance, ...]


class LayoutBuilder:
    """Turns a GPU's initial MIG list plus its reconfigure events into epochs."""

    def __init__(self, where: str):
        self._where = where
        self._next_serial = 1

    def epochs(self, gpu: GpuSpec, model: GpuModel, events: list[EventSpec]) -> list[Epoch]:
        """Epochs of ``gpu``; ``events`` are its mig_reconfigure (and, on a MIG-enabled GPU,
        gpu_reset) events sorted by time."""
        changes = [(float("-inf"), gpu.mig, "")] + [(e.at, e.mig, e.kind) for e in events]
        result: list[Epoch] = []
        previous: tuple[MigInstance, ...] = ()
        for i, (at, specs, why) in enumerate(changes):
            end = changes[i + 1][0] if i + 1 < len(changes) else float("inf")
            place = f"{self._where}: gpus[{gpu.index}]" if i == 0 else (
                f"{self._where}: events[{why} at {at:g}s, gpu {gpu.index}]")
            if specs is not None and not model.mig_capable:
                raise UserError(f"{place}: {model.key} is not MIG-capable")
            if why == "gpu_reset":
                previous = ()  # a reset destroys every instance: nothing is kept
            instances = self._layout(gpu, model, specs or (), previous, place)
            result.append(Epoch(at, end, specs is not None, instances))
            previous = instances
        return result

    def _layout(self, gpu: GpuSpec, model: GpuModel, specs: tuple[MigSpec, ...],
                previous: tuple[MigInstance, ...], place: str) -> tuple[MigInstance, ...]:
        kept = {(m.profile.name, m.start): m for m in previous if m.has_ci}
        forced = [s.device_index for s in specs if s.device_index is not None]
        for index in forced:
            if not 0 <= index < model.max_mig_devices:
                raise UserError(f"{place}: device_index {index} outside 0..{model.max_mig_devices - 1}")
        if len(set(forced)) != len(forced):
            raise UserError(f"{place}: two MIG instances ask for the same device_index")
        used = set(forced)
        chosen: list[int | None] = []
        for spec in specs:  # kept instances keep their index unless another forces it
            old = kept.get((spec.profile, spec.start))
            if not spec.compute_instance:
                chosen.append(-1)  # no compute instance: no MIG device, no index
            elif spec.device_index is not None:
                chosen.append(spec.device_index)
            elif old is not None and old.mig_index not in used:
                chosen.append(old.mig_index)
                used.add(old.mig_index)
            else:
                chosen.append(None)
        instances = []
        seen_gi: set[int] = set()
        for spec, index in zip(specs, chosen):
            if index is None:
                index = min(i for i in range(len(specs) + len(used) + 1) if i not in used)
                used.add(index)
            try:
                profile = model.profile(spec.profile)
            except KeyError as exc:
                raise UserError(f"{place}: {exc.args[0]}") from None
            gi = spec.gpu_instance_id
            if gi is None:
                gi = gi_id_for(model.memory_slices, profile.memory_slices, spec.start)
            if gi in seen_gi:
                raise UserError(f"{place}: two MIG instances overlap at memory slice {spec.start}")
            seen_gi.add(gi)
            old = kept.get((spec.profile, spec.start))
            if old is not None and old.mig_index == index and old.mps == spec.mps and spec.compute_instance:
                instances.append(old)
                continue
            serial, self._next_serial = self._next_serial, self._next_serial + 1
            mig_uuid = "MIG-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{gpu.uuid}/{gi}/0/{serial}"))
            instances.append(MigInstance(serial, gpu.index, profile, spec.start, gi, index,
                                         mig_uuid if spec.compute_instance else "", spec.mps,
                                         spec.compute_instance))
        return tuple(instances)


def epoch_at(epochs: list[Epoch], t: float) -> Epoch:
    """The epoch in force at virtual time t (a reconfigure at t already applies)."""
    for epoch in reversed(epochs):
        if epoch.start <= t:
            return epoch
    return epochs[0]
