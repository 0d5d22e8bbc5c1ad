"""Fake NVML: device enumeration, identity, compute mode and memory.

``nvmlDeviceGetComputeMode`` on the parent of a MIG-enabled GPU answers DEFAULT, as real
drivers do (nvidia-smi of R510 and R535 shows "Default" for MIG-enabled GPUs), whatever the
header's "device must be MIG device handle" suggests; the MIG device handles answer their
own mode (EXCLUSIVE_PROCESS for an instance running an MPS server).
"""

from __future__ import annotations

import pynvml

from exporter.catalog import MIB
from exporter.sim.fakelib_base import (
    GPU_IS_LOST, INVALID_ARGUMENT, KIND_GPU, NOT_FOUND, NOT_SUPPORTED, SUCCESS, UNINITIALIZED,
    VERSION_MISMATCH, Dev, encode, out, out_handle, value, write_string,
)

def _bus_id(text: str) -> str:
    """Canonical NVML bus id "00000000:3B:00.0" from "3b:00.0" / "0000:3b:00.0" forms."""
    parts = text.strip().upper().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    domain, bus, devfn = parts
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{devfn}"


class DeviceCalls:
    """Per-device calls; every method returns an nvmlReturn_t code."""

    # --- enumeration ---------------------------------------------------------------------

    def nvmlDeviceGetCount_v2(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        out(ref, len(self._visible))
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        if self._uninitialized():
            return UNINITIALIZED
        if not 0 <= value(index) < len(self._visible):
            return INVALID_ARGUMENT
        gpu = self._visible[value(index)]
        if not self.engine.lifecycle.present(gpu, self.now):
            return GPU_IS_LOST
        out_handle(ref, encode(KIND_GPU, gpu))
        return SUCCESS

    def nvmlDeviceGetHandleByUUID(self, uuid, ref):
        if self._uninitialized():
            return UNINITIALIZED
        wanted = (uuid.value if hasattr(uuid, "value") else uuid).decode()
        for gpu in self._visible:
            spec = self.engine.gpus[gpu]
            if spec.uuid == wanted:
                out_handle(ref, encode(KIND_GPU, gpu))
                return SUCCESS
            for inst in self.engine.epoch(gpu).instances:
                if inst.has_ci and inst.uuid == wanted:
                    out_handle(ref, self._gpu_dev(gpu, inst).handle)
                    return SUCCESS
        return NOT_FOUND

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, ref):
        if self._uninitialized():
            return UNINITIALIZED
        try:
            wanted = _bus_id((bus_id.value if hasattr(bus_id, "value") else bus_id).decode())
        except ValueError:
            return INVALID_ARGUMENT
        for gpu in self._visible:
            if _bus_id(self.engine.gpus[gpu].pci_bus_id) == wanted:
                out_handle(ref, encode(KIND_GPU, gpu))
                return SUCCESS
        return NOT_FOUND

    # --- identity ------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle, buffer, length):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        name = dev.spec.product_name or dev.model.nvml_name
        if dev.is_mig:  # observed form: "NVIDIA H200 MIG 1g.18gb"
            name = f"{name} MIG {dev.inst.profile.name}"
        return write_string(buffer, length, name)

    def nvmlDeviceGetUUID(self, handle, buffer, length):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return write_string(buffer, length, dev.inst.uuid if dev.is_mig else dev.spec.uuid)

    def nvmlDeviceGetIndex(self, handle, ref):
        """GPU index, or on a MIG handle its MIG device index (may be sparse)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, dev.inst.mig_index if dev.is_mig else self._visible.index(dev.gpu))
        return SUCCESS

    def nvmlDeviceGetMinorNumber(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(ref, dev.gpu)
        return SUCCESS

    def nvmlDeviceGetSerial(self, handle, buffer, length):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        return write_string(buffer, length, f"{1654922000000 + dev.gpu}")

    def nvmlDeviceGetPciInfo_v3(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        bus_id = _bus_id(dev.spec.pci_bus_id)
        domain, bus, devfn = bus_id.split(":")
        info = ref._obj
        info.busIdLegacy = bus_id[-12:].encode()  # the legacy 16-byte field: "0000:3B:00.0"
        info.busId = bus_id.encode()
        info.domain, info.bus = int(domain, 16), int(bus, 16)
        info.device = int(devfn.split(".")[0], 16)
        info.pciDeviceId = dev.model.pci_device_id
        info.pciSubSystemId = dev.model.pci_subsystem_id
        return SUCCESS

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        out(major, dev.model.compute_capability[0])
        out(minor, dev.model.compute_capability[1])
        return SUCCESS

    def nvmlDeviceGetAttributes_v2(self, handle, ref):
        """MIG device handles only, as the header says."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if not dev.is_mig:
            return NOT_SUPPORTED
        p, attrs = dev.inst.profile, ref._obj
        attrs.multiprocessorCount = p.sm_count
        attrs.sharedCopyEngineCount, attrs.sharedDecoderCount = p.copy_engines, p.decoders
        attrs.sharedEncoderCount, attrs.sharedJpegCount = p.encoders, p.jpegs
        attrs.sharedOfaCount = p.ofas
        attrs.gpuInstanceSliceCount = attrs.computeInstanceSliceCount = p.slice_count
        attrs.memorySizeMB = p.memory_mib
        return SUCCESS

    def nvmlDeviceGetComputeMode(self, handle, ref):
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        if dev.epoch.mig_enabled and not dev.is_mig:
            out(ref, pynvml.NVML_COMPUTEMODE_DEFAULT)
            return SUCCESS
        modes = {"default": pynvml.NVML_COMPUTEMODE_DEFAULT,
                 "exclusive_process": pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
                 "prohibited": pynvml.NVML_COMPUTEMODE_PROHIBITED}
        mps = dev.inst.mps if dev.is_mig else dev.spec.mps
        mode = dev.spec.compute_mode or ("exclusive_process" if mps else "default")
        out(ref, modes[mode])
        return SUCCESS

    # --- memory --------------------------------------------------------------------------

    def _memory(self, dev: Dev) -> tuple[int, int, int]:
        """(total, reserved, allocated) bytes of the GPU (aggregate under MIG) or instance."""
        if dev.is_mig:
            procs = self.engine.alive(device=(dev.gpu, dev.inst.serial))
            total, reserved = dev.inst.profile.memory_mib * MIB, 0
        else:
            procs = self.engine.alive(gpu=dev.gpu)
            total, reserved = dev.model.memory_total_mib * MIB, dev.model.memory_reserved_mib * MIB
        return total, reserved, sum(int(p.memory_at(self.now)) for p in procs)

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        """v1: used = reserved + allocated (header)."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        total, reserved, allocated = self._memory(dev)
        mem = ref._obj
        mem.total, mem.used = total, reserved + allocated
        mem.free = max(0, total - reserved - allocated)
        return SUCCESS

    def nvmlDeviceGetMemoryInfo_v2(self, handle, ref):
        """v2: reserved separate, used = allocated."""
        dev = self._dev(handle)
        if not isinstance(dev, Dev):
            return dev
        mem = ref._obj
        if mem.version != pynvml.nvmlMemory_v2:
            return VERSION_MISMATCH
        total, reserved, allocated = self._memory(dev)
        mem.total, mem.reserved, mem.used = total, reserved, allocated
        mem.free = max(0, total - reserved - allocated)
        return SUCCESS
