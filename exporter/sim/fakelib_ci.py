"""Fake NVML: compute-instance profiles, capacity, placements and lookups inside a GPU instance.

The simulation runs one compute instance spanning each GPU instance (none for a GPU
instance created without one). The compute-instance profile enum gives a slice count
(NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE); a profile exists inside a GPU instance when its
slices fit: instanceCount = GI slices // n, SMs in proportion (inferred), engines shared
with the GPU instance; the full-size profile is named like the GPU instance ("MIG 3g.20gb"),
smaller ones "MIG 1c.3g.20gb" (nvidia-smi mig -lcip).
"""

from __future__ import annotations

import pynvml

from exporter.sim.fakelib_base import (
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, KIND_CI, NOT_FOUND, NOT_SUPPORTED, SUCCESS,
    VERSION_MISMATCH, Dev, array_length, encode, out, out_handle, value,
)

# NVML_COMPUTE_INSTANCE_PROFILE_* enum -> compute slices (1_SLICE_REV1 and 7_SLICE_NVL: none here)
_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


class ComputeInstanceCalls:
    """Compute-instance calls on GPU-instance handles; every method returns an nvmlReturn_t."""

    def _ci_profile(self, gi_handle, profile):
        """(Dev of the GPU instance, slices) of a compute-instance profile, or an error code."""
        dev = self._gi(gi_handle)
        if not isinstance(dev, Dev):
            return dev, 0
        if not 0 <= value(profile) < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            return INVALID_ARGUMENT, 0
        slices = _SLICES.get(value(profile))
        if slices is None or slices > dev.inst.profile.slice_count:
            return NOT_SUPPORTED, 0
        return dev, slices

    def _fill_ci_profile(self, info, dev: Dev, profile, slices: int) -> None:
        gi = dev.inst.profile
        info.id, info.sliceCount = value(profile), slices
        info.instanceCount = gi.slice_count // slices
        info.multiprocessorCount = gi.sm_count * slices // gi.slice_count
        info.sharedCopyEngineCount, info.sharedDecoderCount = gi.copy_engines, gi.decoders
        info.sharedEncoderCount, info.sharedJpegCount, info.sharedOfaCount = gi.encoders, gi.jpegs, gi.ofas
        if hasattr(info, "name"):
            prefix = "" if slices == gi.slice_count else f"{slices}c."
            info.name = f"MIG {prefix}{gi.name}".encode()

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi_handle, profile, engine_profile, ref):
        dev, slices = self._ci_profile(gi_handle, profile)
        if not isinstance(dev, Dev):
            return dev
        if value(engine_profile) != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            return NOT_SUPPORTED
        self._fill_ci_profile(ref._obj, dev, profile, slices)
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gi_handle, profile, engine_profile, ref):
        if ref._obj.version != pynvml.nvmlComputeInstanceProfileInfo_v2:
            return VERSION_MISMATCH
        return self.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, profile, engine_profile, ref)

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, gi_handle, profile, ref):
        """0 while the GPU instance's compute instance holds its slices; else what fits."""
        dev, slices = self._ci_profile(gi_handle, profile)
        if not isinstance(dev, Dev):
            return dev
        out(ref, 0 if dev.inst.has_ci else dev.inst.profile.slice_count // slices)
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, gi_handle, profile, placements, count):
        dev, slices = self._ci_profile(gi_handle, profile)
        if not isinstance(dev, Dev):
            return dev
        starts = list(range(0, dev.inst.profile.slice_count - slices + 1, slices))
        if placements is None:
            out(count, len(starts))
            return SUCCESS
        room = array_length(placements)
        if room is None:
            room = count._obj.value
        if room < len(starts):
            out(count, len(starts))
            return INSUFFICIENT_SIZE
        array = placements._obj if hasattr(placements, "_obj") else placements
        for i, start in enumerate(starts):
            array[i].start, array[i].size = start, slices
        out(count, len(starts))
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle, ci_id, ref):
        dev = self._gi(gi_handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.inst.has_ci or value(ci_id) != dev.inst.ci:
            return NOT_FOUND
        out_handle(ref, encode(KIND_CI, dev.gpu, dev.inst.serial))
        return SUCCESS
