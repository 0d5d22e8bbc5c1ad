"""Workload families of the third foresight corpus (bench/foresight_corpus3.py).

Each family is what a real job of that kind does to device memory over its life, as seen by
nvidia-smi (the CUDA context plus whatever the framework's allocator holds), written from what
these frameworks are known to do, not from the other corpora:

- finetune: an LLM fine-tune with gradient accumulation. Weights load, activations grow over the
  first accumulation window, and the optimizer state (Adam: two moments per trainable
  parameter) is allocated at the first optimizer step: a jump. Periodic evaluation with a larger
  batch adds a bump that the caching allocator keeps, unless the trainer empties its cache.
- rlhf: PPO/GRPO-style RLHF. A rollout engine (KV cache) and the trainer take turns: generation
  phases at the top, training phases lower, weights only in between.
- vllm: an inference server that preallocates a fixed share of the device's total memory
  (vLLM `--gpu-memory-utilization`, TGI `--cuda-memory-fraction`) once its weights are loaded,
  then stays flat whatever its load: sized by the device, not by the job.
- jax: a JAX/XLA job that takes 75 % of the device's total memory at its first computation
  (XLA_PYTHON_CLIENT_PREALLOCATE), or XLA_PYTHON_CLIENT_MEM_FRACTION of it where set.
- triton: an inference server loading several models at staggered times (explicit model
  control), each a step, then flat.
- embed: a batch embedding job: a plateau set by its batch size, a step up when the long
  sequences arrive, never down (the caching allocator keeps what it reserved).
- jupyter: a notebook kernel that loads a model, maybe a second one, and frees them
  (`del model; torch.cuda.empty_cache()`) at times of the user's choosing: no two runs alike.
- ci: a GPU smoke test suite: a small base and spikes of a few seconds (one test each).
- staircase: training on shapes that vary (speech, detection): the caching allocator grows in
  steps each time a larger batch shape appears, quickly at first, and never gives memory back.
- creep: a long-lived inference worker whose allocator fragments: loaded, then a slow linear
  creep.

Levels are shares of the workload's own peak (1.0), except for `fixed` families (vllm, jax),
whose levels are shares of the device's total memory. Ages are seconds from the process start.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# family -> (shape class, fixed: sized by the device's total memory, weight in a mix)
FAMILIES = {
    "finetune": ("accum", False, 3), "rlhf": ("phases", False, 2), "vllm": ("prealloc", True, 3),
    "jax": ("prealloc", True, 1), "triton": ("loads", False, 2), "embed": ("plateau", False, 2),
    "jupyter": ("interactive", False, 2), "ci": ("spike", False, 2), "staircase": ("staircase", False, 2),
    "creep": ("creep", False, 2),
}
JUMPS = ("ci", "jupyter", "finetune", "rlhf")  # a sudden rise no trend foresees: the never-seen class
TRENDS = ("creep", "staircase")  # steady growth a trend basis can extrapolate


@dataclass(frozen=True)
class Workload:
    family: str
    shape: str
    command: str  # the command line with {vol} where each run's volatile part goes
    params: tuple  # (name, value) pairs of the family's parameters
    fixed: bool  # levels are shares of the device's total memory (not scaled with the episode)
    env: tuple = ()  # (name, value) pairs every run of it carries

    def p(self, name: str):
        return dict(self.params)[name]


def _stamp(rng: random.Random) -> str:
    return f"2026{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}-{rng.randint(0, 23):02d}{rng.randint(0, 59):02d}"


def volatile(family: str, rng: random.Random) -> str:
    """Each run's own seed, port, output directory or kernel file: what the workload key drops."""
    if family == "jupyter":
        return "%08x-%04x-4%03x-a%03x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 12, 12, 48))
    if family in ("vllm", "triton"):
        return str(rng.randint(8000, 8999))
    if family == "jax":
        return "%016x" % rng.getrandbits(64)
    if family == "ci":
        return str(rng.randint(1000, 99999))
    return f"{rng.randint(0, 99999)} --output_dir /ckpt/{_stamp(rng)}"


