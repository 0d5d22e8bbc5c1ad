"""A second, independent corpus of shared-memory episodes for bench/foresight_accuracy.py --corpus 2.

Written from a list of workload families seen on shared GPUs, not from the first corpus's
episodes (bench/foresight_corpus.py), and never tuned on: its figures say how the forecast
holds on workloads it was not built around. Each episode is one device (a whole GPU under
MPS, or an MPS server inside a MIG instance) shared by 2-4 clients; every workload first runs
alone (on this device, on a device of another size, or never), then the clients run together.

Families (memory over a run's life, as fractions of the workload's size):

- ``train``: weights and optimizer load, then training steps, with an evaluation spike every
  few minutes and a larger checkpoint spike (sometimes only seconds wide);
- ``kvserve``: an inference server: weights, then a KV cache that grows with load and shrinks
  when the load falls, in waves;
- ``diffuse``: image/video diffusion: a denoising plateau, then a VAE decode spike at the end;
- ``notebook``: loads a model, drops it, loads a bigger one, drops part of it;
- ``leaky``: a data loader that leaks a little every second until its run ends.

Jitter: every run stretches its timing by a few percent and its sizes by +-3 %; co-tenants in
the test phase run 0-30 % slower together. Classes: sharing (mps, mig+mps), shape (the family
of the largest workload), pattern (colliding, near_miss, staggered), mix (replicas, mixed),
slowdown, first_run, learned (here, elsewhere, declared, never).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from exporter.catalog import MIB, MODELS
from foresight_corpus import Episode, scenario_processes  # the harness's episode shape, shared by both corpora (not their episodes)
from exporter.sim.scenario import parse_scenario

GiB = 2**30
MPS_SERVER_BYTES = 64 * MIB  # what the simulated MPS server holds, with a little margin
WHOLE = ("L40S", "A100-80GB", "H100-NVL", "H200", "A30")
MIG = (("A100-80GB", "4g.40gb"), ("H100-NVL", "3g.47gb"), ("A100-40GB", "3g.20gb"), ("H200", "2g.35gb"),
       ("H100-80GB", "2g.20gb"))
ELSEWHERE = {"L40S": ("A100-80GB", None), "A100-80GB": ("H100-NVL", None), "H100-NVL": ("H200", "3g.71gb"),
             "H200": ("H100-80GB", None), "A30": ("L40S", None)}
FAMILIES = ("train", "kvserve", "diffuse", "notebook", "leaky")
COMMANDS = {
    "train": ("torchrun --nproc_per_node=1 finetune.py --model {m} --lr 2e-5 --output_dir /ckpt/{r}",
              "accelerate launch train_lora.py --base {m} --seed {r} --rank 16",
              "deepspeed --num_gpus 1 pretrain.py --config ds_{m}.json --save /tmp/run{r}"),
    "kvserve": ("python3 -m vllm.entrypoints.openai.api_server --model {m} --port {r}",
                "text-generation-launcher --model-id {m} --port {r} --max-batch-total-tokens 32000",
                "tritonserver --model-repository=/models/{m} --http-port={r}"),
    "diffuse": ("python3 main.py --listen --port {r} --preview-method auto --ckpt {m}",
                "python3 generate_video.py --task t2v --ckpt_dir /weights/{m} --seed {r}",
                "python3 sample_sdxl.py --model {m} --steps 30 --output /tmp/img{r}.png"),
    "notebook": ("/opt/conda/bin/python3 -m ipykernel_launcher -f /root/.local/share/jupyter/runtime/kernel-{r}.json",
                 "python3 -m ipykernel_launcher --profile {m} -f /tmp/kernel-{r}.json"),
    "leaky": ("python3 preprocess.py --shards /data/{m} --workers 8 --log /tmp/pre{r}.log",
              "ray::ImageDecodeWorker --dataset {m} --seed {r}"),
}
MODEL_NAMES = ("llama3-8b", "qwen2-7b", "mistral-7b", "sdxl-base", "wan2.1-1.3b", "resnet152", "bert-large",
               "whisper-large", "phi3-mini", "gemma2-9b")


@dataclass(frozen=True)
class Workload:
    family: str
    cmdline: str
    size: int  # bytes at the top of its shape (before per-run jitter)
    curve: tuple[tuple[float, float], ...]  # (age s, fraction of size) piecewise linear; steps repeat an age
    declared: bool = False  # first seen in the test phase with GPUSHARE_EXPECTED_PEAK set

    @property
    def shape(self) -> str:  # the harness's --list names a workload by its shape
        return self.family


@dataclass(frozen=True)
class Run:
    pid: int
    cmdline: str
    workload: int
    phase: str  # "learn" | "test"
    gpu: int  # 0: the test device; 1: the device a workload was learned on elsewhere
    start: int
    end: float
    memory: tuple[tuple[float, int], ...]
    env: tuple[tuple[str, str], ...] = ()
    missed_spike: bool = False  # a learning run whose narrow spike falls between two 5 s polls


def capacity(model: str, mig: str | None) -> int:
    m = MODELS[model]
    return (m.memory_capacity_bytes if mig is None else m.profile(mig).memory_mib * MIB) - MPS_SERVER_BYTES


def _shape(rng: random.Random, family: str) -> tuple[tuple[float, float], ...]:
    """Normalised memory over a run's life (peak 1.0)."""
    u = rng.uniform
    if family == "train":
        load, base, steps = u(15, 60), u(0.55, 0.8), rng.randint(3, 6)
        period, eval_w, eval_h = u(90, 200), u(15, 45), u(0.08, 0.18)
        ckpt_w = rng.choice((u(3, 8), u(15, 40)))
        pts = [(0.0, 0.05), (load, base)]
        t = load
        for i in range(steps):
            t += period
            top = 1.0 if i == steps - 1 else base + eval_h
            width = ckpt_w if i == steps - 1 else eval_w
            pts += [(t, base), (t, top), (t + width, top), (t + width, base)]
            t += width
        return tuple(pts + [(t + u(20, 60), base)])
    if family == "kvserve":
        weights, pts, t = u(0.35, 0.6), [(0.0, 0.02)], u(20, 50)
        pts.append((t, weights))
        waves = rng.randint(2, 4)
        tops = [u(0.7, 0.95) for _ in range(waves)]
        tops[rng.randrange(waves)] = 1.0
        for top in tops:
            rise, hold, fall = u(60, 180), u(30, 120), u(40, 120)
            pts += [(t + rise, top), (t + rise + hold, top), (t + rise + hold + fall, weights + u(0.02, 0.15))]
            t += rise + hold + fall
        return tuple(pts)
    if family == "diffuse":
        load, plateau, denoise, decode = u(10, 40), u(0.55, 0.75), u(120, 600), u(8, 40)
        return ((0.0, 0.05), (load, plateau), (load + denoise, plateau), (load + denoise, 1.0),
                (load + denoise + decode, 1.0), (load + denoise + decode, plateau * 0.3), (load + denoise + decode + 5, plateau * 0.3))
    if family == "notebook":
        a, idle1, b, idle2 = u(0.3, 0.55), u(60, 240), u(0.9, 1.0), u(60, 300)
        t1 = u(20, 60)
        return ((0.0, 0.01), (t1, a), (t1 + idle1, a), (t1 + idle1, 0.08), (t1 + idle1 + u(20, 60), 0.08),
                (t1 + idle1 + u(80, 120), 1.0 if b > 0.95 else b), (t1 + idle1 + 120 + idle2, 1.0),
                (t1 + idle1 + 120 + idle2, u(0.3, 0.6)), (t1 + idle1 + 180 + idle2, u(0.3, 0.6)))
    base, dur = u(0.35, 0.6), u(400, 1400)
    return ((0.0, 0.05), (30.0, base), (30 + dur, 1.0))


