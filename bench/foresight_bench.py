"""Foresight benchmark: OOM lead time and false alerts on replayed scenarios.

Replays synthetic polls straight into :class:`exporter.foresight.Foresight` (no NVML, no
simulator, no Prometheus) and applies the contention alerts' condition: headroom < 0 on a
device for at least FOR_SECONDS. For each scenario it reports when that alert would fire,
when the memory actually overflows (the OOM) and the lead time between them; on the safe
scenarios every alerting poll is a false alert. Targets (issue 3): lead >= 5 min, 0 false alerts.

    python bench/foresight_bench.py [--interval 15] [--sim]

``--sim`` also replays examples/scenarios (Wan together/staggered after a solo learning run,
and the 8-GPU mixed node from scratch) through the simulator and the real NVML backend.

Each scenario first lets the exporter watch one solo run of every profiled workload (the
learning run), then replays the scenario proper.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.foresight import Foresight  # noqa: E402
from exporter.snapshot import GpuInfo, MigInstance, ProcessInfo, Snapshot  # noqa: E402

GiB = 2**30
FOR_SECONDS = 30.0  # the `for` of GpuMemoryContentionPredicted / MigMemoryContentionPredicted
T0 = 1_750_000_000.0


@dataclass
class Job:
    """A process: command line, placement, start (seconds after the phase start), memory(age)."""

    cmd: str
    gpu: int
    start: float
    duration: float
    memory: Callable[[float], int]
    gi: int | None = None


@dataclass
class Device:
    """A GPU (gi None, mps or time-sliced) or a MIG instance with its usable bytes."""

    gpu: int
    capacity: int
    gi: int | None = None
    profile: str = ""


@dataclass
class Scenario:
    name: str
    devices: list[Device]
    learn: list[Job]  # solo runs watched first, one after the other
    jobs: list[Job]
    safe: bool  # True: must never alert
    horizon: float = 1500.0
    notes: str = ""
    pids: dict = field(default_factory=dict)


def wan(scale: float = 1.0, base: float = 22, peak: float = 33, duration: float = 510.0, tail: float = 30.0):
    """Wan-like memory: 20 s load to ``base`` GiB, ``peak`` GiB for the last ``tail`` s; time stretched by scale."""
    def memory(age: float) -> int:
        a = age / scale
        if a < 20:
            return int(base * GiB * a / 20)
        return int((base if a < duration - tail else peak) * GiB)
    return memory


def flat(gib: float) -> Callable[[float], int]:
    return lambda age: int(gib * GiB * min(1.0, age / 10))


def sawtooth(low: float, high: float, period: float) -> Callable[[float], int]:
    """Training with an evaluation spike for the last fifth of every period."""
    return lambda age: int((high if age % period > 0.8 * period else low) * GiB)


def leak(start: float, per_minute: float) -> Callable[[float], int]:
    return lambda age: int((start + per_minute * age / 60) * GiB)


def snapshot(t: float, scenario: Scenario, jobs: list[Job], phase_start: float) -> Snapshot:
    """The host at Unix time t with the alive jobs of one phase."""
    alive = [j for j in jobs if phase_start + j.start <= t < phase_start + j.start + j.duration]
    gpus = []
    for index in sorted({d.gpu for d in scenario.devices}):
        devices = [d for d in scenario.devices if d.gpu == index]
        procs = []
        for j in alive:
            if j.gpu != index:
                continue
            pid = scenario.pids.setdefault((id(j), phase_start), 1000 + len(scenario.pids))
            age = t - phase_start - j.start
            procs.append(ProcessInfo(pid=pid, name="python3", cmdline=j.cmd, gpu_index=index, gi=j.gi,
                                     ci=None if j.gi is None else 0, used_memory_bytes=j.memory(age),
                                     is_mps_client=True, start_time=phase_start + j.start))
        mig = devices[0].gi is not None
        instances = []
        for k, d in enumerate(devices if mig else []):
            used = sum(p.used_memory_bytes for p in procs if p.gi == d.gi)
            instances.append(MigInstance(d.gi, 0, k, f"MIG-{index}-{d.gi}", d.profile, 9, 4 * k, 4, 60,
                                         d.capacity, used, d.capacity - used))
        used = sum(p.used_memory_bytes for p in procs)
        total = sum(d.capacity for d in devices)
        gpus.append(GpuInfo(index=index, uuid=f"GPU-{index}", name="bench", pci_bus_id=f"0:{index}", up=True,
                            mig_mode=mig, sharing="mig+mps" if mig else "mps", memory_total_bytes=total,
                            memory_used_bytes=used, memory_free_bytes=total - used,
                            mig_instances=tuple(instances), processes=tuple(procs)))
    return Snapshot(timestamp=t, backend="bench", driver_version="0", poll_duration_seconds=0.0, gpus=tuple(gpus))


def run(scenario: Scenario, interval: float) -> dict:
    """Replay one scenario; alert time, OOM time, lead, false alert polls and observe() cost."""
    foresight = Foresight()
    t = T0
    for job in scenario.learn:  # solo learning runs, one after the other
        phase, solo = t, Job(job.cmd, job.gpu, 5.0, job.duration, job.memory, job.gi)
        while t <= phase + 5.0 + job.duration + 2 * interval:
            foresight.observe(snapshot(t, scenario, [solo], phase), now=t)
            t += interval
    start, negative_since, alert_at, oom_at, alert_polls, costs = t, {}, None, None, 0, []
    min_headroom = None
    while t <= start + scenario.horizon:
        snap = snapshot(t, scenario, scenario.jobs, start)
        began = time.perf_counter()
        foresight.observe(snap, now=t)
        costs.append(time.perf_counter() - began)
        for row in foresight.result().devices:
            key = (row.gpu, row.gi)
            headroom = row.forecast.headroom_bytes
            if headroom is not None:
                min_headroom = headroom if min_headroom is None else min(min_headroom, headroom)
            if headroom is not None and headroom < 0:
                negative_since.setdefault(key, t)
                if t - negative_since[key] >= FOR_SECONDS:
                    alert_polls += 1
                    alert_at = alert_at or t
            else:
                negative_since.pop(key, None)
        for d in scenario.devices:
            used = sum(p.used_memory_bytes for g in snap.gpus if g.index == d.gpu for p in g.processes
                       if p.gi == d.gi)
            if used > d.capacity and oom_at is None:
                oom_at = t
        t += interval
    return {
        "alert_at": None if alert_at is None else alert_at - start,
        "oom_at": None if oom_at is None else oom_at - start,
        "lead": None if alert_at is None or oom_at is None else oom_at - alert_at,
        "false_alert_polls": alert_polls if scenario.safe else 0,
        "observe_ms": 1000 * statistics.mean(costs),
        "min_headroom_gib": min_headroom / GiB,
    }


def scenarios() -> list[Scenario]:
    """The Wan 2.2 story on an H100 (together / staggered, on time and 1.5x slower), MIG+MPS and a mixed node."""
    h100 = [Device(0, 81559 * 2**20 - 512 * 2**20)]
    cmd = "python3 generate.py --task ti2v-5B --ckpt_dir ./Wan2.2-TI2V-5B --base_seed {} --save_file out{}.mp4"
    learn = [Job(cmd.format(1, 1), 0, 0, 510, wan())]
    out = []
    for slow in (1.0, 1.5):
        for name, offsets, safe in (("together", (0, 0, 0), False), ("staggered-60s", (0, 60, 120), True)):
            jobs = [Job(cmd.format(i + 7, i), 0, 10 + o, 510 * slow, wan(slow)) for i, o in enumerate(offsets)]
            out.append(Scenario(f"wan-{name}{'' if slow == 1 else '-slowed-1.5x'}", h100, learn, jobs, safe))
    mig = [Device(0, 40 * GiB, 1, "3g.40gb"), Device(0, 40 * GiB, 2, "3g.40gb")]
    serve = "python3 serve.py --model qwen-7b --port {}"
    mig_learn = [Job(serve.format(1), 0, 0, 400, wan(1, 9, 14, 400, 40), 1)]
    for name, offsets, safe in (("together", (0, 0, 0), False), ("staggered-90s", (0, 90, 180), True)):
        jobs = [Job(serve.format(8000 + i), 0, 10 + o, 400, wan(1, 9, 14, 400, 40), 1) for i, o in enumerate(offsets)]
        jobs.append(Job("python3 embed.py", 0, 0, 1400, flat(20), 2))
        out.append(Scenario(f"mig+mps-{name}", mig, mig_learn, jobs, safe))
    mixed_devices = [Device(0, 79 * GiB), Device(1, 40 * GiB, 1, "3g.40gb"), Device(1, 40 * GiB, 2, "3g.40gb")]
    train = "python3 train.py --config resnet.yaml --seed {}"
    mixed_learn = [Job(train.format(1), 0, 0, 600, sawtooth(18, 26, 120)), mig_learn[0]]
    mixed_jobs = [
        Job("vllm serve llama-3.1-8b --port 8000", 0, 0, 1500, flat(20)),
        Job(train.format(2), 0, 30, 600, sawtooth(18, 26, 120)),
        Job("jupyter-kernel --ip 0.0.0.0", 0, 0, 1500, leak(4, 0.5)),
        Job(serve.format(1), 1, 10, 400, wan(1, 9, 14, 400, 40), 1),
        Job(serve.format(2), 1, 120, 400, wan(1, 9, 14, 400, 40), 1),
        Job("python3 embed.py", 1, 0, 1500, flat(25), 2),
    ]
    out.append(Scenario("mixed-node", mixed_devices, mixed_learn, mixed_jobs, True))
    return out


SIM_CASES = (  # (scenario file, learn from the first process alone first, must stay quiet)
    ("wan22-h100-mps-together.yaml", True, False),
    ("wan22-h100-mps-staggered.yaml", True, True),
    ("h100-mixed-node.yaml", False, True),
)


def sim_run(name: str, learn_first: bool, interval: float) -> dict:
    """Replay an examples/scenarios file through the simulator and the real NVML backend."""
    import logging

    from exporter.sim.scenario import load_scenario

    logging.disable(logging.WARNING)  # the fault scenarios log every injected NVML error
    scenario = load_scenario(Path(__file__).resolve().parent.parent / "examples" / "scenarios" / name)
    if not learn_first:
        return replay_sim(Foresight(), scenario, 0.0, interval)
    return replay_sim(Foresight(), after_solo_run(scenario), scenario.duration or 1800.0, interval)


def after_solo_run(scenario):
    """The scenario after a solo run of its first process, as one scenario: both phases then
    share the simulated host clock that the fake /proc start times are on, so learned ages hold."""
    import dataclasses

    if scenario.events:
        raise ValueError(f"{scenario.name}: events are not shifted behind a learning run")
    offset = scenario.duration or 1800.0
    shift = lambda timeline: tuple((t + offset, v) for t, v in timeline)  # noqa: E731
    later = tuple(dataclasses.replace(p, start=p.start + offset, end=None if p.end is None else p.end + offset,
                                      memory=shift(p.memory), activity={k: shift(v) for k, v in p.activity.items()})
                  for p in scenario.processes)
    return dataclasses.replace(scenario, duration=2 * offset, processes=scenario.processes[:1] + later)


def replay_sim(foresight: Foresight, scenario, test_start: float, interval: float) -> dict:
    """Poll a scenario to its end; alert (headroom < 0 for FOR_SECONDS) and OOM times from test_start on.

    Foresight reads the snapshot's clock, which the fake /proc start times use (see after_solo_run)."""
    from exporter.backend.sim import SimBackend

    backend = SimBackend(scenario)
    backend.open()
    since, alert_at, oom_at, alerts, t = {}, None, None, 0, 0.0
    try:
        while t <= (scenario.duration or 1800.0):
            backend.step_to(t)
            snapshot = backend.poll()
            foresight.observe(snapshot)
            for row in foresight.result().devices if t >= test_start else ():
                key = (row.gpu, row.gi)
                if row.forecast.headroom_bytes is not None and row.forecast.headroom_bytes < 0:
                    if t - since.setdefault(key, t) >= FOR_SECONDS:
                        alerts += 1
                        alert_at = t - test_start if alert_at is None else alert_at
                else:
                    since.pop(key, None)
            if oom_at is None and sum(snapshot.simulation.oom_kills.values()):
                oom_at = t - test_start
            t += interval
    finally:
        backend.close()
    return {"alert_at": alert_at, "oom_at": oom_at, "alert_polls": alerts,
            "lead": None if alert_at is None or oom_at is None else oom_at - alert_at}


