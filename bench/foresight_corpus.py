"""Seeded random corpus of memory-contention episodes for bench/foresight_accuracy.py.

An episode is one memory domain (a whole GPU under MPS, or a MIG instance with MPS inside)
shared by 2-5 co-tenant MPS clients. First every workload runs alone once or twice (the
learning phase, so the exporter can learn its profile), then the co-tenants run together
(the test phase). Memory is drawn in relative units, then one factor per episode scales it
so that the simultaneous test-phase peak lands where the start pattern says: above the
device's memory (colliding: the simulator OOM-kills), at 85-99 % of it (near miss) or below
it with the peaks apart (staggered). Pure: the same (seed, episodes) gives the same corpus.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from exporter.catalog import MIB, board
from exporter.sim.model import Scenario
from exporter.sim.scenario import parse_scenario

GRID = 5  # the finest poll interval the bench uses: every process starts on it, missed spikes fall off it
MPS_SERVER_BYTES = 60 * MIB  # the simulated MPS server holds this much of the device as well
WHOLE = ("H100-80GB", "A100-80GB", "A100-40GB", "H200")
MIG = (("H100-80GB", "3g.40gb"), ("H100-80GB", "4g.40gb"), ("H100-80GB", "2g.20gb"), ("H100-80GB", "7g.80gb"),
       ("A100-80GB", "3g.40gb"), ("A100-40GB", "3g.20gb"), ("H200", "3g.71gb"))
SMALLER = {"H100-80GB": "3g.40gb", "A100-80GB": "3g.40gb", "A100-40GB": "3g.20gb", "H200": "3g.71gb"}
SHAPES = ("spike", "ramp", "leak", "flat", "multi")
PATTERNS = ("colliding", "near_miss", "staggered")
# Distinct jobs per shape; {n} fills a flag the workload key drops (seed, port, rank, output,
# /tmp path), so replicas of one job share a key and every template is a key of its own.
COMMANDS = {
    "spike": ("python3 render.py --scene city --seed {n}",
              "python3 generate.py --task ti2v-5B --ckpt_dir ./Wan2.2-TI2V-5B --base_seed {n} --save_file out{n}.mp4",
              "python3 sdxl_batch.py --model stabilityai/stable-diffusion-xl-base-1.0 --steps 30 --seed {n}"),
    "ramp": ("python3 finetune.py --model Qwen/Qwen2.5-7B-Instruct --lora-rank 16 --seed {n}",
             "python3 eval_harness.py --model mistralai/Mistral-7B-v0.3 --tasks mmlu --output_path /tmp/eval{n}",
             "python3 distill.py --teacher meta-llama/Llama-3.1-70B --student llama-1b --rank {n}"),
    "leak": ("python3 -m ipykernel_launcher -f /tmp/kernel-{n}.json",
             "python3 etl_features.py --input s3://lake/events --rank {n}",
             "python3 graph_sampler.py --dataset ogbn-papers100M --seed {n}"),
    "flat": ("python3 serve.py --model meta-llama/Llama-3.1-8B-Instruct --port {n}",
             "python3 embed_server.py --model BAAI/bge-large-en-v1.5 --port {n}",
             "python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-14B-Instruct --port {n}"),
    "multi": ("python3 train.py --config resnet50.yaml --seed {n}",
              "torchrun --nproc_per_node 1 train_vit.py --config vit_b16.yaml --seed {n}",
              "python3 train_asr.py --config whisper_small.yaml --eval-every 200 --seed {n}"),
}


@dataclass(frozen=True)
class Workload:
    """One job: its command template and memory shape over its age (relative units)."""

    shape: str
    command: str
    load: int  # seconds until it holds its base memory
    duration: int
    base: float
    peak: float
    spikes: tuple[int, ...] = ()  # ages where a spike (spike, multi) starts
    width: int = 0  # seconds a spike lasts
    ramp: tuple[int, int] = (0, 0)  # ages where the ramp starts and reaches its peak

    def points(self, narrow: bool = False) -> list[tuple[float, float]]:
        """(age, relative memory); ``narrow`` squeezes each spike into 3 s between two GRID polls."""
        if self.shape == "flat":
            return [(0, 0.05 * self.peak), (self.load, self.peak), (self.duration, self.peak)]
        out = [(0, 0.05 * self.base), (self.load, self.base)]
        if self.shape == "leak":
            return out + [(self.duration, self.peak)]
        if self.shape == "ramp":
            return out + [(self.ramp[0], self.base), (self.ramp[1], self.peak), (self.duration, self.peak)]
        for a in self.spikes:
            if narrow:  # polls land on multiples of GRID after the start: a+1..a+3 falls between them
                a = a - a % GRID + 1
                out += [(a, self.base), (a + 1, self.peak), (a + 2, self.peak), (a + 3, self.base)]
            else:
                out += [(a, self.base), (a + 2, self.peak), (a + self.width, self.peak),
                        (a + self.width + 2, self.base)]
        return out + [(self.duration, self.base)]

    def peak_age(self) -> float:
        """An age at which it holds its peak: what colliding starts line up."""
        if self.shape == "spike":
            return self.spikes[0] + self.width / 2
        if self.shape == "multi":
            return self.spikes[min(1, len(self.spikes) - 1)] + self.width / 2
        return {"ramp": self.ramp[1] + 10, "leak": self.duration - 10, "flat": self.load + 30}[self.shape]

    def peak_window(self) -> tuple[float, float]:
        """Ages from where it starts to climb to where it last is high: what staggered starts keep apart."""
        if self.shape == "spike":
            return self.spikes[0], self.spikes[0] + self.width + 2
        if self.shape == "multi":
            return self.spikes[0], self.duration
        return {"ramp": (self.ramp[0], self.duration), "leak": (self.load, self.duration),
                "flat": (0, self.duration)}[self.shape]


@dataclass(frozen=True)
class Run:
    """One process of an episode, in absolute virtual seconds and bytes."""

    pid: int
    cmdline: str
    workload: int  # index into Episode.workloads
    phase: str  # "learn" | "test"
    gpu: int  # 0: the test device; 1: the other device a first-run workload was learned on
    start: int
    end: float
    memory: tuple[tuple[float, int], ...]
    missed_spike: bool = False  # a learning run whose spikes fall between polls
    env: tuple[tuple[str, str], ...] = ()  # environment variables, as (name, value) pairs


@dataclass(frozen=True)
class Episode:
    index: int
    model: str
    mig: str | None  # MIG profile of the test device; None: the whole GPU
    capacity: int  # usable bytes of the test device
    other: tuple[str, str | None] | None  # (model, MIG profile) of the other device, if used
    workloads: tuple[Workload, ...]
    runs: tuple[Run, ...]
    test_start: int
    end: int
    slowdown: float
    ratio: float  # simultaneous test-phase peak / memory the clients can use
    classes: dict[str, str] = field(default_factory=dict)

    def test_runs(self) -> list[Run]:
        return [r for r in self.runs if r.phase == "test"]


def capacity(model: str, mig: str | None) -> int:
    """Usable bytes of a whole GPU (total - reserved) or of a MIG instance."""
    gpu = board(model)
    return gpu.memory_capacity_bytes if mig is None else gpu.profile(mig).memory_mib * MIB


def _workload(rng: random.Random, shape: str, command: str) -> Workload:
    size = rng.uniform(0.5, 1.0)  # jobs of one episode differ in size
    load = rng.randint(15, 90)
    if shape == "flat":
        return Workload(shape, command, rng.randint(30, 120), rng.randint(600, 1500), size, size)
    if shape == "leak":
        return Workload(shape, command, load, rng.randint(600, 1500), size * rng.uniform(0.2, 0.5), size)
    base = size * rng.uniform(0.4, 0.75)
    if shape == "ramp":
        duration = rng.randint(400, 1200)
        ramp = (int(duration * rng.uniform(0.4, 0.6)), int(duration * rng.uniform(0.85, 0.95)))
        return Workload(shape, command, load, duration, base, size, ramp=ramp)
    if shape == "spike":
        duration, width = rng.randint(300, 900), rng.randint(10, 60)
        first = rng.randint(max(load + 10, int(0.3 * duration)), int(0.8 * duration) - width)
        return Workload(shape, command, load, duration, base, size, (first,), width)
    duration, width, period = rng.randint(600, 1500), rng.randint(10, 40), rng.randint(60, 240)
    spikes = tuple(range(load + rng.randint(30, 120), duration - width - 5, period))
    return Workload(shape, command, load, duration, base, size, spikes, width)


def _pick_workloads(rng: random.Random, primary: str, count: int) -> list[Workload]:
    """The primary job plus count-1 other jobs, each with a command of its own."""
    taken: set[str] = set()
    out = []
    for i in range(count):
        shape = primary if i == 0 else rng.choice(SHAPES)
        free = [c for c in COMMANDS[shape] if c not in taken]
        if not free:
            shape = rng.choice([s for s in SHAPES if set(COMMANDS[s]) - taken])
            free = [c for c in COMMANDS[shape] if c not in taken]
        command = rng.choice(free)
        taken.add(command)
        out.append(_workload(rng, shape, command))
    return out


def _absolute(points, start: int, stretch: float, scale: float) -> tuple[tuple[float, int], ...]:
    return tuple((round(start + age * stretch, 3), int(value * scale)) for age, value in points)


def _up(t: float) -> int:
    return int(math.ceil(t / GRID) * GRID)


def _test_starts(rng: random.Random, pattern: str, tenants: list[Workload], t0: int, slow: float) -> list[int]:
    if pattern == "staggered":
        starts = [t0]
        for prev, cur in zip(tenants, tenants[1:]):
            gap = (prev.peak_window()[1] - cur.peak_window()[0]) * slow + rng.randint(30, 90)
            starts.append(starts[-1] + max(30, int(gap)))
        return starts
    if rng.random() < 0.5:  # started together (a batch submitted at once): peaks meet where they meet
        return [t0 + rng.randint(0, 12) * GRID for _ in tenants]
    meet = t0 + max(w.peak_age() for w in tenants) * slow + GRID  # their peaks line up here
    return [max(t0, int(meet - w.peak_age() * slow + rng.uniform(-8, 8))) for w in tenants]


def _peak_total(runs: list[tuple[int, float, list]]) -> float:
    """Highest sum of the runs' memory at one instant (piecewise linear: breakpoints suffice)."""
    def value(points, t):
        for (t0, v0), (t1, v1) in zip(points, points[1:]):
            if t0 <= t < t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return points[-1][1]
    # A run counts at its end too: the sum just before it exits is what the simulator sees.
    moments = sorted({t for start, end, points in runs for t, _ in points})
    return max(sum(value(p, t) for s, e, p in runs if s <= t <= e) for t in moments)