def make_workload(rng: random.Random, family: str, share: float | None = None) -> Workload:
    """A workload of the family with its parameters drawn; `share`: its fixed share of the device."""
    shape, fixed, _ = FAMILIES[family]
    env: tuple = ()
    model = rng.choice(("Llama-3.2-3B", "Qwen2.5-7B", "Mistral-7B-v0.3", "gemma-2-9b", "Phi-3.5-mini"))
    if family == "finetune":
        k = rng.choice((4, 8, 16, 32))
        cmd = rng.choice((f"python3 -m axolotl.cli.train configs/{model.lower()}-qlora.yml --gradient_accumulation_steps {k} --seed {{vol}}",
                          f"llamafactory-cli train examples/train_lora/{model.lower()}_lora_sft.yaml --gradient_accumulation_steps {k} --seed {{vol}}"))
        params = dict(load=rng.uniform(20, 70), weights=rng.uniform(0.3, 0.5), act=rng.uniform(0.1, 0.2),
                      step=k * rng.uniform(4, 12), opt=rng.uniform(0.8, 0.9), every=rng.uniform(240, 600),
                      width=rng.uniform(20, 60), release=rng.random() < 0.5, duration=rng.uniform(900, 2400))
    elif family == "rlhf":
        cmd = f"python3 -m openrlhf.cli.train_ppo --pretrain {model} --micro_rollout_batch_size {rng.choice((4, 8, 16))} --seed {{vol}}"
        params = dict(load=rng.uniform(40, 90), weights=rng.uniform(0.35, 0.55), train=rng.uniform(0.7, 0.88),
                      gen=rng.uniform(60, 160), fit=rng.uniform(90, 220), duration=rng.uniform(900, 2100))
    elif family == "vllm":
        util = round(share, 2)
        cmd = rng.choice((f"python3 -m vllm.entrypoints.openai.api_server --model {model} --gpu-memory-utilization {util} --max-model-len 8192 --port {{vol}}",
                          f"text-generation-launcher --model-id {model} --cuda-memory-fraction {util} --port {{vol}}"))
        params = dict(load=rng.uniform(30, 120), util=util, weights=util * rng.uniform(0.3, 0.6),
                      graphs=rng.uniform(0.004, 0.012), duration=rng.uniform(1200, 3000))
    elif family == "jax":
        frac = 0.75 if share is None or abs(share - 0.75) < 0.01 else round(share, 2)
        if frac != 0.75:
            env = (("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{frac:.2f}"),)
        cmd = f"python3 main.py --config=configs/{rng.choice(('vit_b16', 'resnet50', 't5_base', 'gemma_2b'))}.py --workdir=/tmp/jax-{{vol}}"
        params = dict(imports=rng.uniform(15, 45), frac=frac, duration=rng.uniform(900, 2400))
    elif family == "triton":
        n = rng.randint(2, 4)
        sizes = [rng.uniform(0.5, 1.5) for _ in range(n)]
        names = rng.sample(("bert_ner", "yolov8", "whisper_small", "clip_vit", "t5_summarize", "resnet152"), n)
        cmd = "tritonserver --model-repository=/models --model-control-mode=explicit " + " ".join(
            f"--load-model={m}" for m in names) + " --http-port={vol}"
        params = dict(loads=tuple(sorted(rng.uniform(10, 420) for _ in range(n))), sizes=tuple(sizes),
                      base=rng.uniform(0.03, 0.08), duration=rng.uniform(1200, 2700))
    elif family == "embed":
        b = rng.choice((64, 128, 256, 512))
        cmd = f"python3 embed_corpus.py --model BAAI/bge-m3 --batch-size {b} --max-length 512 --input /data/shards/part-*.parquet --seed {{vol}}"
        # activations grow with the batch: the plateau below the long-sequence step is set by --batch-size
        params = dict(model=rng.uniform(0.06, 0.14), plateau=0.45 + 0.1 * math.log2(b / 64) + rng.uniform(0, 0.08),
                      long=rng.uniform(0.3, 0.7),
                      duration=rng.uniform(600, 1500))
    elif family == "jupyter":
        user = rng.choice(("alice", "bob", "chen", "dana", "emre"))
        cmd = f"/opt/conda/bin/python -m ipykernel_launcher -f /home/{user}/.local/share/jupyter/runtime/kernel-{{vol}}.json"
        params = dict(second=rng.uniform(0.2, 0.45), duration=rng.uniform(1200, 3000))
    elif family == "ci":
        suite = rng.choice(("test_kernels.py", "test_attention.py", "test_quant.py", "test_inference.py"))
        cmd = f"python3 -m pytest -q tests/gpu/{suite} -k smoke --basetemp=/tmp/pytest-of-runner/{{vol}}"
        params = dict(base=rng.uniform(0.08, 0.2), spikes=rng.randint(1, 3), duration=rng.uniform(90, 240))
    elif family == "staircase":
        cmd = f"python3 train.py --config conf/{rng.choice(('conformer_l', 'maskrcnn_r50', 'zipformer'))}.yaml --max-duration {rng.choice((600, 900, 1200))} --seed {{vol}}"
        params = dict(steps=rng.randint(5, 9), first=rng.uniform(0.35, 0.55), until=rng.uniform(0.3, 0.7),
                      duration=rng.uniform(900, 2400))
    else:  # creep
        cmd = f"python3 -m serve_worker --model {rng.choice(('whisper-large-v3', 'sdxl-turbo', 'bge-reranker'))} --workers 1 --bind 0.0.0.0:{rng.choice((7860, 8080, 9000))} --seed {{vol}}"
        params = dict(load=rng.uniform(20, 60), level=rng.uniform(0.55, 0.75), duration=rng.uniform(1200, 3000))
    return Workload(family, shape, cmd, tuple(sorted(params.items())), fixed, env)


