"""Kubernetes attribution benchmark (issue 11): added poll cost, series churn per mode, resources.

    python bench/k8s_bench.py            # about 2-3 minutes on 2 cores
    python bench/k8s_bench.py --quick    # fewer polls and a 20-minute churn, under a minute

1. **Added poll cost** on the 8-GPU mixed node (examples/scenarios/h100-mixed-node.yaml at
   600 s, ~80 processes): the same node with every process in a pod (cgroup files in the fake
   /proc, pods served in-process as the API server and kubelet would), polled as ``serve``
   polls it (forecasts included), exporter-only CPU per poll (simulated driver excluded,
   bench/perf/anatomy.py), against the node without pods. Each case runs in a fresh process.
2. **Series created per hour** by ``--process-series`` mode on a churning node (8 time-sliced
   H100s; per GPU, serving pods whose workers restart every 5 minutes and a Job that starts a
   new pod every 2 minutes): distinct label sets of the per-process families seen by a
   Prometheus scraping every 15 s for one simulated hour.
3. **Resources** for the DaemonSet: CPU and RSS of ``exporter serve`` on the mixed node with
   pods, real time, polling every second (the simulator runs inside that process, so both are
   upper bounds of a real node's).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from exporter.sim.model import PodSpec, ProcessSpec, Scenario  # noqa: E402
from exporter.sim.scenario import load_scenario  # noqa: E402

MIXED = REPO / "examples" / "scenarios" / "h100-mixed-node.yaml"
MODES = ("pid", "pod", "workload")
GIB = 2**30
PROCESS_FAMILIES = ("gpushare_process_memory_used_bytes", "gpushare_process_sm_utilization_ratio",
                    "gpushare_mps_client_memory_limit_bytes", "gpushare_mps_client_active_thread_ratio",
                    "gpushare_process_memory_expected_peak_bytes")


def with_pods(scenario: Scenario, per_pod: int = 2) -> Scenario:
    """Every process of ``scenario`` in a pod: ``per_pod`` processes of one GPU share a container."""
    processes = []
    groups: dict[int, int] = {}
    runtimes = ("containerd", "cri-o", "docker")
    for spec in scenario.processes:
        n = groups[spec.gpu] = groups.get(spec.gpu, -1) + 1
        pod = PodSpec(namespace=f"team-{spec.gpu % 4}", name=f"job-g{spec.gpu}-{n // per_pod}", container="main",
                      uid=f"{spec.gpu:08x}-0000-4000-8000-{n // per_pod:012x}", runtime=runtimes[spec.gpu % 3],
                      cgroup_driver="systemd" if spec.gpu % 2 else "cgroupfs", cgroup_version=2, qos="burstable")
        processes.append(dataclasses.replace(spec, pod=pod, env={**spec.env, "HOSTNAME": pod.name}))
    return dataclasses.replace(scenario, processes=tuple(processes), name=scenario.name + "-pods")


def churn_node(hours: float) -> Scenario:
    """8 time-sliced H100s; per GPU 2 serving pods (worker restarts every 5 min) and a Job pod every 2 min."""
    from exporter.sim.model import GpuSpec

    duration = hours * 3600.0
    gpus = tuple(GpuSpec(index=i, model="H100-80GB", uuid=f"GPU-{i:08x}-1111-4111-8111-{i:012x}",
                         pci_bus_id=f"00000000:{0x10 + i:02X}:00.0", mig=None, mps=False) for i in range(8))
    processes = []
    pid = 10000
    for gpu in range(8):
        for serving in range(2):
            pod = PodSpec("serving", f"llm-{gpu}-{serving}-7d9f8b6c4-x2k9p", "server",
                          f"{gpu:08x}-{serving:04x}-4000-8000-{0:012x}", "containerd", "systemd", 2, "burstable")
            t = 0.0
            while t < duration:
                pid += 1
                processes.append(ProcessSpec(
                    pid=pid, name="python3", cmdline="python3 worker.py --port 8000", gpu=gpu, mig=None, start=t,
                    end=min(t + 300.0, duration), memory=((0.0, 6.0 * GIB),), activity={"sm_active": ((0.0, 0.2),)},
                    env={"HOSTNAME": pod.name}, pod=pod))
                t += 300.0
        t, job = 0.0, 0
        while t < duration:
            pid += 1
            job += 1
            pod = PodSpec("batch", f"embed-{gpu}-{job:06d}-b9wzn", "embed",
                          f"{gpu:08x}-ffff-4000-8000-{job:012x}", "cri-o", "systemd", 2, "besteffort")
            processes.append(ProcessSpec(
                pid=pid, name="python3", cmdline="python3 embed.py --shard 1", gpu=gpu, mig=None, start=t,
                end=min(t + 90.0, duration), memory=((0.0, 4.0 * GIB),), activity={"sm_active": ((0.0, 0.3),)},
                env={"HOSTNAME": pod.name}, pod=pod))
            t += 120.0
    return Scenario(name="churn-node", source="bench/k8s_bench.py:churn_node", duration=duration, gpus=gpus,
                    processes=tuple(processes), events=())


# -- 1. added poll cost (child process per case) ------------------------------------------------


def poll_cost_child(case: str, polls: int) -> dict:
    from perf.anatomy import gpushare_polls

    scenario = load_scenario(MIXED)
    if case != "no pods":
        scenario = with_pods(scenario)
    cost, exposition = gpushare_polls(scenario, 600.0, polls)
    return {"case": case, "exporter_ms": cost.cpu_exporter * 1000, "render_ms": cost.cpu_render * 1000,
            "series": sum(1 for line in exposition.text.splitlines() if not line.startswith(b"#")),
            "processes": sum(len(g.processes) for g in exposition.snapshot.gpus)}


def poll_costs(polls: int, repeats: int) -> list[dict]:
    out = []
    for case in ("no pods", "pods"):
        runs = []
        for _ in range(repeats):
            result = subprocess.run([sys.executable, __file__, "--child", case, str(polls)], capture_output=True,
                                    text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
            if result.returncode != 0:
                raise SystemExit(f"poll cost child failed: {result.stderr.strip().splitlines()[-1:]}")
            runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
        best = min(runs, key=lambda r: r["exporter_ms"])  # least disturbed by the other tenants of the machine
        out.append({**best, "runs_ms": [round(r["exporter_ms"], 2) for r in runs]})
    return out


# -- 2. series created per hour ------------------------------------------------------------------


def series_per_hour(hours: float, scrape: float = 15.0) -> dict[str, dict[str, int]]:
    from exporter.backend.sim import SimBackend
    from exporter.collectors.forecast import ForecastCollector
    from exporter.collectors.mps import MpsCollector
    from exporter.collectors.process import ProcessCollector
    from exporter.foresight import Foresight

    scenario = churn_node(hours)
    out = {}
    for mode in MODES:
        backend = SimBackend(scenario)
        foresight = Foresight()
        holder = {}
        collectors = [ProcessCollector(lambda: holder["s"], mode), MpsCollector(lambda: holder["s"], mode),
                      ForecastCollector(foresight, mode)]
        seen: dict[str, set] = {name: set() for name in PROCESS_FAMILIES}
        peak = 0
        backend.open()
        try:
            t = 0.0
            while t <= scenario.duration:
                backend.step_to(t)
                holder["s"] = backend.poll()
                foresight.observe(holder["s"])
                now = 0
                for collector in collectors:
                    for family in collector.collect():
                        for sample in family.samples:
                            if sample.name in seen:
                                seen[sample.name].add(tuple(sorted(sample.labels.items())))
                                now += sample.name == PROCESS_FAMILIES[0]
                peak = max(peak, now)
                t += scrape
        finally:
            backend.close()
        out[mode] = {"memory_series": len(seen[PROCESS_FAMILIES[0]]),
                     "memory_series_per_hour": round(len(seen[PROCESS_FAMILIES[0]]) / hours),
                     "all_process_families_per_hour": round(sum(len(s) for s in seen.values()) / hours),
                     "live_at_once_max": peak}
    out["processes_per_hour"] = round(len(scenario.processes) / hours)
    out["pods_per_hour"] = round(len({(p.pod.namespace, p.pod.name) for p in scenario.processes if p.pod}) / hours)
    return out


# -- 3. resources of a serve process -----------------------------------------------------------


def serve_resources(seconds: float) -> dict:
    """CPU % of a core and RSS of `exporter serve` on the mixed node with pods, polling every second."""
    import yaml  # noqa: F401  (the scenario is handed over as a pickle-free YAML-free path: see below)

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "serve_pods.py"
        script.write_text(
            "import sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n"
            "import k8s_bench\n"
            "from exporter.sim.scenario import load_scenario\n"
            "from exporter.backend.sim import SimBackend\n"
            "from exporter.commands import serve\n"
            "scenario = k8s_bench.with_pods(load_scenario(k8s_bench.MIXED))\n"
            "serve.commands.make_backend = lambda settings: SimBackend(scenario, speed=1.0, gpu_timeout=2.0)\n"
            "import exporter.cli\n"
            "sys.exit(exporter.cli.main(['serve', '--simulate', str(k8s_bench.MIXED), '--listen', '127.0.0.1:0',"
            " '--log-level', 'warning']))\n" % (str(REPO), str(HERE)))
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(5.0)  # start-up and the first polls are not steady state
            cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
            time.sleep(seconds)
            cpu1, t1 = _cpu_seconds(proc.pid), time.monotonic()
            rss = _rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return {"cpu_percent_of_core": 100 * (cpu1 - cpu0) / (t1 - t0), "rss_mib": rss / 1024, "seconds": seconds}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer polls, a 20-minute churn")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "POLLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(poll_cost_child(args.child[0], int(args.child[1]))))
        return 0
    polls, repeats, hours, serve_seconds = (10, 1, 1 / 3, 10.0) if args.quick else (20, 3, 1.0, 30.0)
    costs = poll_costs(polls, repeats)
    print("== 1. Poll cost on the 8-GPU mixed node at 600 s, exporter-only CPU per poll (1 s interval)")
    base = costs[0]["exporter_ms"]
    for row in costs:
        print(f"{row['case']:<10} {row['exporter_ms']:7.2f} ms = {row['exporter_ms'] / 10:5.2f} % of a core   "
              f"(render {row['render_ms']:.2f} ms; {row['series']} series; {row['processes']} processes; "
              f"runs {row['runs_ms']})")
    added = costs[1]["exporter_ms"] - base
    print(f"added by pods: {added:+.2f} ms per poll = {added / 10:+.3f} % of a core")
    series = series_per_hour(hours)
    print(f"\n== 2. Series created in {hours * 60:g} simulated minutes on a churning 8-GPU node "
          f"({series['processes_per_hour']} processes/h, {series['pods_per_hour']} pods/h), 15 s scrapes"
          + ("" if hours == 1 else " (per hour: x" + f"{1 / hours:g}" + " for pid and pod; workload is bounded)"))
    print(f"{'mode':<10}{'gpushare_process_memory_used_bytes':>36}{'all 5 per-process families':>28}"
          f"{'live at once (max)':>21}")
    for mode in MODES:
        row = series[mode]
        print(f"{mode:<10}{row['memory_series']:>36}{row['all_process_families_per_hour'] * hours:>28.0f}"
              f"{row['live_at_once_max']:>21}")
    resources = serve_resources(serve_seconds)
    print(f"\n== 3. exporter serve on the mixed node with pods (simulator inside: upper bounds)\n"
          f"CPU {resources['cpu_percent_of_core']:.1f} % of a core, RSS {resources['rss_mib']:.0f} MiB "
          f"over {resources['seconds']:g} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"poll_cost": costs, "series": series, "serve": resources}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
