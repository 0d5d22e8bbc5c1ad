"""Real-DCGM check: the exporter's DCGM backend on this host, next to its NVML backend.

    python bench/real_dcgm_smoke.py [--polls 5] [--interval 1] [--dcgm-address HOST[:PORT]|PATH]
                                    [--dcgm-bindings DIR]
    python bench/real_dcgm_smoke.py --simulate examples/scenarios/a30-mig-dcgm.yaml   # dry run on the fake

On a host with DCGM (datacenter-gpu-manager-4-core, or 3.x) and an NVIDIA GPU it:
1. loads DCGM's Python bindings (install paths or --dcgm-bindings) and reaches a host engine
   (embedded, or nv-hostengine with --dcgm-address), printing its version;
2. prints how DCGM's entities map to NVML's: gpuId -> NVML index (by UUID), GPU-instance
   entity -> NVML GPU-instance id, and the profiling fields each GPU supports;
3. polls the DCGM backend ``--polls`` times, ``--interval`` seconds apart, and prints per GPU and
   per MIG GPU instance the pipe activity, next to what the NVML backend alone reads (GPM:
   Hopper and newer only), plus power, temperature and SM clock from both (DCGM reads NVML,
   so they agree up to the moment each was sampled);
4. prints the state of each data source (gpushare_exporter_source_available) with its reason;
5. times a poll of each backend: wall, CPU, NVML and DCGM calls.

Nothing is changed: no DCGM or GPU setting is set, profiling is never paused or resumed.
The only things created are the exporter's own DCGM groups and watches, removed on exit (a
standalone nv-hostengine also drops them when the connection closes). Without DCGM's
bindings, or without an NVIDIA driver, it prints one line and exits 2. Exit 1 when DCGM was
reached but delivered no activity on a GPU that supports it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from exporter.config import parse_dcgm_address  # noqa: E402
from exporter.errors import UserError  # noqa: E402

PROG = "real_dcgm_smoke"


def backends(args):
    """(DCGM backend, NVML-only backend), both opened; UserError (one line) when either cannot be."""
    from exporter.backend.choose import DcgmOptions
    from exporter.backend.dcgm_bindings import search_dirs
    from exporter.backend.dcgm_session import DcgmAddress

    address = None
    if args.dcgm_address:
        kind, _, target = parse_dcgm_address(args.dcgm_address).partition("://")
        address = DcgmAddress(kind, target)
    options = DcgmOptions(bindings_dirs=search_dirs(args.dcgm_bindings), address=address, interval=args.interval)
    if args.simulate:
        from exporter.backend.sim import SimBackend

        dcgm, nvml = SimBackend(args.simulate, backend="dcgm", dcgm=options), SimBackend(args.simulate)
        for backend in (dcgm, nvml):
            backend.open()
            backend.step_to(0.0)
        return dcgm, nvml
    from exporter.backend.choose import open_backend
    from exporter.backend.nvml import NvmlBackend

    dcgm = open_backend("dcgm", NvmlBackend(), options)  # bindings first: this check is about DCGM
    try:
        nvml = open_backend("nvml", NvmlBackend(), options)
    except BaseException:
        dcgm.close()
        raise
    return dcgm, nvml


def inner(backend):
    """The DcgmBackend / NvmlBackend behind a SimBackend (or the backend itself)."""
    return getattr(backend, "inner", None) or backend


def poll(backend, clock: list[float], interval: float, simulated: bool):
    if simulated:
        clock[0] += interval
        backend.step_to(clock[0])
    wall, cpu = time.perf_counter(), time.process_time()
    snapshot = backend.poll()
    return snapshot, time.perf_counter() - wall, time.process_time() - cpu


def mapping(dcgm) -> None:
    session = inner(dcgm).source.session
    if session is None:
        print(f"DCGM: not connected: {inner(dcgm).source.down_reason}")
        return
    print(f"DCGM {session.version or '(version unknown)'} through {session.where}, bindings {session.b.directory}")
    for gpu_id, index in sorted(session.gpu_index.items()):
        gis = session.gi_entities.get(index, {})
        watch = session.profiling.get(index)
        print(f"  DCGM gpuId {gpu_id} -> NVML GPU {index}; GPU-instance entities -> NVML GI: "
              f"{ {e: gi for e, gi in sorted(gis.items())} or 'none'}; profiling fields watched: "
              f"{list(watch.fields) if watch else 'none'}")


def fmt(value, scale=1.0, unit="") -> str:
    return "-" if value is None else f"{value * scale:.3g}{unit}"


def compare(dcgm_snap, nvml_snap) -> int:
    """Print both backends' readings side by side; count GPUs DCGM gave no activity for."""
    missing = 0
    nvml_gpus = {g.uuid: g for g in nvml_snap.gpus}
    for gpu in dcgm_snap.gpus:
        other = nvml_gpus.get(gpu.uuid)
        print(f"GPU {gpu.index} {gpu.name} ({'MIG' if gpu.mig_mode else 'no MIG'}):")
        for label, a, b in (("power W", gpu.power_watts, other and other.power_watts),
                            ("temperature C", gpu.temperature_celsius, other and other.temperature_celsius),
                            ("SM clock MHz", gpu.clocks_hertz.get("sm"), other and other.clocks_hertz.get("sm"))):
            scale = 1e-6 if "MHz" in label else 1.0
            print(f"  {label:<14} dcgm {fmt(a, scale):>8}   nvml {fmt(b, scale):>8}")
        rows = [("GPU", gpu.activity, other.activity if other else None)]
        others = {i.gi: i for i in (other.mig_instances if other else ())}
        rows += [(f"GI {i.gi} {i.profile}", i.activity, others[i.gi].activity if i.gi in others else None)
                 for i in gpu.mig_instances]
        for label, act, nvml_act in rows:
            pipes = " ".join(f"{name.replace('_active', '')}={fmt(value)}" for name, value in act.items())
            gpm = fmt(nvml_act.sm_active) if nvml_act else "-"
            print(f"  {label:<18} dcgm: {pipes}   nvml sm_active: {gpm}")
        if gpu.up and all(v is None for _, v in gpu.activity.items()):
            missing += 1
    return missing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=5, help="polls of each backend (default 5)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    parser.add_argument("--dcgm-address", help="nv-hostengine HOST[:PORT] or socket PATH (default: embedded)")
    parser.add_argument("--dcgm-bindings", help="directory of DCGM's Python bindings (default: install paths)")
    parser.add_argument("--simulate", metavar="SCENARIO", help="dry run against the simulator instead")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(message)s")
    try:
        dcgm, nvml = backends(args)
    except (UserError, ValueError) as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}; this check needs DCGM and an NVIDIA GPU")
        return 2
    clock = [0.0]
    try:
        for _ in range(2):  # the first poll maps DCGM's entities, the second has a full sampling window
            poll(dcgm, clock, args.interval, bool(args.simulate))
            poll(nvml, clock, 0.0, bool(args.simulate))
            if not args.simulate:
                time.sleep(args.interval)
        mapping(dcgm)
        timings = {"dcgm": [], "nvml": []}
        for _ in range(max(1, args.polls)):
            dcgm_snap, *dcgm_cost = poll(dcgm, clock, args.interval, bool(args.simulate))
            nvml_snap, *nvml_cost = poll(nvml, clock, 0.0, bool(args.simulate))
            timings["dcgm"].append((*dcgm_cost, inner(dcgm).calls_last_poll, inner(dcgm).dcgm_calls_last_poll))
            timings["nvml"].append((*nvml_cost, inner(nvml).calls_last_poll, 0))
            if not args.simulate:
                time.sleep(args.interval)
        missing = compare(dcgm_snap, nvml_snap)
        for name, status in sorted(dcgm_snap.sources.items()):
            print(f"source {name}: {'available' if status.available else 'UNAVAILABLE: ' + status.reason}")
        for name, rows in timings.items():
            rows.sort()
            wall, cpu, nvml_calls, dcgm_calls = rows[len(rows) // 2]
            print(f"poll {name}: {wall * 1e3:.1f} ms wall / {cpu * 1e3:.1f} ms CPU / {nvml_calls} NVML calls / "
                  f"{dcgm_calls} DCGM calls (median of {len(rows)})")
        profiling = dcgm_snap.sources.get("dcgm_profiling")
        return 1 if missing and profiling is not None and profiling.available else 0
    finally:
        dcgm.close()
        nvml.close()


if __name__ == "__main__":
    raise SystemExit(main())
