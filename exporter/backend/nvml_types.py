"""Values and exceptions shared by the NVML backend modules (no pynvml import here).

``NvmlCaller.call`` (exporter.backend.nvml) is the single place that talks to pynvml. It
answers with one of:

- the value pynvml returned;
- ``NA``: the call is not available on this device/driver (NotSupported, FunctionNotFound,
  NVMLLibraryMismatchError, NoPermission). The metric is omitted, nothing failed;
- a ``Missing`` object: an error the caller said it expects as normal control flow
  (``expect=``), e.g. NotFound for an empty MIG slot or Timeout for an empty event queue;
- or it raises ``NvmlCallError`` (``GpuLostError`` for GpuIsLost): a real failure that the
  reader turns into a failed section (or a down GPU).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from exporter.frozen import is_plain


class _NotAvailable:
    """Singleton meaning "this device/driver cannot tell us"; falsy so ``or`` chains work."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"


NA = _NotAvailable()


class Missing:
    """An expected, non-failure error outcome of a call (e.g. "NotFound"); falsy."""

    __slots__ = ("error",)

    def __init__(self, error: str):
        self.error = error

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Missing({self.error})"


class NvmlCallError(Exception):
    """An NVML call failed with an error that is not "not available" (counted in call_errors)."""

    def __init__(self, call: str, error: str, message: str = ""):
        super().__init__(f"{call}: {error}" + (f" ({message})" if message else ""))
        self.call = call
        self.error = error  # pynvml class name without "NVMLError_", e.g. "Unknown"


class GpuLostError(NvmlCallError):
    """NVML said GPU_IS_LOST: the GPU is reported down for this poll."""


@dataclass(frozen=True)
class DeviceTag:
    """Which device a call is about, for warn-once messages and the "not available" cache.

    ``model`` is the product name used in warnings; ``uuid`` + ``mig_mode`` + ``on_mig``
    scope the cache so that a call unsupported in MIG mode is retried after MIG is disabled.
    """

    model: str
    uuid: str = ""
    mig_mode: bool | None = None
    on_mig: bool = False  # the call targets a MIG device handle, not the parent GPU


# The same tag for the same arguments: a poll of the 8-GPU mixed node tags each GPU three times and
# each MIG GPU's instances once (27 frozen records through __init__, ~10 k instructions each), with
# values that change only when a GPU is renamed or switches MIG mode. A tag is frozen, so one
# object serves every poll; typed, so True and 1 stay apart as DeviceTag's fields keep them.
device_tag = lru_cache(maxsize=1024, typed=True)(DeviceTag)

SECTIONS = ("gpu", "mig", "process", "mps")


@dataclass
class PollContext:
    """One GPU read: remembers which sections failed and forwards calls with the device tag."""

    caller: object  # NvmlCaller
    tag: DeviceTag
    failed: set[str] = field(default_factory=set)

    failures: int = 0  # failed calls so far; compare before/after to know if a step was complete
    answers: int = 0  # calls that got an answer (a value, NA or an expected error)
    first_error: str | None = None

    def raw(self, section: str, fn: str, *args, expect: tuple[str, ...] = (), tag: DeviceTag | None = None):
        """Value of ``fn(*args)``, NA, or Missing; None (section marked failed) when the call failed.

        GpuLostError is not caught: the whole GPU read stops and the GPU is reported down.
        """
        caller = self.caller
        function = caller._ready.get(fn)  # caller.ready(fn), without the call
        try:
            if function is None:
                value = caller.call(fn, *args, gpu=tag or self.tag, expect=expect)
            else:  # NvmlCaller.call's body for a call with no NA answer remembered (see ready)
                caller._made.append(fn)
                try:
                    value = function(*args)
                except caller._caught as exc:
                    value = caller.failed(fn, args, tag or self.tag, expect, exc)
        except GpuLostError:
            raise
        except NvmlCallError as exc:
            self.failed.add(section)
            self.failures += 1
            self.first_error = self.first_error or exc.error
            return None
        self.answers += 1
        return value

    def get(self, section: str, fn: str, *args, expect: tuple[str, ...] = (), tag: DeviceTag | None = None):
        """Like ``raw`` but NA becomes None: the caller only cares whether it has a value."""
        # raw's body, not a call to it: one Python frame less on every NVML call of a poll; and
        # NvmlCaller.call's, one more (a poll of the mixed 8-GPU node makes ~290 calls).
        caller = self.caller
        function = caller._ready.get(fn)
        try:
            if function is None:
                value = caller.call(fn, *args, gpu=tag or self.tag, expect=expect)
            else:
                caller._made.append(fn)
                try:
                    value = function(*args)
                except caller._caught as exc:
                    value = caller.failed(fn, args, tag or self.tag, expect, exc)
        except GpuLostError:
            raise
        except NvmlCallError as exc:
            self.failed.add(section)
            self.failures += 1
            self.first_error = self.first_error or exc.error
            return None
        self.answers += 1
        return None if value is NA else value

    def memory(self, section: str, handle, tag: DeviceTag | None = None):
        """(total, used, free, reserved) bytes; v2 struct first, v1 when v2 is not available.

        v2 ``used`` excludes the driver-reserved memory reported separately; v1 ``used``
        includes it and has no ``reserved`` (None). Any field is None when unreadable.
        """
        mem = self.raw(section, "nvmlDeviceGetMemoryInfo", handle, self.caller.nv.nvmlMemory_v2, tag=tag)
        if mem is not NA:
            if mem is None:
                return None, None, None, None
            return (int(field_of(mem, "total")), int(field_of(mem, "used")), int(field_of(mem, "free")),
                    int(field_of(mem, "reserved")))
        mem = self.get(section, "nvmlDeviceGetMemoryInfo", handle, tag=tag)
        if mem is None:
            return None, None, None, None
        return int(field_of(mem, "total")), int(field_of(mem, "used")), int(field_of(mem, "free")), None