def points(w: Workload, rng: random.Random) -> tuple[list[tuple[float, float]], float]:
    """One run's (age, level) points and its duration; `rng` draws what differs from run to run."""
    p, dur = dict(w.params), w.p("duration") * rng.uniform(0.97, 1.04)
    if w.family == "finetune":
        first = p["load"] + p["step"]
        pts = [(0, 0.01), (p["load"], p["weights"]), (first, p["weights"] + p["act"]), (first + 1, p["opt"])]
        t = first + p["every"]
        while t + p["width"] < dur - 30:
            pts += [(t, pts[-1][1]), (t + 3, 1.0), (t + p["width"], 1.0)]
            pts.append((t + p["width"] + 2, p["opt"] if p["release"] else 1.0))
            t += p["every"]
    elif w.family == "rlhf":
        pts, t = [(0, 0.01), (p["load"], p["weights"])], p["load"]
        while t < dur - 60:
            pts += [(t, p["weights"]), (t + 4, 1.0), (t + p["gen"], 1.0), (t + p["gen"] + 4, p["train"])]
            t += p["gen"] + p["fit"]
            pts += [(t, p["train"]), (t + 3, p["weights"])]
            t += 3
    elif w.family == "vllm":
        load = p["load"] * rng.uniform(0.9, 1.15)  # weights from a cache or the network
        pts = [(0, 0.004), (load, p["weights"]), (load + 6, p["weights"] * 1.08), (load + 10, p["util"]),
               (load + 25, p["util"] + p["graphs"])]
    elif w.family == "jax":
        pts = [(0, 0.004), (p["imports"], 0.004), (p["imports"] + 2, p["frac"] + 0.004)]
    elif w.family == "triton":
        total, level = sum(p["sizes"]), p["base"]
        pts = [(0, level)]
        for at, size in zip(p["loads"], p["sizes"]):
            at *= rng.uniform(0.9, 1.1)
            pts += [(max(at, pts[-1][0]), level), (max(at, pts[-1][0]) + rng.uniform(5, 20), level + (1 - p["base"]) * size / total)]
            level = pts[-1][1]
    elif w.family == "embed":
        step = dur * p["long"] * rng.uniform(0.95, 1.05)
        pts = [(0, 0.01), (15, p["model"]), (25, p["plateau"]), (step, p["plateau"]), (step + 2, 1.0)]
    elif w.family == "jupyter":  # load the model, maybe a second one, free them: when the user likes
        pts, t, level, main = [(0, 0.02)], rng.uniform(30, 300), 0.02, 1 - p["second"]
        while t < dur - 120:
            if level < 0.1:
                nxt, ramp = main, rng.uniform(20, 40)
            elif level < 0.99 and rng.random() < 0.5:
                nxt, ramp = 1.0, rng.uniform(10, 25)
            else:  # del model; torch.cuda.empty_cache()
                nxt, ramp = 0.04, 2
            pts += [(t, level), (t + ramp, nxt)]
            level, t = nxt, t + ramp + rng.uniform(120, 900)
    elif w.family == "ci":
        pts, base = [(0, 0.01), (8, p["base"])], p["base"]
        ages = sorted(rng.uniform(12, dur - 15) for _ in range(p["spikes"]))
        tops = [1.0] + [rng.uniform(0.5, 0.95) for _ in ages[1:]]
        rng.shuffle(tops)
        for at, top in zip(ages, tops):
            if at <= pts[-1][0] + 1:
                continue
            width = rng.uniform(3, 10)
            pts += [(at, base), (at + 0.5, top), (at + width, top), (at + width + 0.5, base)]
    elif w.family == "staircase":
        n, until = p["steps"], dur * p["until"]
        gaps = [1.6 ** i for i in range(n)]
        ages = [20 + (until - 20) * sum(gaps[:i + 1]) / sum(gaps) * rng.uniform(0.8, 1.2) for i in range(n)]
        ages = sorted(min(a, dur - 30) for a in ages)
        pts, level = [(0, 0.01), (15, p["first"])], p["first"]
        for i, at in enumerate(ages):
            nxt = p["first"] + (1 - p["first"]) * (1 - 0.6 ** (i + 1)) / (1 - 0.6 ** n)
            pts += [(max(at, pts[-1][0]), level), (max(at, pts[-1][0]) + 1, nxt)]
            level = nxt
    else:  # creep
        pts = [(0, 0.01), (p["load"], p["level"]), (dur, 1.0)]
    return pts, dur
