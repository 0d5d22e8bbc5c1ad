"""`--format json` and `--format yaml`: the Recommendation as plain data (base units)."""

from __future__ import annotations

import json

import yaml

from exporter.recommend.baselines import Baseline
from exporter.recommend import mps, operator_objects
from exporter.recommend.mps import MpsAdvice
from exporter.recommend.mps_pack import gpus_needed
from exporter.recommend.outputs_text import mig_sizes_lines
from exporter.recommend.result import GpuPlan, ModelPlan, Recommendation


def _baseline(b: Baseline) -> dict:
    out = {"name": b.name, "gpus": b.gpus}
    if b.reason:
        out["reason"] = b.reason
    return out


def advice_dict(a: MpsAdvice) -> dict:
    shared = a.verdict != "dedicated"
    return {
        "device": a.device, "model": a.model, "gpus": a.gpus, "capacity_bytes": a.capacity_bytes, "sms": a.sms,
        "verdict": a.verdict, "sum_of_peaks_bytes": a.sum_of_peaks_bytes, "together_bytes": a.together_bytes,
        "max_concurrency": a.max_concurrency, "staggered_peak_bytes": a.staggered_peak_bytes,
        # the basis of the verdict: usable = capacity - server; footprint = limits + contexts at one time
        "server_bytes": mps.SERVER_BYTES if shared else 0,
        "context_bytes_per_client": mps.CONTEXT_BYTES if shared else 0,
        "usable_bytes": a.usable_bytes, "clients_at_once": a.clients_at_once,
        "limits_sum_bytes": a.limits_sum_bytes, "footprint_bytes": a.footprint_bytes,
        "room_left_bytes": a.room_left_bytes,
        "clients": [
            {
                "workload": c.workload, "peak_bytes": c.peak_bytes, "margin_ratio": c.margin_ratio,
                "need_bytes": c.need_bytes,
                "env": {
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": c.pinned_limit,
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(c.active_thread_percentage),
                } if shared else None,
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
             "workload_at_peak": i.workload, "need_bytes": i.need_bytes, "shortfall_sms": i.shortfall_sms,
             **({"members": list(i.members)} if i.members else {})}
            for i in g.instances
        ],
    }


def _plan(p: ModelPlan) -> dict:
    return {
        "model": p.model, "gpus_needed": p.gpus_needed, "gpus_mig_off": p.gpus_mig_off,
        "gpus_per_node": p.gpus_per_node,
        "available_gpus": p.available_gpus,
        "summary": {"kept": p.kept, "reconfigured": p.reconfigured, "released": p.released, "added": p.added},
        "optimal": p.optimal, "peak_moment": p.peak_moment, "stranded_bytes": p.stranded_bytes,
        "compute_shortfall_sms": p.shortfall_sms, "groups_kept_as_now": list(p.groups_kept),
        "workloads": [{"name": w.name, "at_once": w.count, "need_bytes": w.need_bytes,
                       "gpus_per_instance": w.gpus_per_instance, "slots_at_peak": w.slots or None,
                       "nodes_per_instance": -(-w.gpus_per_instance // p.gpus_per_node)}
                      for w in p.workloads],
        "baselines": {
            "best_homogeneous": _baseline(p.homogeneous),
            "greedy_first_fit": _baseline(p.greedy),
            "homogeneous_tried": [_baseline(b) for b in p.homogeneous_tried],
        },
        "mps_alternative": {"gpus": gpus_needed(list(p.mps)), "devices": [advice_dict(a) for a in p.mps]},
        "gpus": [_gpu(g) for g in p.gpus],
        # No solve time here: the output is a function of the input alone (byte-identical runs).
        "solver": {"layouts": p.patterns, "time_rows": p.time_rows, "layouts_minimal": p.layouts_minimal},
        "reasons": list(p.reasons),
    }


def to_dict(rec: Recommendation) -> dict:
    """The whole recommendation as JSON-compatible data."""
    b = rec.basis
    doc = {
        "version": rec.version, "stamp": rec.stamp, "draft": rec.draft,
        "basis": {"start": b.start, "end": b.end, "clock": b.clock, "window_seconds": b.window_seconds,
                  "samples": b.samples, "instances": b.instances, "nodes": b.nodes, "gaps": list(b.gaps),
                  "min_window_seconds": b.min_window_seconds, "learned_profiles": b.learned_profiles,
                  "margins": rec.margin_text, "mig_sizes": mig_sizes_lines(rec)},
        "sources": list(rec.sources),
        "notes": list(rec.notes),
        "models": [_plan(p) for p in rec.plans],
        "shared_now": [advice_dict(a) for a in rec.shared_now],
        # the GPU Operator objects, labels, rollout and per-owner settings (--format gpu-operator)
        "gpu_operator": operator_objects.build(rec),
        "workloads": [
            {
                "name": w.name, "gpu_model": w.gpu_model, "location": w.location or None,
                "peak_memory_bytes": w.peak_memory_bytes, "max_peak_bytes": w.max_peak_bytes,
                "margin_ratio": w.margin_ratio, "need_bytes": w.memory_need_bytes,
                "cap_bytes": w.memory_cap_bytes, "at_once": w.count, "instances": w.instances,
                "samples": w.samples, "compute_sms": w.compute_sms, "compute_fraction": w.compute_fraction,
                "tensor_ratio": w.tensor_ratio, "sized_by": w.sized_by, "timeline_seconds": w.duration_seconds,
            }
            for w in rec.workloads
        ],
    }
    return doc


def render_json(rec: Recommendation) -> str:
    return json.dumps(to_dict(rec), indent=2) + "\n"


def render_yaml(rec: Recommendation) -> str:
    # libyaml's dumper when present: the pure-Python one takes ~10 s on a 1,000-GPU plan.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(to_dict(rec), Dumper=dumper, sort_keys=False, width=120)
