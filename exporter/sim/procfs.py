"""A fake /proc directory holding the simulated processes, for the exporter's pid lookups.

Layout per live pid, as on Linux: ``<pid>/cmdline`` (argv joined by NUL, trailing NUL),
``<pid>/environ`` (KEY=VALUE entries joined by NUL, trailing NUL), ``<pid>/comm``
(name truncated to 15 bytes + newline), ``<pid>/status`` (``Name:`` and ``Pid:`` lines) and
``<pid>/cgroup`` (the pod's cgroup path, see exporter.sim.kube).
Only directories this class created are ever removed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Mapping

from exporter.backend.procinfo import CLOCK_TICKS


@dataclass(frozen=True)
class ProcEntry:
    """What /proc shows for one pid."""

    pid: int
    name: str
    cmdline: str
    environ: Mapping[str, str]
    start_seconds: float = 0.0  # virtual time the process started (becomes <pid>/stat starttime)
    cgroup: str = ""  # <pid>/cgroup contents (exporter.sim.kube.cgroup_file); "" = not written


def _argv(cmdline: str) -> list[str]:
    try:
        return shlex.split(cmdline)
    except ValueError:  # unbalanced quotes: keep the words as written
        return cmdline.split()


class FakeProcfs:
    """Keeps ``root`` in step with the set of live processes given to ``sync``."""

    def __init__(self, root: str | None = None, boot_time: float = 0.0):
        self.root = tempfile.mkdtemp(prefix="gpushare-sim-proc-") if root is None else root
        os.makedirs(self.root, exist_ok=True)
        # <root>/stat's btime: the Unix time that virtual time 0 stands for, so that
        # btime + starttime/CLK_TCK gives process start times on the exporter's clock.
        with open(os.path.join(self.root, "stat"), "w") as fh:
            fh.write(f"cpu  0 0 0 0 0 0 0 0 0 0\nbtime {int(boot_time)}\n")
        self._written: dict[int, ProcEntry] = {}
        # A temporary root goes away with this object even if close() is never called.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True) if root is None else None

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
        os.makedirs(directory, exist_ok=True)
        argv = _argv(e.cmdline) or [e.name]
        comm = e.name.encode()[:15].decode(errors="ignore")
        files = {
            "cmdline": b"".join(a.encode() + b"\0" for a in argv),
            "environ": b"".join(f"{k}={v}".encode() + b"\0" for k, v in e.environ.items()),
            "comm": (comm + "\n").encode(),
            "status": f"Name:\t{comm}\nState:\tS (sleeping)\nPid:\t{e.pid}\n".encode(),
            # proc(5) layout; only pid, comm, state, ppid and starttime (field 22, clock ticks) matter.
            "stat": (f"{e.pid} ({comm}) S 1 {e.pid} {e.pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 "
                     f"{round(e.start_seconds * CLOCK_TICKS)} 0 0\n").encode(),
        }
        if e.cgroup:
            files["cgroup"] = e.cgroup.encode()
        for name, data in files.items():
            with open(os.path.join(directory, name), "wb") as fh:
                fh.write(data)

    def close(self) -> None:
        """Remove the directory if this object created it."""
        if self._cleanup is not None:
            self._cleanup()
        else:
            for pid in list(self._written):
                shutil.rmtree(os.path.join(self.root, str(pid)), ignore_errors=True)
            try:
                os.remove(os.path.join(self.root, "stat"))
            except OSError:
                pass
        self._written.clear()