def fmt(seconds: float | None) -> str:
    """'-' or whole seconds."""
    return "-" if seconds is None else f"{seconds:.0f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=15.0, help="poll interval in seconds (default 15)")
    parser.add_argument("--sim", action="store_true", help="also replay examples/scenarios through the simulator")
    args = parser.parse_args()
    print(f"{'scenario':32} {'alert at':>9} {'OOM at':>8} {'lead':>7} {'false':>6} {'min headroom':>13} {'observe':>9}")
    ok = True
    for scenario in scenarios():
        r = run(scenario, args.interval)
        print(f"{scenario.name:32} {fmt(r['alert_at']):>9} {fmt(r['oom_at']):>8} {fmt(r['lead']):>7} "
              f"{r['false_alert_polls']:>6} {r['min_headroom_gib']:>10.2f}GiB {r['observe_ms']:>7.2f}ms")
        if scenario.safe:
            ok &= r["false_alert_polls"] == 0 and r["oom_at"] is None
        else:
            ok &= r["lead"] is not None and r["lead"] >= 300
    if args.sim:
        print(f"\n{'simulated scenario':32} {'alert at':>9} {'OOM at':>8} {'lead':>7} {'false':>6}")
        for name, learn_first, safe in SIM_CASES:
            r = sim_run(name, learn_first, args.interval)
            false = r["alert_polls"] if safe else 0
            print(f"{name:32} {fmt(r['alert_at']):>9} {fmt(r['oom_at']):>8} {fmt(r['lead']):>7} {false:>6}")
            ok &= (false == 0 and r["oom_at"] is None) if safe else (r["lead"] or 0) >= 300
    print("targets met (lead >= 300 s, 0 false alerts):", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
