"""A fake /proc directory holding the simulated processes, for the exporter and for psutil.

Per live pid, the files Linux has and psutil reads (proc(5)):

- ``cmdline`` (argv joined by NUL, trailing NUL), ``environ`` (KEY=VALUE entries joined by
  NUL), ``comm`` (name truncated to 15 bytes + newline);
- ``stat`` with all 52 fields (pid, comm, state, ppid, ..., starttime in clock ticks since
  boot at field 22, vsize, rss, processor at field 39, ..., exit_code at field 52);
- ``status`` (Name, State, Tgid, Pid, PPid, Uid/Gid, VmRSS and the other Vm* lines, Threads,
  Cpus_allowed_list, context switches...), ``statm``, ``io``, ``smaps_rollup``;
- ``cgroup`` (the pod's cgroup path, see exporter.sim.kube), ``exe`` and ``cwd`` symlinks, ``fd/`` (stdin, stdout, stderr on /dev/null), ``task/<pid>/``.

The process runs as ``uid`` (scenario key, default 0) with ``host_memory`` resident bytes;
CPU time is not simulated (utime/stime 0). ``<root>/stat`` carries ``btime``, the Unix time
virtual time 0 stands for, so btime + starttime / CLK_TCK is the process start on the
simulation's clock (exporter.sim.Simulation.clock_us).

``mirror_host()`` makes the tree usable as psutil.PROCFS_PATH for a whole client (nvitop,
gpustat): host-wide files (meminfo, loadavg, uptime, cpuinfo, ...) and the client's own
process and its ancestors are symlinked to the real /proc. Only what this class created is
ever removed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Mapping

from exporter.backend.procinfo import CLOCK_TICKS

DEFAULT_HOST_MEMORY = 512 * 2**20  # resident bytes of a simulated process without host_memory
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Host-wide /proc entries psutil reads for system figures (cpu_percent, virtual_memory...).
HOST_FILES = ("meminfo", "loadavg", "uptime", "cpuinfo", "swaps", "vmstat", "diskstats",
              "filesystems", "mounts", "partitions", "net", "sys", "pressure", "self",
              "thread-self", "version", "zoneinfo")


@dataclass(frozen=True)
class ProcEntry:
    """What /proc shows for one pid."""

    pid: int
    name: str
    cmdline: str
    environ: Mapping[str, str]
    start_seconds: float = 0.0  # virtual time the process started (becomes <pid>/stat starttime)
    uid: int = 0
    host_memory: int = DEFAULT_HOST_MEMORY  # resident bytes
    cgroup: str = ""  # <pid>/cgroup contents (exporter.sim.kube.cgroup_file); "" = not written


# What makes shlex.split differ from str.split: quotes, backslashes, and whitespace other than the
# four characters shlex splits on (str.split splits on every Unicode space, shlex does not).
_SHLEX_SPECIAL = re.compile(r"['\"\\]|[^\S \t\r\n]")


def _argv(cmdline: str) -> list[str]:
    if _SHLEX_SPECIAL.search(cmdline) is None:
        return cmdline.split()  # shlex.split's words, without its character-by-character reader
    try:
        return shlex.split(cmdline)
    except ValueError:  # unbalanced quotes: keep the words as written
        return cmdline.split()


def stat_line(e: ProcEntry, comm: str) -> str:
    """/proc/<pid>/stat: the 52 fields of proc(5), one line."""
    rss_pages = e.host_memory // PAGE
    vsize = 4 * e.host_memory
    start_ticks = round(e.start_seconds * CLOCK_TICKS)
    fields = [
        e.pid, f"({comm})", "S", 1, e.pid, e.pid, 0, -1,  # pid comm state ppid pgrp session tty tpgid
        4194560, 0, 0, 0, 0,  # flags minflt cminflt majflt cmajflt
        0, 0, 0, 0,  # utime stime cutime cstime (CPU time is not simulated)
        20, 0, 1, 0,  # priority nice num_threads itrealvalue
        start_ticks, vsize, rss_pages, 18446744073709551615,  # starttime vsize rss rsslim
        1, 1, 0, 0, 0,  # startcode endcode startstack kstkesp kstkeip
        0, 0, 0, 0, 0, 0, 0,  # signal blocked sigignore sigcatch wchan nswap cnswap
        17, 0, 0, 0,  # exit_signal processor rt_priority policy
        0, 0, 0,  # delayacct_blkio_ticks guest_time cguest_time
        0, 0, 0, 0, 0, 0, 0, 0,  # start_data end_data start_brk arg_start arg_end env_start env_end exit_code
    ]
    assert len(fields) == 52
    return " ".join(map(str, fields)) + "\n"


def status_text(e: ProcEntry, comm: str) -> str:
    """/proc/<pid>/status as Linux writes it (the lines psutil and the exporter parse)."""
    kib = e.host_memory // 1024
    cpus = os.cpu_count() or 1
    uid = f"{e.uid}\t{e.uid}\t{e.uid}\t{e.uid}"
    return "".join(f"{k}:\t{v}\n" for k, v in (
        ("Name", comm), ("Umask", "0022"), ("State", "S (sleeping)"), ("Tgid", e.pid),
        ("Ngid", 0), ("Pid", e.pid), ("PPid", 1), ("TracerPid", 0), ("Uid", uid), ("Gid", uid),
        ("FDSize", 64), ("Groups", ""), ("NStgid", e.pid), ("NSpid", e.pid), ("NSpgid", e.pid),
        ("NSsid", e.pid), ("VmPeak", f"{4 * kib} kB"), ("VmSize", f"{4 * kib} kB"), ("VmLck", "0 kB"),
        ("VmPin", "0 kB"), ("VmHWM", f"{kib} kB"), ("VmRSS", f"{kib} kB"), ("RssAnon", f"{kib} kB"),
        ("RssFile", "0 kB"), ("RssShmem", "0 kB"), ("VmData", f"{kib} kB"), ("VmStk", "132 kB"),
        ("VmExe", "4 kB"), ("VmLib", "0 kB"), ("VmPTE", "0 kB"), ("VmSwap", "0 kB"),
        ("HugetlbPages", "0 kB"), ("CoreDumping", 0), ("THP_enabled", 1), ("Threads", 1),
        ("SigQ", "0/0"), ("SigPnd", "0" * 16), ("ShdPnd", "0" * 16), ("SigBlk", "0" * 16),
        ("SigIgn", "0" * 16), ("SigCgt", "0" * 16), ("CapInh", "0" * 16), ("CapPrm", "0" * 16),
        ("CapEff", "0" * 16), ("CapBnd", "000001ffffffffff"), ("CapAmb", "0" * 16),
        ("NoNewPrivs", 0), ("Seccomp", 0), ("Cpus_allowed", f"{(1 << cpus) - 1:x}"),
        ("Cpus_allowed_list", f"0-{cpus - 1}"), ("Mems_allowed", "1"), ("Mems_allowed_list", "0"),
        ("voluntary_ctxt_switches", 0), ("nonvoluntary_ctxt_switches", 0)))


def process_files(e: ProcEntry) -> dict[str, bytes]:
    """Regular files of /proc/<pid>, by name."""
    argv = _argv(e.cmdline) or [e.name]
    comm = e.name.encode()[:15].decode(errors="ignore")
    pages = e.host_memory // PAGE
    return {
        "cmdline": b"".join(a.encode() + b"\0" for a in argv),
        "environ": b"".join(f"{k}={v}".encode() + b"\0" for k, v in e.environ.items()),
        "comm": (comm + "\n").encode(),
        "status": status_text(e, comm).encode(),
        "stat": stat_line(e, comm).encode(),
        "statm": f"{4 * pages} {pages} 0 1 0 {pages} 0\n".encode(),
        "io": b"rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\n"
              b"cancelled_write_bytes: 0\n",
        "smaps_rollup": (f"00400000-7fffffffffff ---p 00000000 00:00 0    [rollup]\n"
                         f"Rss: {e.host_memory // 1024} kB\nPss: {e.host_memory // 1024} kB\n"
                         f"Private_Clean: 0 kB\nPrivate_Dirty: {e.host_memory // 1024} kB\n"
                         f"Swap: 0 kB\nSwapPss: 0 kB\n").encode(),
    }


def process_links(e: ProcEntry) -> dict[str, str]:
    """Symbolic links of /proc/<pid> (targets need not exist: readlink is all psutil does)."""
    argv = _argv(e.cmdline) or [e.name]
    exe = argv[0] if argv[0].startswith("/") else f"/usr/bin/{argv[0]}"
    return {"exe": exe, "cwd": "/", "root": "/", "fd/0": "/dev/null", "fd/1": "/dev/null",
            "fd/2": "/dev/null"}


def _scratch_dir() -> str | None:
    """Where a temporary fake /proc goes: /dev/shm (tmpfs) unless $TMPDIR says otherwise. A node's
    fake /proc is a thousand small files and links; on a disk behind a sandbox (this project's CI)
    writing them cost 1.5 s of system time, on tmpfs 0.04 s. None: the system's temp directory."""
    shm = "/dev/shm"
    if "TMPDIR" not in os.environ and os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None


def _put(path: str, data: bytes) -> None:
    """Write a whole small file: a fake /proc is a thousand of them (a node of 84 processes), and
    os.open/os.write cost a third less than a buffered file object each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


class FakeProcfs:
    """Keeps ``root`` in step with the set of live processes given to ``sync``."""

    def __init__(self, root: str | None = None, boot_time: float = 0.0):
        self.root = tempfile.mkdtemp(prefix="gpushare-sim-proc-", dir=_scratch_dir()) if root is None else root
        os.makedirs(self.root, exist_ok=True)
        self.boot_time = boot_time
        self._write_stat()
        self._written: dict[int, ProcEntry] = {}
        self._mirrored: list[str] = []
        # A temporary root goes away with this object even if close() is never called.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True) if root is None else None

    def _write_stat(self, cpu_lines: str = "cpu  0 0 0 0 0 0 0 0 0 0\n") -> None:
        # <root>/stat's btime: the Unix time that virtual time 0 stands for, so that
        # btime + starttime/CLK_TCK gives process start times on the simulation's clock.
        with open(os.path.join(self.root, "stat"), "w") as fh:
            fh.write(f"{cpu_lines}btime {int(self.boot_time)}\n")

    def sync(self, entries: list[ProcEntry]) -> None:
        """Make ``root`` show exactly ``entries`` (creates new pids, removes gone ones)."""
        wanted = {e.pid: e for e in entries}
        for pid in [p for p in self._written if p not in wanted]:
            shutil.rmtree(os.path.join(self.root, str(pid)), ignore_errors=True)
            del self._written[pid]
        for pid, entry in wanted.items():
            if self._written.get(pid) != entry:
                self._write(entry)
                self._written[pid] = entry

    def _write(self, e: ProcEntry) -> None:
        directory = os.path.join(self.root, str(e.pid))
        if os.path.islink(directory):  # a mirrored host pid that a simulated one now takes
            os.remove(directory)
        os.makedirs(os.path.join(directory, "fd"), exist_ok=True)
        files = process_files(e)
        if e.cgroup:
            files["cgroup"] = e.cgroup.encode()
        for name, data in files.items():
            _put(os.path.join(directory, name), data)
        for name, target in process_links(e).items():
            try:
                os.symlink(target, os.path.join(directory, name))
            except FileExistsError:  # written before (the pid's entry changed): the links stay
                pass
        task = os.path.join(directory, "task", str(e.pid))
        os.makedirs(task, exist_ok=True)
        for name in ("stat", "status"):
            _put(os.path.join(task, name), files[name])

    def mirror_host(self, host_proc: str = "/proc", pid: int | None = None) -> None:
        """Link the host-wide files and ``pid`` (default: this process) and its ancestors to
        ``host_proc``, so psutil pointed at ``root`` also sees the client itself."""
        with open(os.path.join(host_proc, "stat")) as fh:
            self._write_stat("".join(line for line in fh if line.startswith("cpu")))
        for name in HOST_FILES:
            self._link(name, os.path.join(host_proc, name))
        pid = os.getpid() if pid is None else pid
        while pid > 0:
            if pid not in self._written:
                self._link(str(pid), os.path.join(host_proc, str(pid)))
            try:
                with open(os.path.join(host_proc, str(pid), "stat"), "rb") as fh:
                    raw = fh.read()
                pid = int(raw[raw.rfind(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                break

    def _link(self, name: str, target: str) -> None:
        path = os.path.join(self.root, name)
        if os.path.exists(target) and not os.path.lexists(path):
            os.symlink(target, path)
            self._mirrored.append(path)

    def close(self) -> None:
        """Remove the directory if this object created it."""
        if self._cleanup is not None:
            self._cleanup()
        else:
            for pid in list(self._written):
                shutil.rmtree(os.path.join(self.root, str(pid)), ignore_errors=True)
            for path in self._mirrored:
                try:
                    os.remove(path)
                except OSError:
                    pass
            try:
                os.remove(os.path.join(self.root, "stat"))
            except OSError:
                pass
        self._written.clear()
        self._mirrored.clear()