# A numeric field of a pynvml struct read through ctypes' own field descriptor. pynvml's struct
# classes hook every attribute read in Python (to turn bytes into str): 4x the cost of the
# read itself. Only for fields that are never bytes (char arrays keep the hooked read).
field_of = object.__getattribute__


def ok(value) -> bool:
    """True when a PollContext answer carries a value (not None, not Missing).

    Needed because NVML handles are ctypes pointers and a NULL-valued one is falsy.
    """
    return value is not None and value is not NA and not isinstance(value, Missing)


def frozen_maker(cls):
    """A faster constructor for frozen dataclass ``cls``, called with fields by keyword.

    A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``
    (the cost the dataclasses documentation names): a ProcessInfo (19 fields) took about 5x as
    long to build as a dict of the same items, and a poll of the mixed node builds 83 of them,
    144 NvLinks, and a GpuInfo (30 fields) and DeviceHealth per GPU. This fills the new
    instance's ``__dict__`` instead, defaults and default factories as ``__init__`` fills them:
    the same object (same fields and values, still frozen). An unknown or missing field goes to
    ``__init__``, which says what is wrong as it always did.
    """
    fields = dataclasses.fields(cls)
    if not cls.__dataclass_params__.frozen or not is_plain(cls):
        return cls  # its __init__ does more than set fields: keep it
    names = frozenset(f.name for f in fields)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    factories = tuple((f.name, f.default_factory) for f in fields if f.default_factory is not dataclasses.MISSING)
    new = object.__new__
    count = len(names)

    def make(**values):
        if len(values) == count and values.keys() <= names:
            # Every field given (ProcessInfo, NvLink): nothing to fill in, half the time.
            obj = new(cls)
            obj.__dict__.update(values)
            return obj
        if not values.keys() <= names:
            return cls(**values)
        state = dict(defaults)
        for name, factory in factories:
            if name not in values:
                state[name] = factory()
        state.update(values)
        if len(state) != len(names):
            return cls(**values)
        obj = new(cls)
        obj.__dict__.update(state)
        return obj

    return make


class Supplied(NamedTuple):
    """What another source (the DCGM backend) gives for one GPU this poll, put in place as the
    GpuInfo is built (one object, not NVML's and then a copy with the other's values):

    - ``values``: GpuInfo keyword values set over NVML's (e.g. power, temperature, ECC counts,
      the GPU's activity, its DCGM id);
    - ``clocks``: clock name -> Hz added after NVML's (None: NVML's alone);
    - ``health``: DeviceHealth keyword values set over NVML's (None: NVML's alone);
    - ``mig_activity``: each GPU instance's activity, as a GpmReader gives it
      (``gpu_instance(ctx, parent, gi, key)``, ``prune_gpu_instances(keys)``; None: as
      ``provided`` says).

    The reader still leaves out of its own reads what ``provided`` names."""

    values: dict
    clocks: dict | None = None
    health: dict | None = None
    mig_activity: object | None = None
