"""Does a plan contradict itself? Reads `recommend --format json` and lists every verdict its own
numbers refute (empty: consistent). Pure: the tests run it over every shipped workload file and
the simulator's histories; `python3 -m exporter.recommend.plan_check plan.json` runs it by hand.

The rules are the ones docs/recommend.md states:
- MPS: usable = capacity - server; footprint = limits + one CUDA context per client at one time;
  "fits" only with footprint < usable and the room (usable - footprint) stated; "stagger" with the
  staggered footprint below usable while all at once it is not; "limit-concurrency" with the named
  number of clients fitting and one more not; "too-big" with one client over usable; every limit at
  least the client's peak plus its margin; dedicated GPUs carry no MPS environment;
- MIG: every occupied instance holds its occupant's need (a model-parallel part: an even share);
- counts: the summary adds up, the MPS alternative counts its devices' GPUs, a model-parallel
  instance wider than a node says that it spans nodes;
- one number format: no thousands separators anywhere in the text outputs (``number_format``).
"""

from __future__ import annotations

import json
import math
import re
import sys

MIB = 2**20
TIGHT = 0.05  # mps.HEADROOM_WARNING: "tight" is said below this share of the device, only then


def _limit(env: dict | None) -> int | None:
    if not env or not env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"):
        return None
    value = env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].split("=", 1)[1]
    return int(value.rstrip("M")) * MIB


def check_device(d: dict, where: str, gpus_per_node: int | None = None) -> list[str]:
    """Problems of one MPS device entry (mps_alternative.devices[] or shared_now[])."""
    out = []
    bad = lambda text: out.append(f"{where} {d['device']} ({d['verdict']}): {text}")  # noqa: E731
    clients = d["clients"]
    if d["verdict"] == "dedicated":
        if any(c["env"] is not None for c in clients):
            bad("a dedicated GPU carries an MPS environment")
        if not any("no MPS server" in r for r in d["reasons"]):
            bad("a dedicated GPU does not say why it has no limits")
        if gpus_per_node and d["gpus"] > gpus_per_node and not any("spans" in r for r in d["reasons"]):
            bad(f"{d['gpus']} GPUs per instance, more than a node's {gpus_per_node}, without saying it spans nodes")
        return out
    limits = []
    for c in clients:
        limit = _limit(c["env"])
        if limit is None:
            bad(f"{c['workload']} has no pinned limit")
            continue
        limits.append(limit)
        if limit < math.ceil(c["peak_bytes"] * (1 + c["margin_ratio"])) - MIB:
            bad(f"{c['workload']}: limit {limit} below its peak {c['peak_bytes']} + {c['margin_ratio']:.0%}")
    ctx, usable, foot, room = d["context_bytes_per_client"], d["usable_bytes"], d["footprint_bytes"], d["room_left_bytes"]
    if usable != d["capacity_bytes"] - d["server_bytes"]:
        bad("usable memory is not the capacity less the MPS server")
    if d["limits_sum_bytes"] != sum(limits):
        bad("the limits' sum is not the sum of the limits written")
    if not 1 <= d["clients_at_once"] <= len(clients):
        bad("clients at once out of range")
    if ctx <= 0:
        bad("no CUDA context overhead counted")
    if d["verdict"] in ("fits", "stagger"):
        if room is None or room <= 0 or room != usable - foot:
            bad(f"room left {room} is not usable {usable} - footprint {foot} > 0")
        if d["verdict"] == "fits" and foot > sum(limits) + d["clients_at_once"] * ctx:
            bad("footprint above the limits and contexts of the clients")
        if d["verdict"] == "fits" and foot < max(limits, default=0) + ctx:
            bad("footprint below the largest client's limit and context")
        if d["verdict"] == "fits" and any(c["start_offset_seconds"] is not None for c in clients):
            bad("start offsets on a device where all fit at once")
        if d["verdict"] == "stagger":
            if any(c["start_offset_seconds"] is None for c in clients):
                bad("a staggered client without a start offset")
            if d["staggered_peak_bytes"] != foot:
                bad("the staggered peak is not the footprint judged")
            if sum(limits) + len(clients) * ctx < usable:
                bad("staggered although every client fits at once")
        small = room is not None and room < TIGHT * d["capacity_bytes"]
        if small != any(r.startswith("tight") for r in d["reasons"]):
            bad("'tight' said where the room is not small, or not said where it is")
    else:
        if room is not None:
            bad("room stated for a device that does not fit")
    if any(re.search(r"\b0\.0 GiB left", r) for r in d["reasons"]):
        bad("'0.0 GiB left' said")
    sized = sorted((x + ctx for x in limits), reverse=True)
    k = d["max_concurrency"]
    if sum(sized[:k]) >= usable or (k < len(sized) and sum(sized[:k + 1]) < usable):
        bad(f"any {k} at once are safe does not follow from the limits and contexts")
    if d["verdict"] == "too-big" and (not sized or sized[0] < usable):
        bad("too big, but every client fits alone")
    if d["verdict"] == "limit-concurrency" and k >= len(clients):
        bad("limited concurrency, but all clients are safe at once")
    return out


def check_plan(doc: dict) -> list[str]:
    """Every contradiction in a `recommend --format json` document."""
    out = []
    for p in doc["models"]:
        m = p["model"]
        s = p["summary"]
        if s["kept"] + s["reconfigured"] + s["added"] != p["gpus_needed"]:
            out.append(f"{m}: kept + reconfigured + added != GPUs needed")
        per_node = p.get("gpus_per_node")
        for w in p["workloads"]:
            nodes = w.get("nodes_per_instance", 1)
            if nodes > 1 and not any(r.startswith(f"{w['name']}: spans {nodes} nodes") for r in p["reasons"]):
                out.append(f"{m}: {w['name']} spans {nodes} nodes, and the plan does not say so")
        for g in p["gpus"]:
            for i in g["instances"]:
                if i["need_bytes"] is not None and i["need_bytes"] > i["memory_bytes"]:
                    out.append(f"{m} {g['node']} gpu{g['index']}: {i['workload_at_peak']} needs {i['need_bytes']} "
                               f"in a {i['profile']} of {i['memory_bytes']}")
        alt = p["mps_alternative"]
        if alt["gpus"] != sum(d["gpus"] for d in alt["devices"]):
            out.append(f"{m}: the MPS alternative's GPU count is not its devices' GPUs")
        for d in alt["devices"]:
            out += check_device(d, f"{m} MPS alternative", per_node)
    for d in doc["shared_now"]:
        out += check_device(d, "shared now")
    return out


SEPARATED = re.compile(r"\d,\d{3}(?!\d)")


def number_format(text: str) -> list[str]:
    """Numbers written with thousands separators (the outputs write none)."""
    return sorted(set(SEPARATED.findall(text)))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m exporter.recommend.plan_check PLAN.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as f:
            doc = json.load(f)
        problems = check_plan(doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"plan_check: {argv[0]}: not a recommend JSON plan ({exc})", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
