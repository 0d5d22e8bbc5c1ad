"""Fake NVML: MIG mode, MIG device handles, GPU/compute instances and profiles.

Profiles come from exporter.catalog: the enum index passed to ...GetGpuInstanceProfileInfo
maps to a struct whose ``.id`` is the real profile id (19 for 1g on 8-slice GPUs, not 0);
indices past the driver's profile count give INVALID_ARGUMENT and profiles the GPU lacks
give NOT_SUPPORTED, so the documented "iterate until INVALID_ARGUMENT" idiom works. The count
is the driver's, not pynvml's constant: R580 stops at enum 17 (580.159.04, observed) while
nvidia-ml-py 13.615 says NVML_GPU_INSTANCE_PROFILE_COUNT = 18 (a profile of a later branch).
Both the v1 and the V (v2) call answer on any MIG-capable GPU, MIG mode on or off: the header's
wording suggests NOT_SUPPORTED for V while MIG is disabled, but an H100 on driver 580.159.04
answered the whole table with MIG disabled (bench/real_gpu_smoke.py, docs/hardware-facts.md).
"""

from __future__ import annotations

import ctypes

import pynvml

from exporter.catalog import MigProfile, driver_branch, remaining_capacity
from exporter.sim.fakelib_base import (
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, KIND_CI, KIND_GI, NOT_FOUND, NOT_SUPPORTED, SUCCESS,
    VERSION_MISMATCH, Dev, array_length, decode, encode, out, out_handle, value,
    write_handles,
)

# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE enum values; one CI spans its whole GI here.
_CI_PROFILE_FOR_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def _fill_profile(info, profile: MigProfile) -> None:
    """Fill a c_nvmlGpuInstanceProfileInfo(_v2)_t; v1 has no ``name`` field."""
    info.id = profile.profile_id
    info.isP2pSupported = 0
    info.sliceCount = profile.slice_count
    info.instanceCount = profile.max_instances
    info.multiprocessorCount = profile.sm_count
    info.copyEngineCount, info.decoderCount = profile.copy_engines, profile.decoders
    info.encoderCount, info.jpegCount, info.ofaCount = profile.encoders, profile.jpegs, profile.ofas
    info.memorySizeMB = profile.memory_mib
    if hasattr(info, "name"):
        info.name = f"MIG {profile.name}".encode()


R580_PROFILE_COUNT = 17  # enum 17 gives INVALID_ARGUMENT on 580.159.04 (bench/real_gpu_smoke.py)


