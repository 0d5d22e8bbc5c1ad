"""Real-GPU check: the exporter's NVML backend on this host's GPUs, and the fake compared with them.

    python bench/real_gpu_smoke.py [--polls 5] [--no-serve]

On a host with an NVIDIA driver and GPU it:
1. opens the NVML backend (the same code as `exporter serve`), prints every GPU found
   (name, UUID, MIG mode and instances, processes, sharing);
2. times polls: the first (identity, profile table) and the next ``--polls`` (steady state),
   wall and CPU time, NVML calls per poll;
3. runs `exporter serve` on 127.0.0.1, fetches /metrics and lints it with `promtool check
   metrics` (skipped with a line when promtool is missing);
4. asks the same read-only questions (bench/real_gpu_probe.py) to the real GPU and to the
   simulator configured as the same model with the same MIG layout, and prints where the
   fake's answers differ: profile ids/names/SMs/memory, sizes, and which calls raise
   NotSupported (or are missing from the fake: FunctionNotFound).

Nothing is changed on the GPU: only Get/Query calls, plus the XID event subscription and
GPM sample buffers the exporter itself uses. Without a driver or GPU it prints one line
and exits 2. Exit 1 when the exporter could not serve or promtool rejected /metrics.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

import pynvml  # noqa: E402

import real_gpu_probe as probe  # noqa: E402
from exporter.backend.nvml import NvmlBackend  # noqa: E402
from exporter.errors import NoGpuError  # noqa: E402

PROG = "real_gpu_smoke"


def found(snapshot) -> None:
    print(f"driver {snapshot.driver_version}, {len(snapshot.gpus)} GPU(s)")
    for gpu in snapshot.gpus:
        state = "up" if gpu.up else f"DOWN ({gpu.error})"
        print(f"  GPU {gpu.index}: {gpu.name} {gpu.uuid} {state}, MIG {gpu.mig_mode}, sharing {gpu.sharing}, "
              f"{len(gpu.processes)} process(es), {len(gpu.mps_servers)} MPS server(s)")
        for inst in gpu.mig_instances:
            print(f"    MIG {inst.profile} gi {inst.gi} ci {inst.ci} start {inst.placement_start} "
                  f"SMs {inst.sm_count} memory {inst.memory_total_bytes} {inst.mig_uuid}")


def time_polls(backend: NvmlBackend, polls: int):
    """(first poll (wall s, cpu s, calls), steady medians, last snapshot)."""
    rows, snapshot = [], None
    for _ in range(polls + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        snapshot = backend.poll()
        rows.append((time.perf_counter() - wall, time.process_time() - cpu, backend.calls_last_poll))
        time.sleep(0.2)
    steady = sorted(rows[1:]) or rows
    return rows[0], steady[len(steady) // 2], snapshot


@contextmanager
def served(*extra: str):
    """`exporter serve` on a free 127.0.0.1 port: yields (process, /metrics URL, the first body or
    None with the reason printed), and stops it on the way out."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--listen", f"127.0.0.1:{port}",
                             "--log-level", "warning", *extra], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        body, deadline = None, time.monotonic() + 30
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            body = scrape(url)
            if body is None:
                time.sleep(0.3)
        if body is None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.poll() is not None else "timeout"
            print(f"serve: FAILED to serve /metrics ({err.splitlines()[-1] if err else 'no output'})")
        yield proc, url, body
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def scrape(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read()
    except OSError:
        return None


def serve_and_lint(save: str | None = None) -> bool:
    """`exporter serve`; promtool check metrics on its /metrics (kept in ``save`` when given)."""
    with served("--interval", "1") as (_, _, body):
        if body is None:
            return False
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        if save:
            Path(save).write_bytes(body)
        print(f"serve: /metrics {len(body)} bytes, {series} series")
        promtool = shutil.which("promtool")
        if promtool is None:
            print("promtool: not found, lint skipped")
            return True
        lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
        text = (lint.stdout + lint.stderr).decode(errors="replace").strip()
        print(f"promtool check metrics: {'ok' if lint.returncode == 0 else 'FAILED'}{': ' + text if text else ''}")
        return lint.returncode == 0


def real_answers(nv, index: int) -> dict:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    answers = {"gpu": probe.ask(nv, probe.GPU_PROBES, handle), "profiles": probe.profiles(nv, handle),
               "layout": None, "mig": {}}
    mode = answers["gpu"]["MIG mode"]
    if mode[0] == "ok" and mode[1].startswith("current 1"):
        answers["layout"] = probe.mig_layout(nv, handle)
        mig = probe.first_mig_handle(nv, handle)
        if mig is not None:
            answers["mig"] = probe.ask(nv, probe.MIG_PROBES, mig)
    return answers


def fake_answers(name: str, layout) -> dict | str:
    """The simulator's answers for one GPU of model ``name`` with MIG ``layout`` (None: off)."""
    from exporter.errors import UserError
    from exporter.sim import Simulation
    from exporter.sim.scenario import parse_scenario

    gpu = {"model": name}
    if layout is not None:
        gpu["mig"] = layout
    try:
        sim = Simulation(parse_scenario({"name": "real-gpu-mirror", "gpus": [gpu]}, "real GPU mirror"))
    except UserError as exc:
        return f"the simulator cannot mirror this GPU: {exc}"
    sim.install()
    try:
        pynvml.nvmlInit()
        try:
            return real_answers(pynvml, 0)
        finally:
            pynvml.nvmlShutdown()
    finally:
        sim.close()


def _kind(outcome) -> str:
    """What a dynamic answer says about support: NotFound (no samples/processes now) is an answer."""
    return "answers" if outcome[0] == "ok" or outcome[1] == "NotFound" else outcome[1]


# Answers that depend on how the host attaches the GPU, not on the board: the simulator models
# bare metal. On a VM with the GPU passed through (the lent H100 of 2026-11-26) NVML says
# virtualization mode 1 (pass-through), a display attached, and no NVLink (no fabric in the VM).
HOST_DEPENDENT = frozenset({"virtualization mode", "display mode", "NVLink fields (link count, version of link 0)",
                            "NVLink 0 state", "MIG: NVLink fields"})


def compare(real: dict, fake: dict) -> int:
    """Print every probe whose outcome differs; return how many differ.

    Static probes must match in value; dynamic ones (the mirror runs no workload) only in
    whether they answer or which error they raise. Host-dependent ones are printed apart
    ("HOST") and not counted.
    """
    statics = {label for label, _, _, static in probe.GPU_PROBES + probe.MIG_PROBES if static}
    diffs = 0
    for group in ("gpu", "mig"):
        for label, outcome in real[group].items():
            other = fake[group].get(label, ("error", "not asked"))
            same = outcome == other if label in statics else _kind(outcome) == _kind(other)
            if not same:
                tag = "HOST" if label in HOST_DEPENDENT else "DIFF"
                diffs += tag == "DIFF"
                print(f"  {tag} {label}: real {outcome[0]} {outcome[1]!s:.70} | fake {other[0]} {other[1]!s:.70}")
    for enum in sorted(set(real["profiles"]["table"]) | set(fake["profiles"]["table"])):
        a, b = real["profiles"]["table"].get(enum), fake["profiles"]["table"].get(enum)
        if a != b:
            diffs += 1
            print(f"  DIFF MIG profile enum {enum}: real {a} | fake {b}")
    if real["profiles"]["v1 call"] != fake["profiles"]["v1 call"]:
        diffs += 1
        print(f"  DIFF profile info v1 call: real {real['profiles']['v1 call']} | fake {fake['profiles']['v1 call']}")
    return diffs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=5, help="steady-state polls to time (default 5)")
    parser.add_argument("--no-serve", action="store_true", help="skip `exporter serve` + promtool")
    parser.add_argument("--save-metrics", metavar="FILE", help="write the served /metrics body to FILE")
    args = parser.parse_args(argv)
    backend = NvmlBackend(procfs_root="/proc")
    try:
        backend.open()
    except NoGpuError as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}; this check needs a host with an NVIDIA GPU and driver")
        return 2
    try:
        first, steady, snapshot = time_polls(backend, max(1, args.polls))
        found(snapshot)
        print(f"poll: first {first[0] * 1e3:.1f} ms wall / {first[1] * 1e3:.1f} ms CPU / {first[2]} NVML calls; "
              f"steady (median of {max(1, args.polls)}) {steady[0] * 1e3:.1f} ms wall / {steady[1] * 1e3:.1f} ms CPU / "
              f"{steady[2]} NVML calls")
        real = {gpu.index: (gpu.name, real_answers(pynvml, gpu.index)) for gpu in snapshot.gpus if gpu.up}
    finally:
        backend.close()
    healthy = True if args.no_serve else serve_and_lint(args.save_metrics)
    for index, (name, answers) in real.items():
        print(f"fake vs real, GPU {index} ({name}, MIG layout {answers['layout']}):")
        fake = fake_answers(name, answers["layout"])
        if isinstance(fake, str):
            print(f"  skipped: {fake}")
            continue
        diffs = compare(answers, fake)
        print(f"  {diffs} difference(s) in {len(answers['gpu']) + len(answers['mig'])} probes and "
              f"{len(answers['profiles']['table'])} profile slots")
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
