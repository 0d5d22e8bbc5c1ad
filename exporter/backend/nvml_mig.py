"""MIG instances of one GPU: enumeration, profile table, free capacity (no pynvml import).

Caches, all per physical GPU:
- the GPU-instance profile table (profile id -> name, SMs), read once: it is a property of
  the GPU and driver, not of the current layout;
- gi/ci/profile/placement per MIG device UUID: a UUID is never reused for a new instance,
  so a reconfigured layout shows up as new UUIDs and is read afresh;
- free capacity per profile, re-read only when the set of MIG devices changes (and every
  CAPACITY_REFRESH_POLLS polls, for a GPU instance created without a compute instance);
- the MIG slots (index -> handle, UUID), rescanned every MIG_RESCAN_POLLS polls, at once
  after any MIG call failed, and whenever a kept handle no longer answers with its UUID.
  NVML invalidates a handle whose instance was destroyed and "may reuse" it for a new one,
  so the UUID of every kept handle is still asked each poll: that is how reuse is caught.
  The cost of the cache: an instance created in an empty slot appears up to
  MIG_RESCAN_POLLS polls late.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.backend.nvml_types import (
    DeviceTag,
    PollContext,
    device_tag,
    frozen_maker,
    ok,
)
from exporter.backend.procinfo import device_ref
from exporter.snapshot import MigInstance

_mig_instance = frozen_maker(MigInstance)  # built without one object.__setattr__ per field

# NVML_GPU_INSTANCE_PROFILE_* indices are enumerated until InvalidArgument; this bounds the
# loop should a driver never say InvalidArgument.
MAX_PROFILE_ENUM = 64
CAPACITY_REFRESH_POLLS = 60
MIG_RESCAN_POLLS = 10


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile as NVML describes it."""

    id: int
    name: str  # "3g.40gb" ("MIG " prefix removed)
    sm_count: int
    memory_mib: int
    slice_count: int


@dataclass(frozen=True)
class _Placement:
    gi: int
    ci: int
    profile_id: int | None
    start: int
    size: int


