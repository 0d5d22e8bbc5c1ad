"""The reasons a model's plan gives, in words: counts, model parallelism and the nodes it spans,
groups kept as they run now and where they must share, baselines, the MPS alternative."""

from __future__ import annotations

from collections import Counter

from exporter import catalog
from exporter.catalog import GpuModel
from exporter.recommend import mps_pack
from exporter.recommend.demand import Demand, SharedDevice, Workload
from exporter.recommend.result import ModelPlan
from exporter.recommend.slots import FULL

GIB = 2**30
# GPUs per node when the fleet does not say: the 8-GPU HGX / DGX boards A100, H100, H200 and B200
# ship on. A model-parallel instance wider than a node spans nodes.
DEFAULT_GPUS_PER_NODE = 8


def gpus_per_node(demand: Demand, model: str) -> tuple[int, str]:
    """(GPUs per node, where that number comes from): the fleet's largest node of the model, else
    DEFAULT_GPUS_PER_NODE."""
    per_node = Counter(g.node for g in demand.gpus if g.model == model)
    if per_node:
        return max(per_node.values()), "the fleet's largest node"
    return DEFAULT_GPUS_PER_NODE, "an 8-GPU HGX node assumed"


def spans(gpus: int, per_node: int, basis: str) -> str:
    """The word a model-parallel instance wider than a node needs."""
    nodes = -(-gpus // per_node)
    return (f"spans {nodes} nodes ({gpus} GPUs, {per_node} per node: {basis}): model parallelism across "
            "nodes needs a multi-node launcher and an inter-node fabric; each GPU holds an even share")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def reasons(model: GpuModel, p: ModelPlan, workloads: list[Workload], node: tuple[int, str],
             shared: dict[str, SharedDevice]) -> list[str]:
    out = []
    peaks = sum(w.count for w in workloads)
    proof = "optimal" if p.optimal else "not proven optimal"
    apart = f"; {peaks} if every workload's own peak came at once" if peaks > p.at_once else ""
    out.append(f"{_plural(len(workloads), 'workload')}, at most {_plural(p.at_once, 'instance')} alive at one time"
               f"{apart}: {_plural(p.gpus_needed, model.key + ' GPU')} "
               f"({proof}; {p.patterns} layouts, {p.time_rows} binding time point"
               f"{'s' if p.time_rows != 1 else ''})")
    if p.gpus_mig_off:
        out.append(f"MIG off on {_plural(p.gpus_mig_off, 'GPU')}: workloads too large for a MIG profile, "
                   "or instances kept sharing a GPU as they do now")
    for w in p.workloads:
        if w.gpus_per_instance > 1:
            bigger = [m.key for m in catalog.MODELS.values() if m.memory_capacity_bytes >= w.need_bytes]
            out.append(f"{w.name} needs {w.need_bytes / GIB:.1f} GiB, more than one {model.key} "
                       f"({model.memory_capacity_bytes / GIB:.1f} GiB): {w.gpus_per_instance} GPUs per instance "
                       "with model parallelism" + (f", or one {' / '.join(bigger)}" if bigger else ""))
            if w.gpus_per_instance > node[0]:
                out.append(f"{w.name}: " + spans(w.gpus_per_instance, *node))
    if p.groups_kept:
        out.append("kept sharing as now (MPS / time-slicing): " + ", ".join(p.groups_kept))
        out += [line for key in p.groups_kept if (line := _moved_group(key, p, shared.get(key)))]
    if p.homogeneous.gpus is not None and model.mig_capable:
        out.append(f"best single configuration {p.homogeneous.name}: {_plural(p.homogeneous.gpus, 'GPU')}; "
                   f"greedy first-fit: {_plural(p.greedy.gpus, 'GPU')}")
    if p.mps:
        gpus = mps_pack.gpus_needed(list(p.mps))
        staggered = sum(1 for a in p.mps if a.verdict == "stagger")
        whole = sum(a.gpus for a in p.mps if a.verdict == "dedicated")
        out.append(f"MPS alternative: {_plural(gpus, 'whole GPU')}"
                   + (f", of which {whole} for workloads too large to share" if whole else "")
                   + (f" ({staggered} need staggered starts)" if staggered else "")
                   + "; MPS has no memory isolation and one client's fault ends all on the GPU")
    return out


def _moved_group(key: str, p: ModelPlan, s: SharedDevice | None) -> str:
    """What a kept group must do when its planned slot differs from the device it shares now."""
    slot = next((i.profile for g in p.gpus for i in g.instances if i.workload == f"as now: {key}"), None)
    if s is None or slot is None:
        return ""
    home = (s.profile or FULL).removesuffix("+me")
    if slot == home:
        return ""
    now = "a whole GPU" if home == FULL else f"a MIG {home} instance"
    there = "a whole GPU (MIG off)" if slot == FULL else f"a MIG {slot} instance"
    if not s.mps:
        return f"{key}: time-sliced on {now} now, planned in {there}: time-slicing continues there"
    if slot == FULL:
        return f"{key}: MPS on {now} now, planned on {there}: MPS runs on the whole GPU"
    return (f"{key}: MPS on {now} now, planned in {there}: MPS must then run inside that instance (one MPS "
            "control daemon per MIG device, its own CUDA_MPS_PIPE_DIRECTORY); the device plugin's MPS sharing "
            "does not support MIG devices, so start the daemon in the instance yourself or time-slice it")
