"""The hottest NVML calls, made without pynvml's per-field Python hooks (receives the pynvml
module; never imports it). Only NvmlCaller.call (exporter.backend.nvml_caller) uses these.

Why: pynvml's struct classes run every field read and write through Python-level
``__getattribute__``/``__setattr__`` hooks (to turn bytes into str), and its process-list
getters copy each entry into a "friendly" object field by field (about 5 µs an entry). On the
8-GPU mixed node the calls here save about 0.9 ms of a poll's reads (docs/performance.md, "Read
path"). Each function makes the same C calls as the pynvml function of the same name, with the
same arguments in the same order, raises the same pynvml exceptions, and reads only numeric
fields, through ctypes' own field descriptors (``object.__getattribute__`` reaches them without
the hook).
Results have the shape pynvml gives: process entries with ``pid``, ``usedGpuMemory`` (None
when NVML says not available), ``gpuInstanceId``, ``computeInstanceId``; field values as the
filled ``c_nvmlFieldValue_t`` array; process utilization as a list of the filled sample structs.
The arrays of the variable-length lists are of classes kept from call to call
(``_array_types``): pynvml makes a new ctypes class per call, which the garbage collector then
has to find (docs/performance.md, "Poll, fourth pass").

Should pynvml lack one of the pieces used here (another nvidia-ml-py), the call falls back to
pynvml's own function: ``direct_calls`` leaves that name out.
"""

from __future__ import annotations

_get = object.__getattribute__  # a ctypes field read without pynvml's Python-level hook


def _array_types(entry_type):
    """``array_of(n)`` -> the ctypes class of ``n`` entries, kept alive from call to call.

    ``entry_type * n`` makes a new class unless one is alive: ctypes' own cache holds only a
    weak reference. Each poll's lists would then make a dozen classes (about 13 µs each) and
    leave them as cyclic garbage (a class refers to itself), about 100 objects a poll for the
    garbage collector. Counts follow the number of processes, so a few dozen sizes are kept
    (all forgotten past 256: a node with that many distinct process counts is not a steady one).
    """
    kept: dict[int, type] = {}

    def array_of(n: int):
        array = kept.get(n)
        if array is None:
            if len(kept) >= 256:
                kept.clear()
            array = kept[n] = entry_type * n
        return array

    return array_of


class ProcessEntry:
    """One entry of a running-process list, as pynvml's friendly object carries it."""

    __slots__ = ("computeInstanceId", "gpuInstanceId", "pid", "usedGpuMemory")

    def __init__(self, pid, used, gpu_instance, compute_instance):
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId, self.computeInstanceId = gpu_instance, compute_instance

    def __repr__(self) -> str:
        return f"ProcessEntry(pid={self.pid}, usedGpuMemory={self.usedGpuMemory})"


def _process_list(nv, symbol: str):
    """pynvml's two-call protocol for the running-process list of ``symbol`` (a _v3 C symbol):
    ask for the count, then fill an array with room for processes started in between. The
    pynvml names are unversioned, and pynvml turns FunctionNotFound into
    NVMLLibraryMismatchError for them: so does this."""
    c_uint, byref, entry_type = nv.c_uint, nv.byref, nv.c_nvmlProcessInfo_v3_t
    success, insufficient = nv.NVML_SUCCESS, nv.NVML_ERROR_INSUFFICIENT_SIZE
    not_available = nv.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    function_pointer = nv._nvmlGetFunctionPointer
    array_of = _array_types(entry_type)

    def read(handle):
        try:
            return entries_of(handle)
        except nv.NVMLError_FunctionNotFound:
            raise nv.NVMLLibraryMismatchError(f"{symbol} is absent from this NVML library") from None

    def entries_of(handle):
        fn = function_pointer(symbol)
        count = c_uint(0)
        ret = fn(handle, byref(count), None)
        if ret == success:
            return []  # no process
        if ret != insufficient:
            raise nv.NVMLError(ret)
        count.value = count.value * 2 + 5  # the margin pynvml gives for processes started since
        entries = array_of(count.value)()
        ret = fn(handle, byref(count), entries)
        if ret != success:
            raise nv.NVMLError(ret)
        out = []
        for i in range(count.value):
            entry = entries[i]
            used = _get(entry, "usedGpuMemory")
            out.append(ProcessEntry(_get(entry, "pid"), None if used == not_available else used,
                                    _get(entry, "gpuInstanceId"), _get(entry, "computeInstanceId")))
        return out

    return read


