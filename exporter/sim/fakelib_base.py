"""Shared plumbing of the fake NVML library: opaque handles, out-parameters, device lookup.

Handles are opaque pointers whose integer value encodes what they point at:
``0x7E << 48 | kind << 40 | gpu << 24 | serial``. ``serial`` is the MIG instance serial for
MIG device, GPU-instance and compute-instance handles, so a handle kept across a MIG
reconfigure that destroyed its instance is detected as stale (INVALID_ARGUMENT), as NVML
documents ("handles become invalid when the CI/GI is destroyed").
"""

from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pynvml

from exporter.catalog import GpuModel
from exporter.sim.mig_layout import Epoch, MigInstance
from exporter.sim.model import GpuSpec

if TYPE_CHECKING:
    from exporter.sim import Simulation

SUCCESS = pynvml.NVML_SUCCESS
UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)
NO_ID = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId when MIG is off

_MAGIC = 0x7E
KIND_GPU, KIND_MIG, KIND_GI, KIND_CI, KIND_EVENT_SET, KIND_GPM_SAMPLE = range(1, 7)


def encode(kind: int, gpu: int, serial: int = 0) -> int:
    return (_MAGIC << 48) | (kind << 40) | (gpu << 24) | serial


def decode(arg) -> tuple[int, int, int] | None:
    """(kind, gpu, serial) of a handle argument, or None when it is not one of ours."""
    if arg is None:
        return None
    if isinstance(arg, int):
        value = arg
    else:
        try:
            value = ctypes.cast(arg, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            return None
    if not value or value >> 48 != _MAGIC:
        return None
    return (value >> 40) & 0xFF, (value >> 24) & 0xFFFF, value & 0xFFFFFF


def handle_of_call(args: tuple) -> tuple[int, int, int] | None:
    """(kind, gpu, serial) of a call's first argument when it is a device/MIG/GI/CI handle."""
    handle = decode(args[0]) if args else None
    return None if handle is None or handle[0] in (KIND_EVENT_SET, KIND_GPM_SAMPLE) else handle


def value(arg) -> int:
    """Integer value of a by-value argument (Python int or ctypes scalar)."""
    return int(getattr(arg, "value", arg))


def out(ref, v) -> None:
    """Store ``v`` through a byref() scalar out-parameter."""
    ref._obj.value = v


def out_handle(ref, handle: int) -> None:
    """Store an opaque handle through a byref() pointer out-parameter."""
    ctypes.c_void_p.from_address(ctypes.addressof(ref._obj)).value = handle


def write_handles(array, handles: list[int]) -> None:
    """Fill a caller-allocated array of handle pointers."""
    base = ctypes.addressof(array._obj if hasattr(array, "_obj") else array)
    for i, handle in enumerate(handles):
        ctypes.c_void_p.from_address(base + i * ctypes.sizeof(ctypes.c_void_p)).value = handle


def write_string(buffer, length, text: str) -> int:
    """Copy ``text`` into a char buffer of ``length`` bytes as C would (NUL-terminated)."""
    data = text.encode()
    if len(data) + 1 > value(length):
        return INSUFFICIENT_SIZE
    ctypes.memmove(buffer, data + b"\0", len(data) + 1)
    return SUCCESS


def array_length(array) -> int | None:
    """Element count of a ctypes array argument, None when unknown (a bare pointer)."""
    obj = array._obj if hasattr(array, "_obj") else array
    return len(obj) if isinstance(obj, ctypes.Array) else None


@dataclass(frozen=True)
class Dev:
    """A resolved device handle: a physical GPU, or one MIG instance of it."""

    gpu: int
    spec: GpuSpec
    model: GpuModel
    epoch: Epoch
    inst: MigInstance | None

    @property
    def is_mig(self) -> bool:
        return self.inst is not None

    @property
    def handle(self) -> int:
        return encode(KIND_MIG, self.gpu, self.inst.serial) if self.inst else encode(KIND_GPU, self.gpu)

    @property
    def parent_handle(self) -> int:
        return encode(KIND_GPU, self.gpu)


class ImplBase:
    """State every call family needs: the simulation, init refcount, handle resolution.

    Like the real library, NVML enumerates GPUs when it is initialised (refcount 0 -> 1):
    ``_visible`` is the GPUs on the bus then, in index order (NVML index = position), and
    the driver version is the one loaded then. A GPU removed later answers GPU_IS_LOST; one
    attached later is seen only after nvmlShutdown and a new nvmlInit.
    """

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.engine = sim.engine
        self.telemetry = sim.engine.telemetry
        self._init_count = 0
        self._visible: list[int] = []
        self._driver_version = sim.scenario.driver_version
        self._ids = itertools.count(1)  # event-set and GPM-sample handles
        self._event_sets: dict[int, dict] = {}  # id -> {"gpus": {gpu: (mask, since)}, "delivered"}
        self._gpm_samples: dict[int, tuple | None] = {}  # id -> (gpu, device key, time)

    @property
    def now(self) -> float:
        return self.engine.now

    def _uninitialized(self) -> bool:
        return self._init_count == 0

    def _gpu_dev(self, gpu: int, inst: MigInstance | None = None) -> Dev:
        return Dev(gpu, self.engine.gpus[gpu], self.engine.models[gpu], self.engine.epoch(gpu), inst)

    def _dev(self, arg) -> Dev | int:
        """Device handle -> Dev, or an error code (uninitialized, not a handle, stale MIG,
        GPU removed from the bus: GPU_IS_LOST)."""
        if self._uninitialized():
            return UNINITIALIZED
        handle = decode(arg)
        if handle is None or handle[0] not in (KIND_GPU, KIND_MIG) or handle[1] not in self._visible:
            return INVALID_ARGUMENT
        kind, gpu, serial = handle
        if not self.engine.lifecycle.present(gpu, self.now):
            return GPU_IS_LOST
        if kind == KIND_GPU:
            return self._gpu_dev(gpu)
        inst = self._live_instance(gpu, serial)
        return INVALID_ARGUMENT if inst is None else self._gpu_dev(gpu, inst)

    def _gpu_only(self, arg) -> Dev | int:
        """Like _dev, but MIG device handles get NOT_SUPPORTED (parent-only readings such as
        power, clocks and temperature; nvml_facts.md §9 item 1)."""
        dev = self._dev(arg)
        if isinstance(dev, Dev) and dev.is_mig:
            return NOT_SUPPORTED
        return dev

    def _live_instance(self, gpu: int, serial: int) -> MigInstance | None:
        return next((i for i in self.engine.epoch(gpu).instances if i.serial == serial), None)

    def _gi(self, handle):
        """(Dev of the instance) for a GPU-instance or compute-instance handle, or an error."""
        if self._uninitialized():
            return UNINITIALIZED
        h = decode(handle)
        if h is None or h[0] not in (KIND_GI, KIND_CI) or h[1] not in self._visible:
            return INVALID_ARGUMENT
        if not self.engine.lifecycle.present(h[1], self.now):
            return GPU_IS_LOST
        inst = self._live_instance(h[1], h[2])
        return INVALID_ARGUMENT if inst is None else self._gpu_dev(h[1], inst)

    # --- library lifetime and system queries ---------------------------------------------

    def _init(self) -> int:
        if self._init_count == 0:  # enumerate now, as the real library does
            self._visible = self.engine.lifecycle.present_gpus(self.now)
            self._driver_version = self.engine.lifecycle.driver_version(self.now)
        self._init_count += 1
        return SUCCESS

    def nvmlInitWithFlags(self, flags):
        return self._init()

    def nvmlInit_v2(self):
        return self._init()

    def nvmlShutdown(self):
        if self._init_count == 0:
            return UNINITIALIZED
        self._init_count -= 1
        return SUCCESS

    def nvmlErrorString(self, result):
        """Message bytes for a return code (pynvml sets restype c_char_p and gets bytes)."""
        code = value(result)
        text = pynvml.NVMLError._errcode_to_string.get(code)
        if text is None:
            cls = pynvml.NVMLError._valClassMapping.get(code)
            text = cls.__name__.replace("NVMLError_", "") if cls else "Unknown Error"
        return text.encode()

    def nvmlSystemGetDriverVersion(self, buffer, length):
        if self._uninitialized():
            return UNINITIALIZED
        return write_string(buffer, length, self._driver_version)

    def nvmlSystemGetNVMLVersion(self, buffer, length):
        if self._uninitialized():
            return UNINITIALIZED
        cuda_major = self.engine.scenario.cuda_driver_version // 1000
        return write_string(buffer, length, f"{cuda_major}.{self._driver_version}")

    def nvmlSystemGetCudaDriverVersion(self, ref):
        if self._uninitialized():
            return UNINITIALIZED
        out(ref, self.engine.scenario.cuda_driver_version)
        return SUCCESS

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlSystemGetProcessName(self, pid, buffer, length):
        """Name of a live process (server included); NOT_FOUND once it is gone."""
        if self._uninitialized():
            return UNINITIALIZED
        proc = next((p for p in self.engine.alive() if p.pid == value(pid)), None)
        if proc is None:
            return NOT_FOUND
        return write_string(buffer, length, proc.name)
