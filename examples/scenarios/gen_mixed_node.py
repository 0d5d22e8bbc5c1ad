"""Generate h100-mixed-node.yaml: an 8x H100-80GB node using every sharing mode at once.

Run ``python examples/scenarios/gen_mixed_node.py`` to rewrite the YAML next to this file;
the output depends only on SEED, so the file in the repository is reproducible (a test
checks that). Layout:

  GPU0  MIG "balanced": 2g.20gb + 2x 1g.10gb + 3g.40gb, a few processes per instance
  GPU1  MIG 4g.40gb + 3g.40gb, an MPS server on each instance (MIG+MPS)
  GPU2  MPS, many clients          GPU3  time-slicing, several ordinary processes
  GPU4  exclusive, one process      GPU5  idle
  GPU6  MIG all 1g.10gb (7)         GPU7  MPS

Each device has a number of *lanes* (processes running at the same time); a lane runs jobs
back to back. A lane's memory never exceeds budget = 85% of the device capacity / lanes, so
the node never runs out of memory: this scenario is the healthy baseline.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from exporter.catalog import resolve_model

SEED = 20240611
DURATION = 30 * 60  # seconds
MIB, GIB = 2**20, 2**30
H100 = resolve_model("H100-80GB")
H100_CAPACITY = H100.memory_capacity_bytes  # what processes may allocate on a whole GPU
OUT = Path(__file__).with_name("h100-mixed-node.yaml")

# gpu index -> (mig layout or None, GPU-level MPS, compute mode, lanes per device)
# For MIG GPUs "lanes" is one count per instance, in mig-list order.
GPUS = {
    0: ([("3g.40gb", 4, False), ("2g.20gb", 0, False), ("1g.10gb", 2, False), ("1g.10gb", 3, False)],
        False, None, [3, 2, 1, 1]),
    1: ([("4g.40gb", 0, True), ("3g.40gb", 4, True)], False, None, [10, 8]),
    2: (None, True, "exclusive_process", [28]),
    3: (None, False, "default", [8]),
    4: (None, False, "exclusive_process", [1]),
    5: (None, False, None, [0]),
    6: ([("1g.10gb", s, False) for s in range(7)], False, None, [1] * 7),
    7: (None, True, "exclusive_process", [20]),
}

INFERENCE = [
    "python3 serve.py --model meta-llama/Llama-3.1-8B-Instruct --port {port}",
    "tritonserver --model-repository=/models/{name} --http-port={port}",
    "python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-1.5B-Instruct --port {port}",
    "python3 worker.py --queue embeddings --model BAAI/bge-base-en-v1.5",
]
BATCH = [
    "python3 train.py --config configs/resnet50.yaml --shard {shard}",
    "python3 simulate.py --steps 20000 --seed {shard}",
    "python3 finetune.py --base mistral-7b --lora-rank 16 --run {shard}",
]
NOTEBOOK = "python3 -m ipykernel_launcher -f /home/u{shard}/.local/share/jupyter/runtime/kernel-{port}.json"


def mib(n: float) -> str:
    return f"{int(n // MIB)}MiB"


def t(seconds: float) -> str:
    return f"{int(seconds)}s"


def memory_shape(rng: random.Random, kind: str, budget: float, length: float) -> list:
    """Relative memory timeline (seed 002 archetypes) that stays at or below ``budget``."""
    if kind == "leaky":  # notebook that never frees: grows until it ends
        return [["+0s", mib(0.05 * budget)], ["+30s", mib(0.4 * budget)], [f"+{int(length)}s", mib(budget)]]
    if kind == "spiky":  # inference with periodic large batches
        points = [["+0s", mib(0.05 * budget)], ["+30s", mib(0.6 * budget)]]
        at = 30 + rng.randint(60, 150)
        while at + 25 < length:
            points += [[f"+{at}s", mib(0.6 * budget)], [f"+{at + 5}s", mib(budget)],
                       [f"+{at + 20}s", mib(budget)], [f"+{at + 25}s", mib(0.6 * budget)]]
            at += 25 + rng.randint(60, 180)
        return points
    return [["+0s", mib(0.05 * budget)], ["+30s", mib(rng.uniform(0.7, 0.95) * budget)]]  # steady


def lane_jobs(rng, gpu, mig, lanes, capacity, mps, state) -> list[dict]:
    jobs = []
    budget = 0.85 * capacity / max(lanes, 1)
    share = 0.9 / max(lanes, 1)  # activity share of the device per lane
    for lane in range(lanes):
        at = 0.0 if lane == 0 else float(rng.randint(0, 120))
        while at < DURATION - 60:
            if gpu == 4:  # exclusive: one long training run
                kind, length = "steady", None
            else:
                kind = rng.choice(["steady", "steady", "spiky", "leaky"] if not mps else ["steady", "spiky"])
                length = float(rng.randint(4 * 60, 14 * 60))
            state["pid"] += rng.randint(1, 40)
            state["port"] += 1
            template = (NOTEBOOK if kind == "leaky" else
                        rng.choice(INFERENCE) if kind == "spiky" or mps else rng.choice(BATCH))
            cmdline = template.format(port=state["port"], name=f"m{state['port'] % 7}", shard=lane)
            sm = round(rng.uniform(0.5, 1.0) * share, 4)
            job = {"pid": state["pid"], "cmdline": cmdline, "gpu": gpu}
            if mig is not None:
                job["mig"] = mig
            job["start"] = t(at)
            if length is not None:
                job["end"] = f"+{int(length)}s"
            job["memory"] = memory_shape(rng, kind, budget, length or 120)
            job["sm_active"] = sm
            job["tensor_active"] = round(sm * rng.uniform(0.3, 0.7), 4)
            job["dram_active"] = round(sm * rng.uniform(0.2, 0.6), 4)
            if mps and gpu == 2:  # per-client limits as the k8s device plugin sets them
                job["env"] = {"NVIDIA_VISIBLE_DEVICES": str(gpu),  # the container sees only its GPU
                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={int(budget // MIB) + 1}M",
                              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, 100 // lanes))}
            jobs.append(job)
            if length is None:
                break
            at += length + rng.randint(5, 60)
    return jobs


def render() -> str:
    rng = random.Random(SEED)
    state = {"pid": 100000, "port": 9000}
    lines = [
        "# GENERATED by gen_mixed_node.py (deterministic); edit the generator, not this file.",
        "name: h100-mixed-node",
        "description: 8x H100-80GB node mixing MIG, MIG+MPS, MPS, time-slicing, exclusive and idle GPUs",
        f"duration: {DURATION // 60}m",
        "gpus:",
    ]
    processes = []
    for index, (mig, mps, mode, lanes) in GPUS.items():
        lines += gpu_stanza(mig, mps, mode, comment=f"GPU {index}")
        devices = [(None, H100_CAPACITY, mps)] if mig is None else [
            (i, H100.profile(p).memory_mib * MIB, m) for i, (p, _, m) in enumerate(mig)]
        for (mig_index, capacity, serves), count in zip(devices, lanes):
            processes += lane_jobs(rng, index, mig_index, count, capacity, serves, state)
    lines.append(f"processes:  # {len(processes)} in total")
    lines += [f"  - {json.dumps(p)}" for p in processes]
    return "\n".join(lines) + "\n"


def gpu_stanza(mig, mps: bool, mode: str | None, comment: str = "") -> list[str]:
    """YAML lines of one H100 in the ``gpus:`` list (also used by bench/perf/scenarios.py)."""
    lines = ["  - model: H100-80GB" + (f"  # {comment}" if comment else "")]
    if mig is not None:
        lines.append("    mig:")
        lines += [f"      - {{profile: {p}, start: {s}{', mps: true' if m else ''}}}" for p, s, m in mig]
    if mps:
        lines.append("    mps: true")
    if mode:
        lines.append(f"    compute_mode: {mode}")
    return lines


if __name__ == "__main__":
    text = render()
    OUT.write_text(text)
    print(f"wrote {OUT} ({text.count(chr(10))} lines)", file=sys.stderr)