def make_episode(rng: random.Random, index: int) -> Episode:
    """One episode, drawn from ``rng`` only."""
    sharing = "mig+mps" if rng.random() < 0.4 else "mps"
    model, mig = rng.choice(MIG) if sharing == "mig+mps" else (rng.choice(WHOLE), None)
    pattern = rng.choices(PATTERNS, (0.5, 0.25, 0.25))[0]
    tenants_n = rng.randint(2, 3) if pattern == "staggered" else rng.randint(2, 5)  # staggered runs are serial
    replicas = rng.random() < 0.4
    primary = rng.choice(SHAPES)
    workloads = _pick_workloads(rng, primary, 1 if replicas else tenants_n)
    tenants = [0] * tenants_n if replicas else list(range(tenants_n))
    slowdown = rng.uniform(0.0, 0.25)
    first_run = rng.random() < 0.25
    unseen = set()
    if first_run:
        unseen = {0} if replicas else set(rng.sample(range(len(workloads)), rng.randint(1, len(workloads))))
    elsewhere = first_run and rng.random() < 0.5  # learned on another device size instead
    sizes_itself = rng.random() < 0.5
    other = ((model, SMALLER[model]) if mig is None else (model, None)) if elsewhere else None
    cap = capacity(model, mig)
    usable = cap - MPS_SERVER_BYTES

    # Learning plan first (draws only), bytes once the episode's scale is known.
    plan, t = [], GRID * 2
    for j, w in enumerate(workloads):
        if j in unseen and not elsewhere:
            continue
        for _ in range(2 if rng.random() < 0.2 else 1):
            narrow = w.shape in ("spike", "multi") and rng.random() < 0.10
            stretch = 1.0 if narrow else rng.uniform(0.95, 1.05)  # a narrow spike must stay off the grid
            plan.append((j, t, stretch, rng.uniform(0.97, 1.03), narrow, 1 if j in unseen else 0))
            t = _up(t + w.duration * stretch + rng.randint(30, 120))
    test_start = _up(t + 60)
    slow = 1.0 + slowdown
    starts = _test_starts(rng, pattern, [workloads[j] for j in tenants], test_start, slow)
    rel = [(s, s + workloads[j].duration * slow, [(s + a * slow, v) for a, v in workloads[j].points()])
           for j, s in zip(tenants, starts)]
    target = {"colliding": rng.uniform(1.05, 1.35), "near_miss": rng.uniform(0.85, 0.99),
              "staggered": rng.uniform(0.6, 0.92)}[pattern]
    scale = target * usable / _peak_total(rel)
    if max(w.peak for w in workloads) * scale * 1.03 > 0.95 * usable:  # one job alone must fit
        scale = 0.95 * usable / (1.03 * max(w.peak for w in workloads))
        target = scale * _peak_total(rel) / usable

    pids = rng.sample(range(2000, 99999), len(plan) + tenants_n)  # simulated MPS servers use 100000+
    runs = []
    for (j, start, stretch, jitter, narrow, gpu), pid in zip(plan, pids):
        w = workloads[j]
        device_scale = scale * jitter
        if gpu == 1 and (sizes_itself or other[1] is not None):  # a smaller device holds it only scaled
            device_scale *= (capacity(*other) - MPS_SERVER_BYTES) / usable
        runs.append(Run(pid, w.command.format(n=rng.randint(1, 9999)), j, "learn", gpu, start,
                        round(start + w.duration * stretch, 3), _absolute(w.points(narrow), start, stretch, device_scale),
                        narrow))
    for j, start, pid in zip(tenants, starts, pids[len(plan):]):
        w = workloads[j]
        runs.append(Run(pid, w.command.format(n=rng.randint(1, 9999)), j, "test", 0, start,
                        round(start + w.duration * slow, 3), _absolute(w.points(), start, slow, scale)))
    end = _up(max(r.end for r in runs) + 60)
    classes = {"sharing": sharing, "shape": primary, "pattern": pattern,
               "mix": "replicas" if replicas else "mixed", "slowdown": "0-10%" if slowdown < 0.10 else "10-25%",
               "first_run": "yes" if first_run else "no",
               "learned": ("elsewhere-" + ("scaled" if sizes_itself or mig is None else "unscaled")
                           if elsewhere else "never" if first_run else "here")}
    return Episode(index, model, mig, cap, other, tuple(workloads), tuple(runs), test_start, end,
                   slowdown, target, classes)


