"""What /proc tells about a GPU process, and the MPS limits found in its environment.

Reads are best effort: a process may exit between NVML listing it and us reading /proc,
or /proc may belong to another PID namespace (run the exporter with hostPID). Every reader
returns None instead of raising.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

log = logging.getLogger(__name__)

# The only environment variables of a GPU process the exporter reads (all others may hold
# secrets and are never decoded or kept): the MPS limits and the devices they refer to, and
# the variables that name the workload and its pod (exporter.identity, foresight.workload).
ENV_VARS = frozenset({
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "GPUSHARE_WORKLOAD", "GPUSHARE_EXPECTED_PEAK", "POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME",
    "HOSTNAME",  # the pod name a container runtime gives; names pods when only the kubelet is reachable
})
_ENV_KEYS = frozenset(name.encode() for name in ENV_VARS)

MEM_LIMIT_VAR = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREAD_PCT_VAR = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
CONTAINER_VISIBLE_VAR = "NVIDIA_VISIBLE_DEVICES"  # set by the device plugin / container runtime

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # units of <pid>/stat times
_MAX_READ = 1 << 20  # environ/cmdline beyond 1 MiB is not worth holding in memory


class ProcFs:
    """Reads /proc/<pid>/{comm,cmdline,environ,cgroup,stat} under ``root`` (a fake tree in simulation)."""

    def __init__(self, root: str = "/proc"):
        self.root = root
        self._btime: float | None = None
        self._warned_denied = False

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.root, str(pid), name), "rb") as f:
                return f.read(_MAX_READ)
        except PermissionError:
            self._denied(pid, name)
            return None
        except OSError:  # gone, not a directory: "unknown"
            return None

    def _denied(self, pid: int, name: str) -> None:
        """Say once, plainly, what an unreadable <pid>/environ costs and how to grant it."""
        if name != "environ" or self._warned_denied:
            return
        self._warned_denied = True
        log.warning("cannot read %s (permission denied, running as uid %d): MPS client limits and workload "
                    "names from the environment of other users' processes will be missing; run as root with "
                    "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (docs/kubernetes.md#privileges)",
                    os.path.join(self.root, str(pid), name), os.geteuid())

    def boot_time(self) -> float | None:
        """Unix time the host booted (``btime`` in <root>/stat), read once; None if unreadable."""
        if self._btime is None:
            try:
                with open(os.path.join(self.root, "stat"), "rb") as f:
                    for line in f.read(_MAX_READ).splitlines():
                        if line.startswith(b"btime "):
                            self._btime = float(line.split()[1])
                            break
            except (OSError, ValueError, IndexError):
                return None
        return self._btime

    def start_time(self, pid: int) -> float | None:
        """Unix time the process started, in seconds, from field 22 of <pid>/stat; None if unknown."""
        raw = self._read(pid, "stat")
        boot = self.boot_time()
        if not raw or boot is None:
            return None
        # The command name (field 2) may hold spaces and parentheses: fields restart after the last ')'.
        fields = raw[raw.rfind(b")") + 2:].split()
        try:
            return boot + int(fields[19]) / CLOCK_TICKS
        except (IndexError, ValueError):
            return None

    def comm(self, pid: int) -> str | None:
        """Kernel task name (truncated to 15 characters by the kernel), or None."""
        raw = self._read(pid, "comm")
        return None if raw is None else raw.decode("utf-8", "replace").strip() or None

    def cmdline(self, pid: int) -> str | None:
        """Command line with arguments joined by spaces, or None (zombies have an empty one)."""
        raw = self._read(pid, "cmdline")
        if not raw:
            return None
        args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        return " ".join(args) or None

    def cgroup(self, pid: int) -> str | None:
        """Contents of <pid>/cgroup (readable by anyone), or None when the process is gone."""
        raw = self._read(pid, "cgroup")
        return None if raw is None else raw.decode("utf-8", "replace")

    def environ(self, pid: int) -> dict[str, str] | None:
        """The variables of ENV_VARS in the process's initial environment; None when unreadable.

        The rest of the environment is skipped undecoded: it is nobody's business here.
        """
        raw = self._read(pid, "environ")
        if raw is None:
            return None
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep and key in _ENV_KEYS:
                env[key.decode("ascii")] = value.decode("utf-8", "replace")
        return env


def select_environ(env: Mapping[str, str] | None) -> dict[str, str]:
    """The variables of ``env`` the exporter uses (ENV_VARS); the rest is dropped."""
    if not env:
        return {}
    return {k: v for k, v in env.items() if k in ENV_VARS}


@dataclass(frozen=True)
class DeviceRef:
    """The device an MPS client runs on, in every form a client can name it."""

    nvml_index: int  # NVML index of the physical GPU
    gpu_uuid: str  # "GPU-..."
    mig_uuid: str | None = None  # "MIG-..." when the client runs on a MIG instance
    gi: int | None = None
    ci: int | None = None


# The same reference for the same device: a poll of the 8-GPU mixed node names each plain GPU and
# each MIG instance once (18 frozen records through __init__), with values that change only when
# a MIG layout does. Frozen, so one object serves every poll; typed, as DeviceTag's cache.
device_ref = lru_cache(maxsize=1024, typed=True)(DeviceRef)


_SIZE_RE = re.compile(r"^(\d+)\s*([KMGT])(?:I?B)?$", re.IGNORECASE)
_UNIT = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int | None:
    """Bytes in an MPS size such as "30G" or "512M"/"512MB" (binary units, as CUDA); else None.

    A bare number is rejected: the MPS documentation always writes a unit and guessing
    bytes vs MiB would silently be off by a factor of a million.
    """
    m = _SIZE_RE.match(text.strip())
    if not m:
        return None
    return int(m.group(1)) * _UNIT[m.group(2).upper()]


def parse_mem_limits(value: str) -> list[tuple[str, int]]:
    """(device key, bytes) pairs of CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, e.g. "0=1G,1=512M".

    Keys are ordinals ("0") or UUIDs ("GPU-...", "MIG-..."). Malformed entries are skipped.
    """
    limits = []
    for part in value.split(","):
        key, sep, size_text = part.partition("=")
        key = key.strip()
        size = parse_size(size_text) if sep else None
        if key and size is not None:
            limits.append((key, size))
        elif part.strip():
            log.debug("ignoring malformed %s entry %r", MEM_LIMIT_VAR, part)
    return limits


def _same_uuid(a: str, b: str | None) -> bool:
    return b is not None and a.strip().lower() == b.lower()


def _visible_entry_matches(entry: str, dev: DeviceRef) -> bool:
    """Does one CUDA_VISIBLE_DEVICES entry (index, UUID or UUID prefix) name ``dev``?"""
    entry = entry.strip()
    if entry.isdigit():
        # On a MIG GPU an index names the parent; CUDA then exposes one of its instances.
        return int(entry) == dev.nvml_index
    low = entry.lower()
    if dev.mig_uuid is not None:
        legacy = f"mig-{dev.gpu_uuid.lower()}/{dev.gi}/{dev.ci}"
        if low == legacy or (len(low) > 4 and dev.mig_uuid.lower().startswith(low)):
            return True
    # CUDA accepts any unique UUID prefix; "GPU-" alone is not a prefix of anything useful.
    return len(low) > 4 and dev.gpu_uuid.lower().startswith(low)


def _visible_list(env: Mapping[str, str]) -> list[str] | None:
    """The devices the client's CUDA enumerates, in ordinal order; None = every GPU, NVML order.

    The NVIDIA container runtime exposes only NVIDIA_VISIBLE_DEVICES (indices or UUIDs) inside a
    container, so there ordinal 0 is its first entry; CUDA_VISIBLE_DEVICES then selects among
    those (its indices count within the container's view).
    """
    container = env.get(CONTAINER_VISIBLE_VAR, "").strip()
    outer = None if container.lower() in ("", "all", "none", "void") else container.split(",")
    visible = env.get(VISIBLE_VAR, "").strip()
    if not visible:
        return outer
    entries = visible.split(",")
    if outer is None:
        return entries
    return [outer[int(e)] if e.strip().isdigit() and int(e) < len(outer) else e for e in entries]


def client_ordinal(env: Mapping[str, str], dev: DeviceRef) -> int | None:
    """The CUDA ordinal under which the client sees ``dev``; None when it cannot be told.

    With a visible-device list (see _visible_list), the position of the first entry naming
    ``dev``. Without one, the NVML index (CUDA_DEVICE_ORDER=PCI_BUS_ID order is assumed) for a
    whole GPU, and 0 for a MIG instance (a CUDA process sees a single MIG device).
    """
    visible = _visible_list(env)
    if visible is None:
        return 0 if dev.mig_uuid is not None else dev.nvml_index
    for position, entry in enumerate(visible):
        if _visible_entry_matches(entry, dev):
            return position
    return None


def mps_memory_limit(env: Mapping[str, str], dev: DeviceRef) -> int | None:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for ``dev`` in bytes, or None when not set for it."""
    value = env.get(MEM_LIMIT_VAR)
    if not value:
        return None
    ordinal: int | None = -1  # computed lazily: most limits are keyed by ordinal 0
    for key, size in parse_mem_limits(value):
        if key.isdigit():
            if ordinal == -1:
                ordinal = client_ordinal(env, dev)
            if ordinal is not None and int(key) == ordinal:
                return size
        elif _same_uuid(key, dev.mig_uuid) or (dev.mig_uuid is None and _same_uuid(key, dev.gpu_uuid)):
            return size
    return None


def mps_thread_ratio(env: Mapping[str, str]) -> float | None:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as a ratio in (0, 1], or None when unset or invalid."""
    value = env.get(THREAD_PCT_VAR)
    if value is None:
        return None
    try:
        pct = float(value.strip())
    except ValueError:
        return None
    if not 0.0 < pct <= 100.0:
        return None
    return pct / 100.0
