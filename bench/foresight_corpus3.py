"""Third foresight corpus for bench/foresight_accuracy.py (issue 24): written independently of
the first two (only the harness's Episode shape is shared) and never tuned on.

An episode is one memory domain, the test device: a whole GPU under MPS or time-slicing, an MPS
server inside a MIG instance, or a MIG instance time-sliced between processes (MIG only). Its
tenants are 2-4 replicas of one job or 2-4 different jobs, of the families in
bench/foresight_families3.py (LLM fine-tunes, RLHF, vLLM/TGI and JAX preallocation, Triton,
batch embedding, notebooks, CI smoke tests, caching-allocator staircases, fragmentation creep).
First every learned workload runs alone on the test device 1-3 times (each run with its own
jitter: +-3 % size for the jobs that size themselves by their data, -4..+5 % time); then the
tenants run together, slowed 0-30 % by each other (a CI job runs 2-4 times in a row).

One factor per episode sizes the jobs that are not sized by the device, so that the highest
simultaneous use of the test phase (`ratio`, MPS server included) lands where the pattern says:
colliding 1.04-1.35 x the device (the simulator OOM-kills), near miss 0.92-0.98 (2-8 % short),
staggered 0.6-0.9 with starts spaced one after another (started together they would overflow),
quiet 0.4-0.85. First runs (35 %): workload 0 was learned on a device of another size
(other_size), declares its size (declared, GPUSHARE_EXPECTED_PEAK rounded up by its operator),
is never seen but grows steadily (trend), or is never seen and jumps (never: the ceiling class,
a spike nothing could foresee). `first_oom` is the ground truth the simulator must reproduce:
the first instant the test device's memory sum exceeds it. Same (seed, episodes), same corpus.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from exporter.catalog import MIB, board
from exporter.sim.model import DEFAULT_DRIVER_VERSION
from exporter.sim.scenario import parse_scenario
from foresight_corpus import Episode, Run, scenario_processes  # the harness's episode shape, shared by the corpora (not their episodes)
from foresight_families3 import FAMILIES, JUMPS, TRENDS, Workload, make_workload, points, volatile

GiB = 2**30
POLL = 5.0  # the bench's default poll: a learning run whose spikes all fall between polls missed them
MPS_SERVER = 60 * MIB  # the simulator's nvidia-cuda-mps-server, on an MPS device from its first client on
SHARING = {  # sharing -> (weight, devices: (model, MIG profile or None))
    "mps": (35, (("H100-80GB", None), ("A100-80GB", None), ("H200", None), ("L40S", None), ("A100-40GB", None))),
    "time_slicing": (25, (("L4", None), ("L40S", None), ("A100-40GB", None), ("H100-80GB", None), ("A30", None))),
    "mig+mps": (25, (("A100-80GB", "3g.40gb"), ("H100-80GB", "4g.40gb"), ("H200", "3g.71gb"), ("A30", "2g.12gb"),
                     ("H100-NVL", "3g.47gb"), ("B200", "3g.90gb"))),
    "mig": (15, (("A100-40GB", "3g.20gb"), ("H100-80GB", "3g.40gb"), ("H200", "2g.35gb"), ("A100-80GB", "4g.40gb"))),
}
PATTERNS = {"colliding": 40, "near_miss": 20, "staggered": 20, "quiet": 20}
TARGETS = {"colliding": (1.04, 1.35), "near_miss": (0.92, 0.98), "staggered": (0.6, 0.9), "quiet": (0.4, 0.85)}
FIRST_RUNS = {"other_size": 30, "declared": 30, "trend": 20, "never": 20}


@dataclass(frozen=True)
class Episode3(Episode):
    first_oom: float | None = None  # ground truth: the first instant the test device overflows (the first kill)


def capacity(model: str, mig: str | None) -> int:
    """Usable bytes: the whole GPU's total less reserved memory, or the MIG instance's memory (its
    size on the scenarios' driver branch, as the simulator sizes it)."""
    gpu = board(model, driver_version=DEFAULT_DRIVER_VERSION)
    return gpu.memory_capacity_bytes if mig is None else gpu.profile(mig).memory_mib * MIB


def total(model: str, mig: str | None) -> int:
    """What a framework sizing itself by the device reads as its total (cudaMemGetInfo)."""
    gpu = board(model, driver_version=DEFAULT_DRIVER_VERSION)
    return gpu.memory_total_mib * MIB if mig is None else gpu.profile(mig).memory_mib * MIB


def _pick(rng: random.Random, weights: dict) -> str:
    return rng.choices(list(weights), weights=[w[0] if isinstance(w, tuple) else w for w in weights.values()])[0]


def _value(pts, t: float, left: bool = False) -> float:
    """A timeline at t: linear between points; at a step the value after it (before it when left)."""
    for (a0, v0), (a1, v1) in zip(pts, pts[1:]):
        if a0 <= t < a1 if not left else a0 < t <= a1:
            return v0 + (v1 - v0) * (t - a0) / (a1 - a0)
    return pts[0][1] if t <= pts[0][0] else pts[-1][1]


def _sum(runs, t: float, left: bool) -> float:
    return sum(_value(r.memory, t, left) for r in runs if (r.start < t <= r.end if left else r.start <= t < r.end))


def overflow(runs, cap: int) -> tuple[float | None, float]:
    """(first instant the runs' sum exceeds cap, highest sum): the simulator's first OOM kill."""
    breaks = sorted({t for r in runs for t in (r.start, r.end, *(a for a, _ in r.memory)) if t != math.inf})
    first, top, prev = None, 0.0, None
    for b in breaks:
        left, right = _sum(runs, b, True), _sum(runs, b, False)
        top = max(top, left, right)
        if first is None and prev is not None and left > cap:
            first = prev[0] + (cap - prev[1]) / (left - prev[1]) * (b - prev[0])
        if first is None and right > cap:
            first = b
        prev = (b, right)
    return first, top


@dataclass
class _Proto:
    """A run before the episode's size factor is known: ages and levels."""

    w: int
    phase: str
    gpu: int
    start: float
    stretch: float
    pts: list
    dur: float
    cmdline: str
    env: tuple = ()

    def run(self, base: float, pid: int = 0, env: tuple = ()) -> Run:
        mem = tuple((round(self.start + a * self.stretch, 1), int(v * base)) for a, v in self.pts)
        return Run(pid, self.cmdline, self.w, self.phase, self.gpu, round(self.start, 1),
                   round(self.start + self.dur * self.stretch, 1), mem, env=self.env + env)


def _proto(rng: random.Random, w: Workload, index: int, phase: str, gpu: int, start: float, slow: float) -> _Proto:
    pts, dur = points(w, rng)
    assert all(a0 <= a1 for (a0, _), (a1, _) in zip(pts, pts[1:])), (w.family, pts)  # a timeline never goes back
    stretch = rng.uniform(0.96, 1.05) * slow
    # size jitter for jobs sized by their data; a device-sized job is exact, a notebook random already
    jitter = 1.0 if w.fixed or w.family == "jupyter" else rng.uniform(0.97, 1.03)
    pts = [(a, v * jitter) for a, v in pts if a < dur] or [(0, pts[0][1])]
    return _Proto(index, phase, gpu, start, stretch, pts, dur, w.command.format(vol=volatile(w.family, rng)), w.env)


def _server(runs: list[Run], mps: bool) -> list[Run]:
    if not mps or not runs:
        return []
    t = min(r.start for r in runs)
    return [Run(0, "nvidia-cuda-mps-server", -1, "server", runs[0].gpu, t, math.inf, ((t, MPS_SERVER),))]


def _try(rng: random.Random, index: int, sharing: str, pattern: str, learned: str) -> Episode3 | None:
    """One draw of the episode's jobs, sizes and starts in its classes; None when the draw breaks them."""
    model, mig = rng.choice(SHARING[sharing][1])
    cap, tot, mps = capacity(model, mig), total(model, mig), sharing in ("mps", "mig+mps")
    first_run = learned != "here"
    fam0 = rng.choice(TRENDS) if learned == "trend" else rng.choice(JUMPS) if learned == "never" else _pick(
        rng, {f: v[2] for f, v in FAMILIES.items()})
    replicas, n = rng.random() < 0.35 and fam0 not in ("jupyter", "ci"), rng.randint(2, 4)
    fams = [fam0] if replicas else [fam0] + rng.choices(list(FAMILIES), [v[2] for v in FAMILIES.values()], k=n - 1)
    target = rng.uniform(*TARGETS[pattern])
    budget = target * cap / tot  # the test phase's highest use, as a share of the device's total
    shares = [rng.uniform(0.2, 0.5) * budget if FAMILIES[f][1] else None for f in fams]
    for i, f in enumerate(fams):
        if f == "jax" and rng.random() < 0.5 and 0.75 < 0.8 * budget:
            shares[i] = 0.75  # the default preallocation, where it leaves room
    if all(s is not None for s in shares):  # only device-sized jobs: their shares make the pattern
        shares = [s * budget / sum(shares) / (n if replicas else 1) for s in shares]
    elif sum(s for s in shares if s) > 0.9 * budget:
        return None  # no room left for the jobs sized by their data
    workloads = [make_workload(rng, f, s) for f, s in zip(fams, shares)]
    if len({w.command for w in workloads}) < len(workloads):
        return None  # two jobs that would share a workload key: draw again
    weights = [rng.uniform(0.5, 1.0) for _ in workloads]
    slowdown = rng.uniform(0.0, 0.3)

    # learning phase: each learned workload alone on the test device (first-run "other_size": on GPU 1)
    protos: list[_Proto] = []
    t = 10.0
    for i, w in enumerate(workloads):
        if first_run and i == 0:
            if learned == "other_size":
                protos.append(_proto(rng, w, i, "learn", 1, 10.0, 1.0))
            continue
        for _ in range(rng.randint(2, 4) if w.family == "ci" else rng.choice((1, 2, 2, 3))):
            protos.append(_proto(rng, w, i, "learn", 0, t, 1.0))
            t += protos[-1].dur * protos[-1].stretch + rng.uniform(30, 120)
    t0 = math.ceil(max([t] + [p.start + p.dur * p.stretch + 60 for p in protos]))
    # test phase: the tenants together, slowed by each other
    tenants = [0] * n if replicas else list(range(len(workloads)))
    test: list[list[_Proto]] = []
    offset, spread = 0.0, rng.choice((60, 300, 600, 1200))
    for j, i in enumerate(tenants):
        if pattern == "staggered" and j:
            prev = test[-1][-1]
            offset = prev.start - t0 + prev.dur * prev.stretch * rng.uniform(0.5, 1.05)
        elif j:
            offset = rng.uniform(0, spread)
        start, chain = t0 + 20 + offset, []
        for _ in range(rng.randint(2, 4) if workloads[i].family == "ci" else 1):
            chain.append(_proto(rng, workloads[i], i, "test", 0, start, 1 + slowdown))
            start += chain[-1].dur * chain[-1].stretch + rng.uniform(20, 120)
        test.append(chain)
    flat = [p for chain in test for p in chain]

    def base(p: _Proto, f: float) -> float:
        if workloads[p.w].fixed:
            return tot if p.gpu == 0 else total(*other)
        return weights[p.w] * f

    def ratio(f: float, together: bool = False) -> float:
        runs = [p.run(base(p, f)) for p in flat]
        if together:  # every tenant started with the first
            runs = [_Proto(p.w, p.phase, 0, flat[0].start + (p.start - c[0].start), p.stretch, p.pts, p.dur,
                           p.cmdline).run(base(p, f)) for c in test for p in c]
        return overflow(runs + _server([r for r in runs], mps), cap)[1] / cap

    other = None
    lo, hi = 0.0, 4.0 * cap
    if all(w.fixed for w in workloads):
        f = 0.0
    else:
        if ratio(lo) >= target:
            return None
        for _ in range(32):
            f = (lo + hi) / 2
            lo, hi = (f, hi) if ratio(f) < target else (lo, f)
        f = hi
    final = ratio(f)
    if not (final > 1.0 if pattern == "colliding" else 0.9 <= final < 0.99 if pattern == "near_miss" else final < 0.9):
        return None
    if pattern == "staggered" and ratio(f, together=True) <= 1.02:
        return None
    if any(not w.fixed and weights[i] * f > 0.9 * cap for i, w in enumerate(workloads)):
        return None  # a job that would not fit its device alone
    if learned == "other_size":
        need = weights[0] * f * 1.15
        kind = [d for d in SHARING[sharing][1] if d[0] != model and abs(capacity(*d) - cap) > 0.1 * cap
                and (workloads[0].fixed or capacity(*d) > need)]
        if not kind:
            return None
        other = rng.choice(kind)
    # an operator's annotation: the job's nominal peak, rounded up to whole GiB with some margin
    declared = (("GPUSHARE_EXPECTED_PEAK", f"{math.ceil(_peak(workloads[0], weights[0] * f, tot) * rng.uniform(1.0, 1.12) / GiB)}GiB"),)
    runs = [p.run(base(p, f), env=declared if learned == "declared" and p.w == 0 and p.phase == "test" else ())
            for p in protos + flat]
    runs.sort(key=lambda r: (r.start, r.gpu, r.workload))
    runs = [Run(2000 + k, r.cmdline, r.workload, r.phase, r.gpu, r.start, r.end, r.memory, _missed(r), r.env)
            for k, r in enumerate(runs)]
    for g, c in ((0, cap), (1, capacity(*other) if other else 0)):
        learn = [r for r in runs if r.gpu == g and r.phase == "learn"]
        if learn and overflow(learn + _server(learn, mps), c)[0] is not None:
            return None  # a learning run alone must fit
    on0 = [r for r in runs if r.gpu == 0]
    first_oom, _ = overflow([r for r in on0 if r.phase == "test"] + _server(on0, mps), cap)
    if (first_oom is not None) != (pattern == "colliding"):
        return None
    classes = {"sharing": sharing, "shape": workloads[0].shape, "pattern": pattern,
               "mix": "replicas" if replicas else "mixed", "slowdown": f"{int(slowdown * 10) * 10}-{int(slowdown * 10) * 10 + 10}%",
               "first_run": "yes" if first_run else "no", "learned": learned, "family": workloads[0].family}
    end = math.ceil(max(r.end for r in runs) + 90)
    return Episode3(index, model, mig, cap, other, tuple(workloads), tuple(runs), t0, end, slowdown, final, classes,
                    first_oom)


def _peak(w: Workload, scaled: float, tot: int) -> float:
    """The peak an operator would declare for the workload: its nominal top."""
    return (w.p("util") + w.p("graphs") if w.family == "vllm" else w.p("frac")) * tot if w.fixed else scaled


def _missed(r: Run) -> bool:
    """A learning run whose highest level no poll of the bench (every POLL s from 0) saw."""
    if r.phase != "learn":
        return False
    top = max(v for _, v in r.memory)
    k0, k1 = math.ceil(r.start / POLL), math.ceil(r.end / POLL)
    return max((_value(r.memory, k * POLL) for k in range(k0, k1)), default=0) < 0.9 * top


def make_episode(rng: random.Random, index: int) -> Episode3:
    # the classes are drawn once, so that draws rejected below do not skew their shares
    sharing, pattern = _pick(rng, SHARING), _pick(rng, PATTERNS)
    learned = _pick(rng, FIRST_RUNS) if rng.random() < 0.35 else "here"
    for _ in range(500):
        episode = _try(rng, index, sharing, pattern, learned)
        if episode is not None:
            return episode
    raise RuntimeError(f"corpus 3 episode {index}: no valid draw in 500 tries")


def make_corpus(seed: int, episodes: int) -> list[Episode3]:
    return [make_episode(random.Random(f"corpus3/{seed}/{i}"), i) for i in range(episodes)]


def to_scenario(episode: Episode3):
    """The simulator scenario: GPU 0 is the test device, GPU 1 the device of another size."""
    mps = episode.classes["sharing"] in ("mps", "mig+mps")

    def gpu(model: str, mig: str | None) -> dict:
        if mig is None:
            return {"model": model, "mps": True, "compute_mode": "exclusive_process"} if mps else {"model": model}
        return {"model": model, "mig": [{"profile": mig, "mps": True} if mps else {"profile": mig}]}
    gpus = [gpu(episode.model, episode.mig)] + ([gpu(*episode.other)] if episode.other else [])
    data = {"name": f"foresight-corpus3-{episode.index}", "duration": episode.end, "gpus": gpus,
            "processes": scenario_processes(episode)}
    return parse_scenario(data, f"corpus 3 episode {episode.index}")
