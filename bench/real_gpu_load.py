"""A plain CUDA workload for the real-GPU checks: GPU memory held and matrix products run, so the
exporter sees running processes, memory in use and busy SMs on hardware (bench/real_gpu_run.sh).

    python bench/real_gpu_load.py --seconds 120 --gib 4 [--grow-gib 2]

It only allocates device memory (PyTorch's allocator, plain cudaMalloc) and computes; it changes
no GPU setting. ``--grow-gib`` adds that much memory in steps over the run, a slow climb the
foresight can see. Without PyTorch or a GPU it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time

PROG = "real_gpu_load"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--gib", type=float, default=4.0, help="memory held from the start (GiB)")
    parser.add_argument("--grow-gib", type=float, default=0.0, help="memory added over the run, in 8 steps (GiB)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(f"{PROG}: error: PyTorch is not installed")
        return 2
    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device visible to PyTorch")
        return 2
    gib = 1 << 30
    held = [torch.empty(int(args.gib * gib), dtype=torch.uint8, device="cuda")]
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start, steps = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < args.seconds:
        if args.grow_gib and steps < 8 and elapsed >= (steps + 1) * args.seconds / 9:
            held.append(torch.empty(int(args.grow_gib * gib / 8), dtype=torch.uint8, device="cuda"))
            steps += 1
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        time.sleep(0.05)  # busy but not saturated: utilization below 100 %
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
