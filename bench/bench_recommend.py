"""Planner benchmark: 2,000 workloads with 10,000 instances over 2,000 time points on 1,000 GPUs.

Builds an observed fleet in memory (no inputs, no Prometheus): 125 nodes of 8 GPUs (H100-80GB,
A100-80GB, H200), some with MIG layouts now; 2,000 workloads drawn from a menu of common
inference / batch workloads with jittered peaks and SM needs, each with its instances alive
over time (services steady, batch jobs coming and going), 10,000 instances at their peaks in
all, as if measured. Then times `recommend()` (exact staged MILP per model on the time-resolved
demand + best homogeneous configuration + greedy first-fit + MPS packing + fleet mapping) and
prints GPUs needed by the optimum, the best single configuration and greedy first-fit.

    python bench/bench_recommend.py [--workloads 2000] [--instances 10000] [--points 2000] [--gpus 1000]

"Cold" includes importing scipy and enumerating each model's layouts once; "warm" is a
second plan in the same process, which is what a long-running planner pays.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from exporter.recommend.demand import DEFAULT_OBSERVED_MARGIN, Demand, FleetGpu, Grid, Workload  # noqa: E402

GIB = 2**30
MODELS = (("H100-80GB", 0.5), ("A100-80GB", 0.3), ("H200", 0.2))
# (name, peak GiB on an 80 GB part, SM need on a full H100, share of workloads)
MENU = (
    ("embedder", 2.5, 6, 0.22),
    ("reranker", 4.0, 8, 0.10),
    ("llama-3.2-3b", 7.0, 14, 0.18),
    ("mistral-7b-fp8", 8.5, 18, 0.12),
    ("llama-3.1-8b", 18.0, 24, 0.18),
    ("qwen-14b-fp8", 17.0, 30, 0.06),
    ("wan2.2-5b", 31.0, 40, 0.06),
    ("llama-70b-int4", 38.0, 60, 0.05),
    ("mixtral-8x7b-fp8", 55.0, 90, 0.03),
)


def build_demand(n_workloads: int, n_instances: int, points: int, n_gpus: int, seed: int) -> Demand:
    rng = random.Random(seed)
    gpus = []
    for i in range(n_gpus):
        model = rng.choices([m for m, _ in MODELS], [w for _, w in MODELS])[0]
        layout = None if i % 4 else (("3g.40gb", 0), ("3g.40gb", 4)) if model == "H100-80GB" else None
        gpus.append(FleetGpu(node=f"node-{i // 8:03d}", index=i % 8, model=model, layout=layout))
    per = max(1, n_instances // n_workloads)
    workloads = []
    for i in range(n_workloads):
        name, peak, sms, _ = rng.choices(MENU, [m[3] for m in MENU])[0]
        model = rng.choices([m for m, _ in MODELS], [w for _, w in MODELS])[0]
        top = max(1, int(rng.uniform(0.5, 1.5) * per))
        if rng.random() < 0.5:  # a service: steady, with a daily swing
            counts = [max(1, round(top * (0.6 + 0.4 * ((t * 7 // points) % 2)))) for t in range(points)]
        else:  # batch jobs coming and going
            counts, alive = [], 0
            for _ in range(points):
                alive = min(top, max(0, alive + rng.choice((-1, 0, 0, 0, 1))))
                counts.append(alive)
            counts[rng.randrange(points)] = top
        workloads.append(Workload(
            name=f"{name}-{i:04d}", peak_memory_bytes=int(peak * GIB * rng.uniform(0.92, 1.08)),
            margin_ratio=DEFAULT_OBSERVED_MARGIN, count=max(counts), counts=np.array(counts, dtype=np.int64),
            compute_sms=max(1.0, sms * rng.uniform(0.7, 1.3)), gpu_model=model, sized_by="observed peak",
        ))
    return Demand(workloads=tuple(workloads), gpus=tuple(gpus), sources=("bench",),
                  grid=Grid(tuple(float(t) for t in range(points)), 1.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=2_000)
    parser.add_argument("--instances", type=int, default=10_000, help="instances at their peaks, in all")
    parser.add_argument("--points", type=int, default=2_000, help="time points of the demand")
    parser.add_argument("--gpus", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="warm runs to take the median of")
    args = parser.parse_args()
    demand = build_demand(args.workloads, args.instances, args.points, args.gpus, args.seed)

    started = time.perf_counter()
    import scipy.optimize  # noqa: F401  (the planner imports it lazily)

    from exporter.recommend.mps_pack import gpus_needed
    from exporter.recommend.patterns import model_patterns
    from exporter.recommend.report import recommend

    imported = time.perf_counter()
    for key, _ in MODELS:
        model_patterns(key)  # enumerates each model's layouts once per process
    enumerated = time.perf_counter()
    rec = recommend(demand)
    cold = time.perf_counter() - started
    warm = []
    for _ in range(args.runs):
        t = time.perf_counter()
        rec = recommend(demand)
        warm.append(time.perf_counter() - t)

    print(f"{args.workloads} workloads, {sum(w.count for w in demand.workloads)} instances at their peaks, "
          f"{args.points} time points, {args.gpus} GPUs (seed {args.seed})")
    print(f"time to plan: warm median {statistics.median(warm):.3f} s (runs "
          f"{', '.join(f'{w:.3f}' for w in warm)}); cold {cold:.3f} s = imports {imported - started:.3f} s "
          f"+ layout enumeration {enumerated - imported:.3f} s + first plan {cold - (enumerated - started):.3f} s")
    header = f"{'model':<11} {'workloads':>9} {'fleet':>6} {'optimum':>8} {'best single':>22} {'greedy':>7} " \
             f"{'MPS':>5} {'rows':>5} {'MILP s':>7} proven"
    print(header)
    totals = [0, 0, 0, 0]
    for p in rec.plans:
        single = f"{p.homogeneous.gpus} ({p.homogeneous.name})"
        mps = gpus_needed(list(p.mps))
        print(f"{p.model:<11} {len(p.workloads):>9} {p.available_gpus:>6} {p.gpus_needed:>8} {single:>22} "
              f"{p.greedy.gpus:>7} {mps:>5} {p.time_rows:>5} {p.solve_seconds:>7.3f} "
              f"{'yes' if p.optimal else 'NO'}")
        for k, v in enumerate((p.gpus_needed, p.homogeneous.gpus, p.greedy.gpus, mps)):
            totals[k] += v or 0
    print(f"{'total':<11} {args.workloads:>9} {args.gpus:>6} {totals[0]:>8} {totals[1]:>22} {totals[2]:>7} "
          f"{totals[3]:>5}")
    print(f"optimum saves {totals[1] - totals[0]} GPUs vs the best single configuration per model "
          f"({(totals[1] - totals[0]) / max(totals[1], 1):.1%}) and {totals[2] - totals[0]} vs greedy first-fit "
          f"({(totals[2] - totals[0]) / max(totals[2], 1):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
