"""Start-up CPU of one-shot commands (issue 22): `exporter --help`, `recommend --help`, `snapshot`.

    python bench/startup_bench.py                      # this tree against /work/main, 10 runs each
    python bench/startup_bench.py --old ../other-tree  # against another checkout
    python bench/startup_bench.py --runs 3 --no-old    # this tree only (the smoke form)
    python bench/startup_bench.py --bytecode cached    # as an installed exporter starts (.pyc files)

Each figure is the CPU time (user + system, ``getrusage(RUSAGE_CHILDREN)``) of one whole
``python -m exporter ...`` process, interpreter start included, so it is what a ``while sleep 15;
do exporter snapshot >> node.jsonl; done`` loop pays per turn. Old and new runs alternate, so a
busy machine slows both alike; the table gives the median and the minimum of each. Every run
starts in an empty temporary directory with PYTHONPATH set to the tree under test (``python -m``
puts the working directory first on sys.path: a run inside a checkout would import that one).

``snapshot --from`` reads a running exporter (started here from the new tree, serving the
simulated mixed node); the old tree has no ``--from``, so its row has no old figure. Below the
table, ``-X importtime`` of each tree for the simulated snapshot: how many modules, and which
take the longest (cumulative microseconds; modules the CLI imports through importlib, such as
the command's own module, are not listed by -X importtime, their imports are), each the least of
three runs.

``--bytecode``: ``as-is`` (the default) runs Python with this environment's settings; where
PYTHONDONTWRITEBYTECODE is set (this project's sandbox sets it) every run compiles the exporter's
modules from source again, about 0.1 s of a simulated snapshot. ``cached`` gives both trees a
bytecode cache in a private temporary directory (PYTHONPYCACHEPREFIX), filled by one untimed run of
each command first: what an installed exporter pays, since pip writes .pyc files at install.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent
DEFAULT_OLD = Path("/work/main")
SCENARIO = "h100-mixed-node"  # a shipped scenario, by name: the 8-GPU mixed node
AT = "600"  # seconds into it, when every lane has started (as exporter_bench)


ENV: dict[str, str] = dict(os.environ)  # the environment of every run (--bytecode cached changes it)


def cpu_seconds(tree: Path, args: list[str], cwd: str) -> float:
    """CPU of one ``python -m exporter ARGS`` run of ``tree``; raises when the command fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "exporter", *args], cwd=cwd, env={**ENV, "PYTHONPATH": str(tree)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: exporter {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def importtime(tree: Path, args: list[str], cwd: str, top: int, runs: int = 3) -> tuple[int, list[tuple[int, str]]]:
    """(modules imported, the ``top`` slowest as (cumulative us, name)), each module's least of ``runs``
    runs: -X importtime measures wall time, which a busy machine stretches at random."""
    least: dict[str, int] = {}
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", "exporter", *args], cwd=cwd,
                             env={**ENV, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=300)
        for line in out.stderr.splitlines():
            if line.startswith("import time:") and "|" in line:
                _, cumulative, name = line.split("|")
                if cumulative.strip().isdigit():
                    name = name.strip()
                    least[name] = min(least.get(name, int(cumulative)), int(cumulative))
    return len(least), sorted(((micros, name) for name, micros in least.items()), reverse=True)[:top]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_exporter(cwd: str) -> tuple[subprocess.Popen, str]:
    """The new tree serving the simulated node; returns once /api/v1/snapshot answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--simulate", SCENARIO, "--interval", "5",
                             "--listen", f"127.0.0.1:{port}"], cwd=cwd, env={**os.environ, "PYTHONPATH": str(NEW)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/api/v1/snapshot", timeout=5):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the exporter for snapshot --from never served a snapshot")


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):6.3f} / {min(values):6.3f}" if values else "     (n/a)     "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command and tree (default 10)")
    parser.add_argument("--old", type=Path, default=DEFAULT_OLD, help="the checkout to compare with (default /work/main)")
    parser.add_argument("--no-old", action="store_true", help="measure this tree only")
    parser.add_argument("--top", type=int, default=12, help="modules listed per -X importtime summary")
    parser.add_argument("--bytecode", choices=("as-is", "cached"), default="as-is",
                        help="as-is: this environment's bytecode settings; cached: a warm private .pyc cache")
    options = parser.parse_args(argv)
    old = None if options.no_old or not (options.old / "exporter" / "cli.py").is_file() else options.old.resolve()

    with tempfile.TemporaryDirectory(prefix="startup-bench-") as cwd:
        if options.bytecode == "cached":
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = os.path.join(cwd, "pycache")
        proc, url = start_exporter(cwd)
        try:
            cases = [("exporter --help", ["--help"], True),
                     ("exporter recommend --help", ["recommend", "--help"], True),
                     (f"exporter snapshot --simulate {SCENARIO} --at {AT}", ["snapshot", "--simulate", SCENARIO, "--at", AT],
                      True),
                     ("exporter snapshot --from URL", ["snapshot", "--from", url], False)]
            results = {}
            if options.bytecode == "cached":  # fill the cache: one untimed run of each command and tree
                for _, args, old_has_it in cases:
                    for tree in ([old] if old is not None and old_has_it else []) + [NEW]:
                        cpu_seconds(tree, args, cwd)
            for label, args, old_has_it in cases:
                new_cpu, old_cpu = [], []
                for _ in range(options.runs):
                    if old is not None and old_has_it:
                        old_cpu.append(cpu_seconds(old, args, cwd))
                    new_cpu.append(cpu_seconds(NEW, args, cwd))
                results[label] = (old_cpu, new_cpu)
            summaries = [(name, importtime(tree, cases[2][1], cwd, options.top))
                         for name, tree in (("old", old), ("new", NEW)) if tree is not None]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    print(f"CPU seconds per run (user+system, whole process), median / min of {options.runs}; "
          f"old = {old or '(none)'}, new = {NEW}; bytecode {options.bytecode}"
          f"{' (PYTHONDONTWRITEBYTECODE set: compiled every run)' if options.bytecode == 'as-is' and ENV.get('PYTHONDONTWRITEBYTECODE') else ''}"
          f"; load average {os.getloadavg()[0]:.2f}")
    print(f"{'command':58} {'old':>15}   {'new':>15}   new/old")
    for label, (old_cpu, new_cpu) in results.items():
        ratio = (f"{statistics.median(new_cpu) / statistics.median(old_cpu):.2f}" if old_cpu else "  -")
        print(f"{label:58} {fmt(old_cpu)}   {fmt(new_cpu)}   {ratio}")
    for name, (count, rows) in summaries:
        print(f"\n-X importtime, {name} tree, exporter {' '.join(cases[2][1])}: {count} modules; slowest (cumulative):")
        for micros, module in rows:
            print(f"  {micros / 1000:8.1f} ms  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
