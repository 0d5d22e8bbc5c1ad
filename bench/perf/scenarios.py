"""Scaled variants of the mixed H100 node, written as scenario files into a temp directory.

A variant is (GPUs, processes). GPUs take the roles of the mixed node in turn
(examples/scenarios/gen_mixed_node.py): index mod 8 = 0 MIG "balanced" (4 instances),
1 MIG + MPS (2 instances), 2 MPS, 3 time-slicing, 4 exclusive (one process), 5 idle,
6 MIG 7x 1g.10gb, 7 MPS. A 1-GPU variant is a single time-sliced GPU. An ``all_mig``
variant gives every GPU role 6 (the most MIG devices NVML can show). Every process runs
from t = 0 for ever with constant memory (80 % of its device shared evenly), so the number
of live processes is the same at any instant the bench looks: the figures depend on the
size of the node, not on when they were taken.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

# The node's layout and its GPU stanzas come from the mixed node's own generator; sizes from
# the catalog. Role 4 (exclusive) gets exactly one process, added apart, so it has weight 0.
_GEN_PATH = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "gen_mixed_node.py"
_spec = importlib.util.spec_from_file_location("gen_mixed_node", _GEN_PATH)
gen_mixed_node = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_mixed_node)

MIB = 2**20
H100 = gen_mixed_node.H100
H100_MIB = H100.memory_capacity_bytes // MIB
FIRST_PID = 200_000  # clear of the simulator's MPS server pids (100000 + ...)

# role -> (MIG layout [(profile, start, mps)] or None, GPU-level MPS, compute mode, weights)
# weights: share of the node's processes per device (per MIG instance), the mixed node's lanes.
ROLES = {role: (mig, mps, mode, [0] if role == 4 else lanes)
         for role, (mig, mps, mode, lanes) in gen_mixed_node.GPUS.items()}
COMMANDS = (
    "python3 serve.py --model meta-llama/Llama-3.1-8B-Instruct --port {n}",
    "tritonserver --model-repository=/models/m{m} --http-port={n}",
    "python3 train.py --config configs/resnet50.yaml --shard {n}",
    "python3 -m ipykernel_launcher -f /home/u{m}/kernel-{n}.json",
)


@dataclass(frozen=True)
class Variant:
    """A scaled node: ``gpus`` H100s and ``processes`` live GPU processes (MPS servers excluded)."""

    gpus: int
    processes: int
    all_mig: bool = False

    @property
    def name(self) -> str:
        return f"{self.gpus}gpu-{'mig7x1g-' if self.all_mig else ''}{self.processes}proc"

    def role(self, gpu: int) -> int:
        """Index into ROLES of GPU ``gpu``."""
        return 6 if self.all_mig else 3 if self.gpus == 1 else gpu % 8


def _devices(variant: Variant) -> list[tuple[int, int | None, int, float, bool]]:
    """(gpu, mig index or None, weight, capacity MiB, mps) for every device of the node."""
    out = []
    for gpu in range(variant.gpus):
        role = variant.role(gpu)
        mig, mps, _, weights = ROLES[role]
        if mig is None:
            out.append((gpu, None, weights[0], H100_MIB, mps))
        else:
            out += [(gpu, i, w, H100.profile(p).memory_mib, m) for i, ((p, _, m), w) in enumerate(zip(mig, weights))]
    return out


def _split(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder), summing to ``total``."""
    whole = sum(weights)
    if whole == 0 or total <= 0:
        return [0] * len(weights)
    exact = [total * w / whole for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def render(variant: Variant) -> str:
    """The scenario YAML of ``variant`` (deterministic)."""
    lines = [f"name: bench-{variant.name}",
             f"description: bench variant of the mixed H100 node, {variant.name}",
             "gpus:"]
    for gpu in range(variant.gpus):
        mig, mps, mode, _ = ROLES[variant.role(gpu)]
        lines += gen_mixed_node.gpu_stanza(mig, mps, mode)
    devices = _devices(variant)
    exclusive = [d for d in devices if variant.role(d[0]) == 4]
    rest = variant.processes - min(len(exclusive), variant.processes)
    counts = _split(rest, [d[2] for d in devices])
    counts = [c + (1 if d in exclusive and variant.processes > 0 else 0) for c, d in zip(counts, devices)]
    lines.append("processes:")
    pid = FIRST_PID
    for (gpu, mig, _, capacity, mps), count in zip(devices, counts):
        each = max(1, int(0.8 * capacity / max(count, 1)))  # MiB per process, 80 % of the device
        for k in range(count):
            pid += 7
            proc = {"pid": pid, "cmdline": COMMANDS[pid % 4].format(n=pid, m=pid % 13), "gpu": gpu}
            if mig is not None:
                proc["mig"] = mig
            proc.update({"start": "0s", "memory": f"{each}MiB",
                         "sm_active": round(0.9 / count, 4), "dram_active": round(0.3 / count, 4)})
            if mps and mig is None:  # as the device plugin sets them for MPS clients
                proc["env"] = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={each + 1}M",
                               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, 100 // count))}
            lines.append(f"  - {json.dumps(proc)}")
    return "\n".join(lines) + "\n"


def write(variant: Variant, directory: str | Path) -> Path:
    """Write ``variant``'s scenario into ``directory``; returns its path."""
    path = Path(directory) / f"bench-{variant.name}.yaml"
    path.write_text(render(variant))
    return path
