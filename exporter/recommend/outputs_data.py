"""`--format json` and `--format yaml`: the Recommendation as plain data (base units)."""

from __future__ import annotations

import json

import yaml

from exporter.recommend.baselines import Baseline
from exporter.recommend.mps import MpsAdvice
from exporter.recommend.result import GpuPlan, ModelPlan, Recommendation


def _baseline(b: Baseline) -> dict:
    out = {"name": b.name, "gpus": b.gpus}
    if b.reason:
        out["reason"] = b.reason
    return out


def advice_dict(a: MpsAdvice) -> dict:
    return {
        "device": a.device, "model": a.model, "capacity_bytes": a.capacity_bytes, "sms": a.sms,
        "verdict": a.verdict, "sum_of_peaks_bytes": a.sum_of_peaks_bytes,
        "max_concurrency": a.max_concurrency, "staggered_peak_bytes": a.staggered_peak_bytes,
        "clients": [
            {
                "workload": c.workload, "need_bytes": c.need_bytes,
                "env": {
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": c.pinned_limit,
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(c.active_thread_percentage),
                },
                "start_offset_seconds": c.start_offset_seconds,
                "duration_seconds": c.duration_seconds,
            }
            for c in a.clients
        ],
        "reasons": list(a.reasons),
    }


def _gpu(g: GpuPlan) -> dict:
    return {
        "node": g.node, "index": g.index, "change": g.change, "config": g.config,
        "mig_enabled": g.mig_enabled, "current": g.current or None, "note": g.note or None,
        "stranded_bytes": g.stranded_bytes,
        "instances": [
            {"profile": i.profile, "start": i.start, "memory_bytes": i.memory_bytes, "sms": i.sms,
             "workload": i.workload, "need_bytes": i.need_bytes, "shortfall_sms": i.shortfall_sms}
            for i in g.instances
        ],
    }


def _plan(p: ModelPlan) -> dict:
    return {
        "model": p.model, "workloads": len(p.workloads), "gpus_needed": p.gpus_needed,
        "dedicated_gpus": p.dedicated_gpus, "available_gpus": p.available_gpus,
        "optimal": p.optimal, "stranded_bytes": p.stranded_bytes,
        "compute_shortfall_sms": p.shortfall_sms,
        "baselines": {
            "best_homogeneous": _baseline(p.homogeneous),
            "greedy_first_fit": _baseline(p.greedy),
            "homogeneous_tried": [_baseline(b) for b in p.homogeneous_tried],
        },
        "mps_alternative": {"gpus": len(p.mps), "devices": [advice_dict(a) for a in p.mps]},
        "gpus": [_gpu(g) for g in p.gpus],
        "solver": {"classes": p.classes, "layouts": p.patterns, "seconds": round(p.solve_seconds, 4),
                   "layouts_minimal": p.layouts_minimal},
        "reasons": list(p.reasons),
    }


def to_dict(rec: Recommendation) -> dict:
    """The whole recommendation as JSON-compatible data."""
    return {
        "sources": list(rec.sources),
        "notes": list(rec.notes),
        "models": [_plan(p) for p in rec.plans],
        "shared_now": [advice_dict(a) for a in rec.shared_now],
        "workloads": [
            {
                "name": w.name, "gpu_model": w.gpu_model, "location": w.location or None,
                "peak_memory_bytes": w.peak_memory_bytes, "margin_ratio": w.margin_ratio,
                "need_bytes": w.memory_need_bytes, "compute_sms": w.compute_sms,
                "compute_fraction": w.compute_fraction, "tensor_ratio": w.tensor_ratio,
                "sized_by": w.sized_by, "timeline_seconds": w.duration_seconds,
            }
            for w in rec.workloads
        ],
    }


def render_json(rec: Recommendation) -> str:
    return json.dumps(to_dict(rec), indent=2) + "\n"


def render_yaml(rec: Recommendation) -> str:
    # libyaml's dumper when present: the pure-Python one takes ~10 s on a 1,000-GPU plan.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(to_dict(rec), Dumper=dumper, sort_keys=False, width=120)
