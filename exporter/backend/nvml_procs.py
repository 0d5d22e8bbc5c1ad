"""Processes on a GPU or MIG instance, MPS roles and the sharing mode (no pynvml import).

Decisions:
- A process NVML listed but that vanished before we asked its name (NotFound, /proc gone)
  is KEPT with what is known (pid, memory, name/cmdline ""): NVML counted its memory in
  the same list, so dropping it would make per-process sums disagree with the device.
- The MPS list is asked only on a device where an nvidia-cuda-mps-server process holds a
  context: MPS clients cannot exist without one, and this saves a call per device per poll.
- Process names come from nvmlSystemGetProcessName (basename), else /proc/<pid>/comm; name,
  command line and environment are cached per pid while the pid stays on the device. The
  identity is asked again while a process has no (complete) pod and the pod resolver's
  ``generation`` moved: a pod may become known after its process was first seen.
- Each process gets a replica slot per (device, workload), see exporter.backend.replicas.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import lru_cache

from exporter.backend.nvml_types import NA, DeviceTag, PollContext, field_of, frozen_maker, ok
from exporter.backend.procinfo import DeviceRef, ProcFs, mps_memory_limit, mps_thread_ratio, select_environ
from exporter.backend.replicas import ReplicaSlots
from exporter.identity import Identifier, ProcessIdentity
from exporter.redact import redact_cmdline
from exporter.snapshot import MpsServer, ProcessInfo

# Every field given, in field order: read() fills a new object's __dict__ from one dict display
# (83 a poll on the mixed 8-GPU node: no keyword call, no keyword check), which frozen_maker says
# ProcessInfo allows (it returns the class itself otherwise, and read() calls that).
_process_info = frozen_maker(ProcessInfo)
_PROCESS_BY_DICT = _process_info is not ProcessInfo
_new = object.__new__
# One record per (pid, gi) for as long as the server runs (frozen: the same object every poll).
_mps_server = lru_cache(maxsize=1024, typed=True)(MpsServer)
MPS_SERVER_NAME = "nvidia-cuda-mps-server"
_COMM_LEN = 15  # the kernel truncates /proc/<pid>/comm to 15 characters
_MPS_SERVER_NAMES = frozenset((MPS_SERVER_NAME, MPS_SERVER_NAME[:_COMM_LEN]))  # what is_mps_server accepts


def is_mps_server(name: str) -> bool:
    """True for the MPS server's process name, also in its truncated /proc comm form."""
    return name == MPS_SERVER_NAME or name == MPS_SERVER_NAME[:_COMM_LEN]


def sharing_mode(mig_mode: bool | None, processes, servers) -> str:
    """How the GPU is shared: mig / mig+mps / mps / time_slicing / exclusive / idle."""
    if mig_mode:
        return "mig+mps" if servers else "mig"
    if servers:
        return "mps"
    clients = sum(1 for p in processes if not p.is_mps_server)
    return "time_slicing" if clients > 1 else "exclusive" if clients == 1 else "idle"


@dataclass(frozen=True)
class _Meta:
    name: str
    cmdline: str
    environ: dict  # the variables the exporter uses only (procinfo.ENV_VARS)
    start_time: float | None = None  # Unix seconds, from /proc/<pid>/stat
    identity: ProcessIdentity = ProcessIdentity("")
    generation: object = None  # the pod resolver's generation when identity was resolved