def _field_values(nv):
    """nvmlDeviceGetFieldValues(handle, ids): ids are field ids or (field id, scope id) pairs.
    The request array of an id list is built once (through the hooks, as pynvml does) and
    copied for each call: NVML then fills the copy's output fields."""
    value_type, c_int32, byref = nv.c_nvmlFieldValue_t, nv.c_int32, nv.byref
    success = nv.NVML_SUCCESS
    function_pointer = nv._nvmlGetFunctionPointer
    templates: dict[tuple, object] = {}  # ids -> a zeroed request array with the ids filled

    def read(handle, field_ids):
        fn = function_pointer("nvmlDeviceGetFieldValues")
        key = tuple(field_ids)
        try:
            template = templates.get(key)
        except TypeError:  # a (field id, scope id) pair given as a list
            key = tuple(f if isinstance(f, int) else tuple(f) for f in key)
            template = templates.get(key)
        if template is None:
            template = (value_type * len(key))()
            for i, field_id in enumerate(key):
                if isinstance(field_id, int):
                    template[i].fieldId = field_id
                else:
                    template[i].fieldId, template[i].scopeId = field_id
            if len(templates) < 64:  # a GPU's id list changes only with its NVLink count
                templates[key] = template
        values = type(template).from_buffer_copy(template)
        ret = fn(handle, c_int32(len(key)), byref(values))
        if ret != success:
            raise nv.NVMLError(ret)
        return values

    return read


def _process_utilization(nv):
    """nvmlDeviceGetProcessUtilization(handle, last seen µs): pynvml's size probe, then the filled
    sample structs (a list, as pynvml's slice of its array), read into an array class kept alive."""
    c_uint, c_ulonglong, byref = nv.c_uint, nv.c_ulonglong, nv.byref
    insufficient = nv.NVML_ERROR_INSUFFICIENT_SIZE
    function_pointer, check = nv._nvmlGetFunctionPointer, nv._nvmlCheckReturn
    array_of = _array_types(nv.c_nvmlProcessUtilizationSample_t)

    def read(handle, time_stamp):
        count = c_uint(0)
        stamp = c_ulonglong(time_stamp)
        fn = function_pointer("nvmlDeviceGetProcessUtilization")
        ret = fn(handle, None, byref(count), stamp)
        if ret != insufficient:
            raise nv.NVMLError(ret)  # as pynvml: even NVML_SUCCESS (no sample) is raised
        samples = array_of(count.value)()
        check(fn(handle, samples, byref(count), stamp))
        return samples[0:count.value]

    return read


_NEEDS = ("c_uint", "c_int32", "byref", "_nvmlGetFunctionPointer", "NVML_SUCCESS", "NVML_ERROR_INSUFFICIENT_SIZE",
          "NVML_VALUE_NOT_AVAILABLE_ulonglong", "NVMLError", "NVMLError_FunctionNotFound",
          "NVMLLibraryMismatchError", "c_nvmlProcessInfo_v3_t", "c_nvmlFieldValue_t",
          "c_ulonglong", "_nvmlCheckReturn", "c_nvmlProcessUtilizationSample_t")


def direct_calls(nv) -> dict:
    """{pynvml function name: function making the same call directly}; empty when ``nv``
    lacks a piece these need (a stand-in module, another nvidia-ml-py)."""
    if not all(hasattr(nv, name) for name in _NEEDS):
        return {}
    return {
        "nvmlDeviceGetComputeRunningProcesses": _process_list(nv, "nvmlDeviceGetComputeRunningProcesses_v3"),
        "nvmlDeviceGetMPSComputeRunningProcesses": _process_list(nv, "nvmlDeviceGetMPSComputeRunningProcesses_v3"),
        "nvmlDeviceGetFieldValues": _field_values(nv),
        "nvmlDeviceGetProcessUtilization": _process_utilization(nv),
    }


__all__ = ["ProcessEntry", "direct_calls"]