def _workload(rng: random.Random, family: str, size: int, declared: bool = False) -> Workload:
    model = rng.choice(MODEL_NAMES)
    cmd = rng.choice(COMMANDS[family]).replace("{m}", model)
    return Workload(family, cmd, size, _shape(rng, family), declared)


def _run_points(w: Workload, start: float, stretch: float, scale: float) -> tuple[tuple[float, int], ...]:
    return tuple((round(start + age * stretch, 1), max(MIB, int(w.size * scale * frac))) for age, frac in w.curve)


def _duration(w: Workload) -> float:
    return w.curve[-1][0]


def _peak_with_starts(ws: list[Workload], starts: list[float], stretches: list[float]) -> float:
    """Most memory held at once (bytes) by runs of ``ws`` started at ``starts``."""
    runs = [_run_points(w, s, k, 1.0) for w, s, k in zip(ws, starts, stretches)]
    moments = sorted({t for r in runs for t, _ in r})
    return max(sum(_value(r, t) for r in runs) for t in moments)


def _value(points, t: float) -> float:
    if t < points[0][0] or t > points[-1][0]:
        return 0.0
    value = points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            value = v1 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
            if t < t1:
                return value
    return value


def _missed(points, grid: float = 5.0) -> bool:
    """A spike (a step up held under two polls, then down) that no poll on the grid sees."""
    for (t0, v0), (t1, v1), (t2, v2), (t3, v3) in zip(points, points[1:], points[2:], points[3:]):
        if t0 == t1 and v1 > v0 and t2 == t3 and v3 < v2 and t2 - t1 < 2 * grid:
            if int(t1 // grid) == int(t2 // grid) and t1 % grid != 0:
                return True
    return False


def make_episode(rng: random.Random, index: int) -> Episode:
    sharing = rng.choice(("mps", "mps", "mig+mps"))
    model, mig = rng.choice(WHOLE) if sharing == "mps" else rng.choice(MIG), None
    if sharing == "mig+mps":
        model, mig = model
    cap = capacity(model, mig)
    pattern = rng.choices(("colliding", "near_miss", "staggered"), (0.5, 0.25, 0.25))[0]
    mix = rng.choice(("replicas", "mixed", "mixed"))
    tenants = rng.choice((2, 2, 3, 3, 4))
    primary = rng.choice(FAMILIES)
    families = [primary] * tenants if mix == "replicas" else [primary] + [rng.choice(FAMILIES) for _ in range(tenants - 1)]
    weights = [rng.uniform(0.5, 1.0) for _ in families]
    weights[0] = 1.0
    learned = rng.choices(("here", "elsewhere", "declared", "never"), (0.6, 0.15, 0.15, 0.1))[0]
    if learned in ("elsewhere",) and model not in ELSEWHERE:
        learned = "here"
    protos = [_workload(rng, f, GiB, declared=(learned == "declared" and i == 0)) for i, f in enumerate(families)]
    if mix == "replicas":
        protos = [protos[0]] * tenants
        weights = [1.0] * tenants
    else:  # two different jobs that happen to share a command line would be one workload: tell them apart
        seen: set[str] = set()
        for i, w in enumerate(protos):
            if w.cmdline in seen:
                protos[i] = Workload(w.family, f"{w.cmdline} --config job{i}.yaml", w.size, w.curve, w.declared)
            seen.add(protos[i].cmdline)
    slowdown = rng.uniform(0.0, 0.3)
    stretches = [1.0 + slowdown * rng.uniform(0.6, 1.0) for _ in protos]
    # Test-phase starts: together (jittered) or staggered by most of the longest run.
    if pattern == "staggered":
        gap = max(_duration(w) for w in protos) * rng.uniform(0.5, 0.9)
        offsets = [i * gap + rng.uniform(0, 20) for i in range(tenants)]
    else:
        offsets = sorted(rng.uniform(0, 90) for _ in protos)
    offsets = [round(o) for o in offsets]
    unit = [Workload(w.family, w.cmdline, int(GiB * k), w.curve, w.declared) for w, k in zip(protos, weights)]
    together = _peak_with_starts(unit, [float(o) for o in offsets], stretches)
    aligned = _peak_with_starts(unit, [0.0] * tenants, [1.0] * tenants)
    target = {"colliding": rng.uniform(1.06, 1.4), "near_miss": rng.uniform(0.86, 0.97),
              "staggered": rng.uniform(0.8, 0.95)}[pattern]
    scale = target * cap / together
    biggest = max(weights) * scale * GiB * 1.04
    if biggest > 0.92 * cap:  # a learning run alone must fit
        scale *= 0.92 * cap / biggest
    workloads = [Workload(w.family, w.cmdline, int(w.size * scale), w.curve, w.declared) for w in unit]
    ratio = together * scale / cap
    other = ELSEWHERE.get(model) if learned == "elsewhere" else None
    if other is not None and workloads[0].size * 1.1 > capacity(*other):
        other, learned = None, "here"  # it would not fit there alone: learn it here instead
    if learned == "never" and primary == "leaky":
        learned = "trend"  # never seen, but its steady growth is a basis
    runs: list[Run] = []
    pid = 1000 + 10 * index
    t = 5
    first_index: dict[int, int] = {}
    for i, w in enumerate(protos):
        first_index.setdefault(id(w), i)
    distinct = sorted(first_index.values())  # replicas are learned once
    for i in distinct:
        w = workloads[i]
        if learned in ("declared", "never") and i == 0:
            continue
        gpu = 1 if other is not None and i == 0 else 0
        for n in range(rng.choice((1, 2, 2, 3))):
            k, s = rng.uniform(0.97, 1.05), rng.uniform(0.97, 1.03)
            pts = _run_points(w, t, k, s)
            runs.append(Run(pid, w.cmdline.replace("{r}", str(rng.randrange(10**5, 10**6))), i, "learn", gpu, t,
                            pts[-1][0] + 1, pts, missed_spike=_missed(pts)))
            pid += 1
            t = int(pts[-1][0]) + rng.randint(10, 40)
    test_start = t + 30
    for i, (w, off, k) in enumerate(zip(workloads, offsets, stretches)):
        start = test_start + off
        pts = _run_points(w, start, k * rng.uniform(0.98, 1.03), rng.uniform(0.97, 1.03))
        env = ()
        if w.declared:
            env = (("GPUSHARE_EXPECTED_PEAK", f"{w.size * rng.uniform(1.0, 1.08) / GiB:.1f}GiB"),)
        runs.append(Run(pid, w.cmdline.replace("{r}", str(rng.randrange(10**5, 10**6))), i, "test", 0, start,
                        pts[-1][0] + 1, pts, env))
        pid += 1
    end = int(max(r.end for r in runs)) + 90
    slow_class = "0-10%" if slowdown < 0.1 else "10-30%"
    classes = {"sharing": sharing, "shape": primary, "pattern": pattern, "mix": mix, "slowdown": slow_class,
               "first_run": "no" if learned == "here" else "yes", "learned": learned,
               "aligned": "over" if aligned * scale > cap else "under"}
    return Episode(index, model, mig, cap, other, tuple(workloads), tuple(runs), test_start, end, slowdown, ratio,
                   classes)


def make_corpus(seed: int, episodes: int) -> list[Episode]:
    return [make_episode(random.Random(f"corpus2/{seed}/{i}"), i) for i in range(episodes)]


def to_scenario(episode: Episode):
    """The simulator scenario: GPU 0 is the test device, GPU 1 the device learned on elsewhere."""
    def gpu(model: str, mig: str | None) -> dict:
        return {"model": model, "mps": True} if mig is None else {"model": model, "mig": [{"profile": mig, "mps": True}]}
    gpus = [gpu(episode.model, episode.mig)]
    if episode.other is not None:
        gpus.append(gpu(*episode.other))
    data = {"name": f"foresight-corpus2-{episode.index}", "duration": episode.end, "gpus": gpus,
            "processes": scenario_processes(episode)}
    return parse_scenario(data, f"corpus 2 episode {episode.index}")