class ProcessReader:
    """Process lists of one physical GPU (and its MIG instances), with per-pid caches."""

    def __init__(self, caller, procfs: ProcFs, identifier: Identifier | None = None):
        self.caller = caller
        self.procfs = procfs
        self.identifier = identifier or Identifier()
        self._meta: dict[int, _Meta] = {}
        # (pid, MIG device UUID or None) -> (memory limit, thread ratio) of an MPS client: both
        # come from its environment, fixed for the pid's life, so they are parsed once.
        self._mps_limits: dict[tuple[int, str | None], tuple[int | None, float | None]] = {}
        self._seen: set[int] = set()
        self._generation = None
        self.replicas = ReplicaSlots()
        self.last_seen_us = 0  # newest per-process utilization sample timestamp consumed

    def begin_poll(self) -> None:
        self._seen = set()
        self._generation = self.identifier.generation()
        self.replicas.begin_poll()

    def end_poll(self) -> None:
        """Forget metadata of pids no longer on the GPU (a reused pid is re-read)."""
        for pid in [p for p in self._meta if p not in self._seen]:
            del self._meta[pid]
        for key in [k for k in self._mps_limits if k[0] not in self._meta]:
            del self._mps_limits[key]
        self.replicas.end_poll()

    def read(self, ctx: PollContext, handle, dev: DeviceRef, *, on_mig: bool, tag: DeviceTag | None = None):
        """(processes, mps servers) on the device behind ``handle`` (a GPU or a MIG instance)."""
        entries = {p.pid: p for p in self._list(ctx, "process", "nvmlDeviceGetComputeRunningProcesses", handle, tag)}
        # _lookup's kept-metadata case inline (a pid seen before, nothing new to resolve): a frame
        # less for each of the ~83 processes a poll of the mixed 8-GPU node; the rest goes there.
        seen, kept, generation = self._seen, self._meta, self._generation
        metas = {}
        for pid in entries:
            meta = kept.get(pid)
            if meta is None:
                meta = self._lookup(ctx, pid)
            else:
                pod = meta.identity.pod
                if (pod is None or not pod.container) and meta.generation != generation:
                    meta = self._lookup(ctx, pid)
                else:
                    seen.add(pid)
            metas[pid] = meta
        server_pids = {pid for pid, meta in metas.items() if meta.name in _MPS_SERVER_NAMES}  # is_mps_server, inline
        client_pids: set[int] = set()
        if server_pids:
            for p in self._list(ctx, "mps", "nvmlDeviceGetMPSComputeRunningProcesses", handle, tag):
                client_pids.add(p.pid)
                if p.pid not in entries:
                    entries[p.pid] = p
                    metas[p.pid] = self._lookup(ctx, p.pid)
        util = {} if on_mig or not entries else self._utilization(ctx, handle, tag)
        replicas = self.replicas.assign(dev.gi, {pid: meta.identity.workload for pid, meta in metas.items()})
        processes = []
        index, gi, ci = dev.nvml_index, dev.gi, dev.ci
        for pid, entry in sorted(entries.items()):
            meta = metas[pid]
            server = pid in server_pids
            client = pid in client_pids and not server
            env = meta.environ
            identity = meta.identity
            pod = identity.pod
            limit, threads = self._client_limits(pid, env, dev) if client else (None, None)
            values = {
                "pid": pid, "name": meta.name, "cmdline": meta.cmdline, "gpu_index": index,
                "gi": gi, "ci": ci, "used_memory_bytes": entry.usedGpuMemory,
                "sm_utilization_ratio": util.get(pid),
                "is_mps_client": client, "is_mps_server": server,
                "mps_memory_limit_bytes": limit, "mps_active_thread_ratio": threads,
                "environ": env, "start_time": meta.start_time, "workload": identity.workload,
                "namespace": pod.namespace if pod else "", "pod": pod.pod if pod else "",
                "container": pod.container if pod else "",
                "replica": replicas[pid]}
            if _PROCESS_BY_DICT:
                process = _new(ProcessInfo)
                process.__dict__.update(values)
            else:
                process = _process_info(**values)
            processes.append(process)
        servers = [_mps_server(pid, dev.gi) for pid in sorted(server_pids)]
        return processes, servers

    # -- steps --------------------------------------------------------------------------

    def _client_limits(self, pid: int, env: dict, dev: DeviceRef) -> tuple[int | None, float | None]:
        """(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT bytes for ``dev``, active thread ratio) of a client."""
        key = (pid, dev.mig_uuid)
        limits = self._mps_limits.get(key)
        if limits is None:
            limits = (mps_memory_limit(env, dev), mps_thread_ratio(env))
            if pid in self._meta:  # metadata kept: the environment is the pid's for good
                self._mps_limits[key] = limits
        return limits

    def _list(self, ctx: PollContext, section: str, fn: str, handle, tag) -> list:
        procs = ctx.raw(section, fn, handle, tag=tag)
        if procs is NA:
            # The unversioned wrapper needs the _v3 symbol (NVMLLibraryMismatchError on
            # older drivers); _v2 has the same result shape.
            procs = ctx.raw(section, fn + "_v2", handle, tag=tag)
        return list(procs) if ok(procs) else []

    def _lookup(self, ctx: PollContext, pid: int) -> _Meta:
        self._seen.add(pid)
        meta = self._meta.get(pid)
        if meta is not None:
            pod = meta.identity.pod
            if (pod is None or not pod.container) and meta.generation != self._generation:
                # Not (fully) placed yet, and the pod sources learned something since: the
                # watch may have delivered this process's pod after we first saw the pid.
                meta = dataclasses.replace(meta, generation=self._generation, identity=self.identifier.identify(
                    pid, meta.name, meta.cmdline, meta.environ))
                self._meta[pid] = meta
            return meta
        name = ""
        nvml_name = ctx.get("process", "nvmlSystemGetProcessName", pid, expect=("NotFound",))
        if isinstance(nvml_name, str) and nvml_name.strip():
            name = os.path.basename(nvml_name.strip().rstrip("/"))
        if not name:
            name = self.procfs.comm(pid) or ""
        cmdline = redact_cmdline(self.procfs.cmdline(pid) or "")  # secrets never enter the snapshot
        environ = select_environ(self.procfs.environ(pid))
        meta = _Meta(name=name, cmdline=cmdline, environ=environ, start_time=self.procfs.start_time(pid),
                     identity=self.identifier.identify(pid, name, cmdline, environ), generation=self._generation)
        if name:  # an unknown name is retried next poll (the process may be gone by then)
            self._meta[pid] = meta
        return meta

    def _utilization(self, ctx: PollContext, handle, tag) -> dict[int, float]:
        """pid -> mean SM utilization ratio over the samples newer than the last poll's.

        NotFound means no new samples: those pids keep None. pynvml raises plain
        NVMLError(0) ("Success") when the size probe finds nothing: same meaning.
        """
        samples = ctx.get("process", "nvmlDeviceGetProcessUtilization", handle, self.last_seen_us,
                          expect=("NotFound", "Success"), tag=tag)
        if not ok(samples):
            return {}
        per_pid: dict[int, list[int]] = {}
        last_seen = newest = self.last_seen_us
        for s in samples:  # pynvml's sample structs; numeric fields read without its hooks
            stamp = field_of(s, "timeStamp")
            if stamp <= last_seen:
                continue
            per_pid.setdefault(int(field_of(s, "pid")), []).append(int(field_of(s, "smUtil")))
            if stamp > newest:  # max() without the two calls a sample (the stamp is an int)
                newest = int(stamp)
        self.last_seen_us = newest
        return {pid: min(1.0, sum(v) / len(v) / 100.0) for pid, v in per_pid.items()}
