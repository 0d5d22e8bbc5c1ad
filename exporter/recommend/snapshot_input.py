"""`--snapshot FILE` and `--from URL`: demand from `exporter snapshot` JSON.

A snapshot is ``dataclasses.asdict(Snapshot)`` (exporter/snapshot.py). A file may hold one
snapshot, a JSON list of them, or one per line (JSON Lines), e.g. from
``while sleep 10; do exporter snapshot >> node-a.jsonl; done``. Several snapshots of a node
give peaks over time and, for a process whose start and end both fall inside them, its
memory timeline. The node name is ``NODE=`` before the path, else the file's stem; for
``--from`` it is the URL's host:port. A running exporter serves the same JSON at
GET /api/v1/snapshot.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

from exporter.errors import UserError
from exporter.inputs import decode_utf8, value_problem
from exporter.recommend.observed import ObservedFleet

SNAPSHOT_PATH = "/api/v1/snapshot"
FETCH_TIMEOUT_SECONDS = 10.0


def parse_snapshot_text(text: str, source: str) -> list[dict]:
    """Snapshots in ``text`` (one object, a list, or JSON Lines); UserError naming ``source``."""
    text = text.strip()
    if not text:
        raise UserError(f"{source}: empty, expected snapshot JSON from `exporter snapshot`")
    try:
        doc = json.loads(text)
        docs = doc if isinstance(doc, list) else [doc]
    except (RecursionError, ValueError) as exc:  # nesting thousands deep, a number of thousands of digits
        if not isinstance(exc, json.JSONDecodeError):
            problem = "nested too deeply" if isinstance(exc, RecursionError) else value_problem(exc)
            raise UserError(f"{source}: not valid JSON ({problem})") from None
        first = exc
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError, ValueError):
                where = f"line {n}" if n > 1 else f"line {first.lineno} column {first.colno}"
                raise UserError(f"{source}: {where}: not valid JSON ({first.msg})") from None
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or not isinstance(d.get("gpus"), list):
            where = f"snapshot {i + 1}" if len(docs) > 1 else "top level"
            raise UserError(f"{source}: {where}: not a snapshot (expected an object with a 'gpus' list)")
    return docs


def load_snapshot_files(specs: list[str], fleet: ObservedFleet) -> None:
    """Add every ``[NODE=]PATH`` in ``specs`` to ``fleet``."""
    for spec in specs:
        node, sep, path = spec.partition("=")
        if not sep:
            node, path = Path(spec).stem, spec
        try:
            text = decode_utf8(Path(path).read_bytes(), path)
        except OSError as exc:
            raise UserError(f"--snapshot {path}: {exc.strerror or exc}") from None
        snapshots = parse_snapshot_text(text, path)
        fleet.source(f"snapshot {path} (node {node}, {len(snapshots)} snapshot(s))")
        for snap in sorted(snapshots, key=snapshot_time):
            add_snapshot(fleet, node, snap, path)


def fetch_snapshots(urls: list[str], fleet: ObservedFleet, timeout: float = FETCH_TIMEOUT_SECONDS) -> None:
    """GET each running exporter's /api/v1/snapshot and add it to ``fleet``."""
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UserError(f"--from {url}: expected an http(s) URL such as http://node-a:9835")
        target = url if parts.path.rstrip("/").endswith(SNAPSHOT_PATH) else url.rstrip("/") + SNAPSHOT_PATH
        try:
            with urllib.request.urlopen(target, timeout=timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise UserError(f"--from {url}: {target} answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(f"--from {url}: cannot fetch {target}: {reason}") from None
        for snap in parse_snapshot_text(text, target):
            add_snapshot(fleet, parts.netloc, snap, target)
        fleet.source(f"exporter {target}")


def _number(value, default):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def snapshot_time(snap: dict) -> float:
    """Seconds of the snapshot: scenario time under --simulate (polls can be taken at any
    scenario time, the wall clock says nothing), else the wall-clock timestamp."""
    sim = snap.get("simulation")
    if isinstance(sim, dict) and _number(sim.get("time_seconds"), None) is not None:
        return float(sim["time_seconds"])
    return _number(snap.get("timestamp"), 0.0)


def add_snapshot(fleet: ObservedFleet, node: str, snap: dict, source: str) -> None:
    """Record one snapshot of ``node``: its GPUs, layouts and every process's usage."""
    ts = snapshot_time(snap)
    for i, gpu in enumerate(snap["gpus"]):
        where = f"{source}: gpus[{i}]"
        if not isinstance(gpu, dict):
            raise UserError(f"{where}: expected an object")
        if gpu.get("up") is False:
            continue
        index, name = gpu.get("index"), gpu.get("name")
        if not isinstance(index, int) or not isinstance(name, str):
            raise UserError(f"{where}: missing 'index' or 'name'")
        model = fleet.gpu(node, index, name, str(gpu.get("uuid", "")))
        if model is None:
            continue
        instances = {}
        for inst in gpu.get("mig_instances") or []:
            if isinstance(inst, dict) and isinstance(inst.get("gi"), int):
                instances[inst["gi"]] = inst
        if gpu.get("mig_mode"):
            fleet.layout(node, index, tuple(sorted(
                (str(m.get("profile")), int(m.get("placement_start", 0))) for m in instances.values())))
        by_device = defaultdict(list)
        for j, proc in enumerate(gpu.get("processes") or []):
            if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int):
                raise UserError(f"{where}.processes[{j}]: missing 'pid'")
            if proc.get("is_mps_server"):
                continue  # MPS infrastructure, not a workload
            by_device[proc.get("gi")].append(proc)
        gpu_act = gpu.get("activity") or {}
        for gi, procs in by_device.items():
            inst = instances.get(gi) if gi is not None else None
            sms = _number((inst or {}).get("sm_count"), None) if inst else model.sm_count
            act = (inst or {}).get("activity") or {} if inst else gpu_act
            capacity = _number((inst or {}).get("memory_total_bytes"), None) if inst else model.memory_capacity_bytes
            device = f"{node} gpu{index}" + (f" gi{gi} ({inst.get('profile')})" if inst else "")
            for proc in procs:
                alone = len(procs) == 1
                util = _number(proc.get("sm_utilization_ratio"), None)
                active = _number(act.get("sm_active"), None)
                if util is not None and sms:
                    sm = util * sms
                elif active is not None and sms:
                    sm = active * sms / len(procs)  # the device's activity, shared out evenly
                else:
                    sm = None
                fleet.sample(
                    node=node, uuid=str(gpu.get("uuid", index)), pid=proc["pid"],
                    name=str(proc.get("name") or "pid"), model=model.key, device=device,
                    timestamp=ts, memory=_number(proc.get("used_memory_bytes"), None), sms=sm,
                    tensor=_number(act.get("tensor_active"), None) if alone else None,
                    mps=bool(proc.get("is_mps_client")), capacity=capacity, device_sms=sms,
                )
        fleet.seen(node, ts)