def profile_name(raw) -> str:
    """b"MIG 3g.40gb" -> "3g.40gb" (the struct field stays bytes in pynvml)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    text = text.strip()
    return text[4:] if text.startswith("MIG ") else text


class MigReader:
    """MIG state of one physical GPU, kept between polls."""

    def __init__(self, caller):
        self.caller = caller
        self.profiles: dict[int, Profile] = {}
        self._profiles_complete = False
        self._max_count: int | None = None
        self._by_uuid: dict[str, _Placement] = {}
        self._capacity: dict[str, int] = {}
        self._capacity_key: frozenset | None = None
        self._capacity_age = 0
        self._slots: list[tuple[int, object, str]] | None = None  # (mig index, handle, uuid) kept
        self._slots_age = 0

    def disabled(self) -> None:
        """MIG is off this poll: forget the layout (a later enable starts from scratch)."""
        self._max_count = None
        self._by_uuid.clear()
        self._capacity_key = None
        self._slots = None

    def read(self, ctx: PollContext, parent, gpu_index: int, gpu_uuid: str, procs, gpm):
        """(instances, processes, mps servers, free capacity) of a GPU in MIG mode.

        ``gpm`` None: instance activity comes from elsewhere (DCGM) and is not read here.
        """
        self._read_profiles(ctx, parent)
        mig_tag = device_tag(ctx.tag.model, ctx.tag.uuid, True, True)  # on_mig
        instances, processes, servers = [], [], []
        activity_by_gi: dict[int, object] = {}
        live_gpm_keys = set()
        failures = ctx.failures
        for index, handle, uuid, place in self._devices(ctx, parent, mig_tag):
            profile = self.profiles.get(place.profile_id)
            total, used, free, _ = ctx.memory("mig", handle, tag=mig_tag)
            dev = device_ref(gpu_index, gpu_uuid, uuid, place.gi, place.ci)
            procs_here, servers_here = procs.read(ctx, handle, dev, on_mig=True, tag=mig_tag)
            processes.extend(procs_here)
            servers.extend(servers_here)
            # GPM samples a GPU instance, shared by its compute instances: one sample per GI.
            gpm_key = (place.gi, place.profile_id, place.start)
            live_gpm_keys.add(gpm_key)
            if place.gi not in activity_by_gi:
                activity_by_gi[place.gi] = gpm.gpu_instance(ctx, parent, place.gi, gpm_key) if gpm is not None else None
            extra = {"activity": activity_by_gi[place.gi]} if activity_by_gi[place.gi] is not None else {}
            instances.append(_mig_instance(
                gi=place.gi, ci=place.ci, mig_index=index, mig_uuid=uuid,
                # Unknown profile (GI info unreadable): "", -1 and 0 rather than a guess.
                profile=profile.name if profile else "",
                profile_id=-1 if place.profile_id is None else place.profile_id,
                placement_start=place.start, placement_size=place.size,
                sm_count=profile.sm_count if profile else 0,
                memory_total_bytes=total, memory_used_bytes=used, memory_free_bytes=free, **extra))
        if gpm is not None:
            gpm.prune_gpu_instances(live_gpm_keys)
        if ctx.failures != failures:
            self._slots = None  # a call on a kept handle failed: enumerate afresh next poll
        capacity = self._free_capacity(ctx, parent, frozenset(i.mig_uuid for i in instances))
        return instances, processes, servers, capacity

    # -- steps --------------------------------------------------------------------------

    def _read_profiles(self, ctx: PollContext, parent) -> None:
        if self._profiles_complete:
            return
        failures = ctx.failures
        table: dict[int, Profile] = {}
        for enum in range(MAX_PROFILE_ENUM):
            info = ctx.raw("mig", "nvmlDeviceGetGpuInstanceProfileInfo", parent, enum,
                           expect=("InvalidArgument", "NotSupported"))
            if getattr(info, "error", None) == "InvalidArgument":
                break  # past the last profile index this driver knows
            if ok(info):  # NotSupported: profile absent on this GPU, keep going
                table[int(info.id)] = Profile(id=int(info.id), name=profile_name(info.name),
                                              sm_count=int(info.multiprocessorCount),
                                              memory_mib=int(info.memorySizeMB), slice_count=int(info.sliceCount))
        self.profiles = table
        self._profiles_complete = bool(table) and ctx.failures == failures

    def _devices(self, ctx: PollContext, parent, mig_tag: DeviceTag):
        """(mig index, handle, uuid, placement) for every MIG device; empty slots skipped."""
        slots = self._kept_slots(ctx, mig_tag)
        if slots is None:
            slots = self._scan(ctx, parent, mig_tag)
        found = []
        for index, handle, uuid in slots:
            place = self._by_uuid.get(uuid) or self._identify(ctx, parent, handle, uuid, mig_tag)
            if place is not None:
                found.append((index, handle, uuid, place))
        alive = {uuid for _, _, uuid, _ in found}
        for uuid in [u for u in self._by_uuid if u not in alive]:
            del self._by_uuid[uuid]
        return found

    def _kept_slots(self, ctx: PollContext, mig_tag: DeviceTag) -> list[tuple[int, object, str]] | None:
        """The slots of the last scan if every kept handle still answers its own UUID; else None."""
        if self._slots is None or self._slots_age >= MIG_RESCAN_POLLS:
            return None
        self._slots_age += 1
        for _, handle, uuid in self._slots:
            # A destroyed instance's handle answers InvalidArgument (or NotFound); a reused one,
            # another UUID. Either way the layout changed: scan every slot again.
            answer = ctx.get("mig", "nvmlDeviceGetUUID", handle, tag=mig_tag, expect=("InvalidArgument", "NotFound"))
            if answer != uuid:
                return None
        return self._slots

    def _scan(self, ctx: PollContext, parent, mig_tag: DeviceTag) -> list[tuple[int, object, str]]:
        """Ask every MIG slot for its device: (mig index, handle, uuid) of the occupied ones."""
        self._slots = None
        if self._max_count is None:
            count = ctx.get("mig", "nvmlDeviceGetMaxMigDeviceCount", parent)
            if count is None:
                return []
            self._max_count = int(count)
        failures = ctx.failures
        slots = []
        for index in range(self._max_count):
            # Indices may be sparse after instances are destroyed: skip, never stop.
            handle = ctx.get("mig", "nvmlDeviceGetMigDeviceHandleByIndex", parent, index,
                             expect=("NotFound", "InvalidArgument"))
            if not ok(handle):
                continue
            uuid = ctx.get("mig", "nvmlDeviceGetUUID", handle, tag=mig_tag)
            if ok(uuid):
                slots.append((index, handle, uuid))
        if ctx.failures == failures:  # keep only a complete scan
            self._slots, self._slots_age = slots, 0
        return slots

    def _identify(self, ctx: PollContext, parent, handle, uuid: str, mig_tag: DeviceTag) -> _Placement | None:
        failures = ctx.failures
        gi = ctx.get("mig", "nvmlDeviceGetGpuInstanceId", handle, tag=mig_tag)
        ci = ctx.get("mig", "nvmlDeviceGetComputeInstanceId", handle, tag=mig_tag)
        if gi is None or ci is None:
            return None
        profile_id, start, size = None, 0, 0
        gi_handle = ctx.get("mig", "nvmlDeviceGetGpuInstanceById", parent, int(gi))
        if ok(gi_handle):
            info = ctx.get("mig", "nvmlGpuInstanceGetInfo", gi_handle)
            if ok(info):
                profile_id = int(info.profileId)
                start, size = int(info.placement.start), int(info.placement.size)
        place = _Placement(int(gi), int(ci), profile_id, start, size)
        if ctx.failures == failures:  # cache only a complete answer; retry a partial one
            self._by_uuid[uuid] = place
        return place

    def _free_capacity(self, ctx: PollContext, parent, layout: frozenset) -> dict[str, int]:
        """profile name -> how many more instances of it fit, given the current layout."""
        self._capacity_age += 1
        if layout == self._capacity_key and self._capacity_age < CAPACITY_REFRESH_POLLS:
            return self._capacity
        failures = ctx.failures
        capacity = {}
        for profile in self.profiles.values():
            count = ctx.get("mig", "nvmlDeviceGetGpuInstanceRemainingCapacity", parent, profile.id)
            if count is not None:
                capacity[profile.name] = int(count)
        self._capacity = capacity
        self._capacity_key = layout if ctx.failures == failures else None
        self._capacity_age = 0
        return capacity


__all__ = ["MigReader", "Profile", "profile_name"]