def profile_count(branch: int) -> int:
    """GPU-instance profile enum count of driver branch ``branch``: 17 up to R580 (observed), else
    pynvml's constant (later branches, not observed)."""
    return R580_PROFILE_COUNT if branch <= 580 else max(R580_PROFILE_COUNT, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


class MigCalls:
    """MIG calls; every method returns an nvmlReturn_t code."""

    def _parent(self, handle) -> Dev | int:
        """A physical GPU handle (MIG device handles: INVALID_ARGUMENT)."""
        dev = self._dev(handle)
        if isinstance(dev, Dev) and dev.is_mig:
            return INVALID_ARGUMENT
        return dev

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.model.mig_capable:
            return NOT_SUPPORTED
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if dev.epoch.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        out(current, mode)
        out(pending, mode)
        return SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle, ref):
        """0 when MIG is unsupported or disabled (header)."""
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, dev.model.max_mig_devices if dev.epoch.mig_enabled else 0)
        return SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index, ref):
        """NOT_FOUND for an empty index (indices may be sparse)."""
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.epoch.mig_enabled or not 0 <= value(index) < dev.model.max_mig_devices:
            return INVALID_ARGUMENT
        inst = next((i for i in dev.epoch.instances if i.has_ci and i.mig_index == value(index)), None)
        if inst is None:
            return NOT_FOUND
        out_handle(ref, self._gpu_dev(dev.gpu, inst).handle)
        return SUCCESS

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.is_mig:
            return INVALID_ARGUMENT
        out_handle(ref, dev.parent_handle)
        return SUCCESS

    def nvmlDeviceIsMigDeviceHandle(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, 1 if dev.is_mig else 0)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.is_mig:
            return NOT_SUPPORTED
        out(ref, dev.inst.gi)
        return SUCCESS

    def nvmlDeviceGetComputeInstanceId(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.is_mig:
            return NOT_SUPPORTED
        out(ref, dev.inst.ci)
        return SUCCESS

    # --- profiles and placements -----------------------------------------------------------

    def _profile_info(self, handle, index, ref):
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.model.mig_capable:
            return NOT_SUPPORTED
        if not 0 <= value(index) < profile_count(driver_branch(self._driver_version)):
            return INVALID_ARGUMENT
        profile = dev.model.profile_by_enum(value(index))
        if profile is None:
            return NOT_SUPPORTED
        _fill_profile(ref._obj, profile)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, index, ref):
        return self._profile_info(handle, index, ref)

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, handle, index, ref):
        if ref._obj.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return VERSION_MISMATCH
        return self._profile_info(handle, index, ref)

    def _profile_by_id(self, handle, profile_id):
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev, None
        if not dev.model.mig_capable:
            return NOT_SUPPORTED, None
        profile = dev.model.profile_by_id(value(profile_id))
        return (dev, profile) if profile is not None else (NOT_SUPPORTED, None)

    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle, profile_id, ref):
        dev, profile = self._profile_by_id(handle, profile_id)
        if profile is None:
            return dev
        if ref._obj.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return VERSION_MISMATCH
        _fill_profile(ref._obj, profile)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle, profile_id, ref):
        """How many more instances of the profile fit next to the current layout."""
        dev, profile = self._profile_by_id(handle, profile_id)
        if profile is None:
            return dev
        if not dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        taken = [(i.profile.name, i.start) for i in dev.epoch.instances]
        out(ref, remaining_capacity(dev.model, taken, profile.name))
        return SUCCESS

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle, profile_id, placements, count):
        """Every placement of the profile, whatever the MIG mode (header); NULL array: count."""
        dev, profile = self._profile_by_id(handle, profile_id)
        if profile is None:
            return dev
        starts = profile.starts
        if placements is None:
            out(count, len(starts))
            return SUCCESS
        room = array_length(placements)
        if room is None:  # a bare pointer: trust the caller's count
            room = count._obj.value
        if room < len(starts):
            out(count, len(starts))
            return INSUFFICIENT_SIZE
        array = placements._obj if hasattr(placements, "_obj") else placements
        for i, start in enumerate(starts):
            array[i].start, array[i].size = start, profile.memory_slices
        out(count, len(starts))
        return SUCCESS

    # --- GPU and compute instances -----------------------------------------------------------

    def nvmlDeviceGetGpuInstances(self, handle, profile_id, instances, count):
        dev, profile = self._profile_by_id(handle, profile_id)
        if profile is None:
            return dev
        if not dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        found = [encode(KIND_GI, dev.gpu, i.serial)
                 for i in dev.epoch.instances if i.profile.profile_id == profile.profile_id]
        room = array_length(instances) if instances is not None else 0
        if room is not None and room < len(found):
            out(count, len(found))
            return INSUFFICIENT_SIZE
        if found:
            write_handles(instances, found)
        out(count, len(found))
        return SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, handle, gi_id, ref):
        dev = self._parent(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.epoch.mig_enabled:
            return NOT_SUPPORTED
        inst = next((i for i in dev.epoch.instances if i.gi == value(gi_id)), None)
        if inst is None:
            return NOT_FOUND
        out_handle(ref, encode(KIND_GI, dev.gpu, inst.serial))
        return SUCCESS

    def nvmlGpuInstanceGetInfo(self, gi_handle, ref):
        dev = self._gi(gi_handle)
        if not isinstance(dev, Dev):
            return dev
        info = ref._obj
        out_handle(_Field(info, "device"), dev.parent_handle)
        info.id, info.profileId = dev.inst.gi, dev.inst.profile.profile_id
        info.placement.start, info.placement.size = dev.inst.start, dev.inst.profile.memory_slices
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstances(self, gi_handle, ci_profile, instances, count):
        """The one compute instance spanning the GI, under its full-size CI profile."""
        dev = self._gi(gi_handle)
        if not isinstance(dev, Dev):
            return dev
        found = []
        if dev.inst.has_ci and _CI_PROFILE_FOR_SLICES.get(dev.inst.profile.slice_count) == value(ci_profile):
            found = [encode(KIND_CI, dev.gpu, dev.inst.serial)]
        room = array_length(instances) if instances is not None else 0
        if room is not None and room < len(found):
            out(count, len(found))
            return INSUFFICIENT_SIZE
        if found:
            write_handles(instances, found)
        out(count, len(found))
        return SUCCESS

    def nvmlComputeInstanceGetInfo_v2(self, ci_handle, ref):
        dev = self._gi(ci_handle)
        if not isinstance(dev, Dev):
            return dev
        if decode(ci_handle)[0] != KIND_CI or not dev.inst.has_ci:
            return INVALID_ARGUMENT
        info = ref._obj
        out_handle(_Field(info, "device"), dev.parent_handle)
        out_handle(_Field(info, "gpuInstance"), encode(KIND_GI, dev.gpu, dev.inst.serial))
        info.id = dev.inst.ci
        info.profileId = _CI_PROFILE_FOR_SLICES.get(dev.inst.profile.slice_count, 0)
        info.placement.start, info.placement.size = 0, dev.inst.profile.slice_count
        return SUCCESS


class _Field:
    """Looks like byref(struct.field) to out_handle: the address of a pointer field."""

    def __init__(self, struct, name: str):
        self._obj = ctypes.c_void_p.from_buffer(struct, getattr(type(struct), name).offset)