def make_corpus(seed: int, episodes: int) -> list[Episode]:
    """``episodes`` episodes drawn from ``seed``; episode i depends only on (seed, i)."""
    return [make_episode(random.Random(f"{seed}/{i}"), i) for i in range(episodes)]


def to_scenario(episode: Episode) -> Scenario:
    """The simulator scenario of an episode: GPU 0 holds the test device, GPU 1 the other one."""
    def gpu(model: str, mig: str | None) -> dict:
        return {"model": model, "mps": True} if mig is None else {"model": model, "mig": [{"profile": mig, "mps": True}]}
    gpus = [gpu(episode.model, episode.mig)]
    if episode.other is not None:
        gpus.append(gpu(*episode.other))
    data = {"name": f"foresight-accuracy-{episode.index}", "duration": episode.end, "gpus": gpus,
            "processes": scenario_processes(episode)}
    return parse_scenario(data, f"corpus episode {episode.index}")


def scenario_processes(episode: Episode) -> list[dict]:
    """The scenario's ``processes`` of an episode's runs (every corpus's shape): a run on a MIG
    device runs in its instance 0; ``env`` where the run has one."""
    migs = {0: episode.mig, 1: episode.other[1] if episode.other else None}
    processes = []
    for r in episode.runs:
        proc = {"pid": r.pid, "cmdline": r.cmdline, "gpu": r.gpu, "start": r.start, "end": r.end,
                "memory": [list(p) for p in r.memory]}
        if r.env:
            proc["env"] = dict(r.env)
        if migs[r.gpu] is not None:
            proc["mig"] = 0
        processes.append(proc)
    return processes
