"""`--snapshot FILE` and `--from URL`: demand from `exporter snapshot` JSON.

A snapshot is the JSON of exporter/snapshot.py's Snapshot. A file may hold one snapshot, a
JSON list of them, one per line (JSON Lines, what ``while sleep 15; do exporter snapshot >>
node.jsonl; done`` writes) or pretty-printed snapshots one after another (what older
versions of `exporter snapshot` appended). The node is ``NODE=`` before the path, else the
file's stem; for ``--from`` it is the URL's host:port.

``--from URL`` reads ``URL/api/v1/snapshot`` (one look, or one every ``interval`` seconds for
``--window``) and ``URL/metrics`` for what the exporter has learned: its workload profiles
(gpushare_workload_profile_peak_bytes, keyed like the foresight's ``<key>@<N>GiB``) and the
expected peak of each running process (gpushare_process_memory_expected_peak_bytes) raise the
size of the workloads seen running.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

from exporter.errors import UserError
from exporter.inputs import value_problem
from exporter.recommend import http_fetch
from exporter.recommend.observed import Device, ObservedFleet

SNAPSHOT_PATH = "/api/v1/snapshot"
FETCH_TIMEOUT_SECONDS = 10.0
EXPECTED_PEAK = "gpushare_process_memory_expected_peak_bytes"
PROFILE_PEAK = "gpushare_workload_profile_peak_bytes"


def parse_snapshot_text(text: str, source: str) -> list[dict]:
    """Snapshots in ``text``; UserError naming ``source`` and the line of the first bad one."""
    text = text.strip()
    if not text:
        raise UserError(f"{source}: empty, expected snapshot JSON from `exporter snapshot`")
    decoder = json.JSONDecoder()
    docs: list = []
    pos = 0
    while pos < len(text):
        try:
            doc, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise UserError(f"{source}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})") from None
        except (RecursionError, ValueError) as exc:  # nesting thousands deep, a number of thousands of digits
            problem = "nested too deeply" if isinstance(exc, RecursionError) else value_problem(exc)
            raise UserError(f"{source}: not valid JSON ({problem})") from None
        docs.extend(doc if isinstance(doc, list) and pos == 0 and end == len(text) else [doc])
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or not isinstance(d.get("gpus"), list):
            where = f"snapshot {i + 1}" if len(docs) > 1 else "top level"
            raise UserError(f"{source}: {where}: not a snapshot (expected an object with a 'gpus' list)")
    return docs


def read_text(path: str, flag: str) -> str:
    """A file's text as UTF-8; UserError naming the flag and file otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{flag} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"{flag} {path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def load_snapshot_files(specs: list[str], fleet: ObservedFleet) -> None:
    """Add every ``[NODE=]PATH`` in ``specs`` to ``fleet``."""
    for spec in specs:
        node, sep, path = spec.partition("=")
        if not sep or not node:
            node, path = Path(spec).stem, spec
        snapshots = parse_snapshot_text(read_text(path, "--snapshot"), path)
        fleet.source(f"snapshot {path} (node {node}, {len(snapshots)} snapshot{'s' if len(snapshots) != 1 else ''})")
        for snap in sorted(snapshots, key=snapshot_time):
            add_snapshot(fleet, node, snap, path)


def fetch_snapshots(urls: list[str], fleet: ObservedFleet, timeout: float = FETCH_TIMEOUT_SECONDS,
                    watch_seconds: float = 0.0, interval: float = 5.0, progress=None) -> None:
    """Read each running exporter's snapshot (repeatedly for ``watch_seconds``) and learned peaks."""
    targets = []
    for url in urls:
        base = http_fetch.check_url(url, "--from", "http://node-a:18474")
        if base.endswith(SNAPSHOT_PATH):
            base = base[: -len(SNAPSHOT_PATH)]
        node = base.split("//", 1)[1].split("/", 1)[0]
        targets.append((url, base, node))
    deadline = time.monotonic() + watch_seconds
    looks = 0
    while True:
        for url, base, node in targets:
            expected = _learned(base, url, timeout, fleet)
            body = http_fetch.get(base + SNAPSHOT_PATH, timeout=timeout, place=f"--from {url}", accept="application/json")
            for snap in parse_snapshot_text(body.decode("utf-8", "replace"), base + SNAPSHOT_PATH):
                add_snapshot(fleet, node, snap, base + SNAPSHOT_PATH, expected)
        looks += 1
        if progress is not None:
            progress(looks)
        if time.monotonic() + interval > deadline:
            break
        time.sleep(interval)
    for url, base, _ in targets:
        fleet.source(f"exporter {base} ({looks} look{'s' if looks != 1 else ''})")


def _learned(base: str, url: str, timeout: float, fleet: ObservedFleet) -> dict[tuple[str, str, int], int]:
    """(uuid, gi, pid) -> the exporter's expected peak of that process; its workload profiles' peaks
    go to ``fleet``. Nothing when /metrics cannot be read: the plan rests on the snapshots."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str, int], int] = {}
    try:
        text = http_fetch.get(base + "/metrics", timeout=timeout, place=f"--from {url}").decode("utf-8", "replace")
        for family in text_string_to_metric_families(text):
            for s in family.samples if family.name in (EXPECTED_PEAK, PROFILE_PEAK) else ():
                if s.value != s.value or s.value <= 0:
                    continue
                if family.name == PROFILE_PEAK:
                    fleet.profile_peak(s.labels.get("workload", ""), int(s.value))
                elif s.labels.get("pid", "").isdigit():
                    out[(s.labels.get("uuid", ""), s.labels.get("gi", ""), int(s.labels["pid"]))] = int(s.value)
    except (UserError, ValueError):
        return {}
    return out


def _number(value, default):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def snapshot_time(snap: dict) -> float:
    """Seconds of the snapshot: scenario time under --simulate (polls can be taken at any
    scenario time, the wall clock says nothing), else the wall-clock timestamp."""
    sim = snap.get("simulation")
    if isinstance(sim, dict) and _number(sim.get("time_seconds"), None) is not None:
        return float(sim["time_seconds"])
    return _number(snap.get("timestamp"), 0.0)


def add_snapshot(fleet: ObservedFleet, node: str, snap: dict, source: str, expected: dict | None = None) -> None:
    """Record one snapshot of ``node``: its GPUs, layouts and every process's usage."""
    ts = snapshot_time(snap)
    sim = snap.get("simulation")
    if isinstance(sim, dict):
        fleet.clock = "scenario"
        _oom(fleet, node, snap, sim)
    for i, gpu in enumerate(snap["gpus"]):
        _add_gpu(fleet, node, ts, gpu, f"{source}: gpus[{i}]", expected or {})
    fleet.seen(node, ts)


def _oom(fleet, node, snap, sim) -> None:
    kills = sim.get("oom_kills") or {}
    uuids = {g.get("index"): str(g.get("uuid", "")) for g in snap["gpus"] if isinstance(g, dict)}
    for key, count in kills.items() if isinstance(kills, dict) else ():
        gpu, _, gi = str(key).partition("/")
        if _number(count, 0) > 0 and gpu.isdigit():
            fleet.oom(node, uuids.get(int(gpu), ""), gi)


def _add_gpu(fleet, node, ts, gpu, where, expected) -> None:
    if not isinstance(gpu, dict):
        raise UserError(f"{where}: expected an object")
    if gpu.get("up") is False:
        return
    index, name = gpu.get("index"), gpu.get("name")
    if not isinstance(index, int) or not isinstance(name, str):
        raise UserError(f"{where}: missing 'index' or 'name'")
    uuid = str(gpu.get("uuid", index))
    model = fleet.gpu(node, index, name, uuid, str(gpu.get("sharing") or ""))
    if model is None:
        return
    instances = {}
    for inst in gpu.get("mig_instances") or []:
        if isinstance(inst, dict) and isinstance(inst.get("gi"), int):
            instances[inst["gi"]] = inst
    fleet.layout(node, index, tuple(sorted((str(m.get("profile")), int(m.get("placement_start", 0)))
                                           for m in instances.values())) if gpu.get("mig_mode") else None)
    by_device = defaultdict(list)
    for j, proc in enumerate(gpu.get("processes") or []):
        if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int):
            raise UserError(f"{where}.processes[{j}]: missing 'pid'")
        if proc.get("is_mps_server"):
            continue  # MPS infrastructure, not a workload
        by_device[proc.get("gi")].append(proc)
    for gi, procs in by_device.items():
        inst = instances.get(gi) if gi is not None else None
        if gi is not None and inst is None:
            continue  # an instance the snapshot does not describe: nothing to size it by
        device = Device(
            node=node, uuid=uuid, gi="" if gi is None else str(gi),
            key=f"{node} gpu{index}" + (f" gi{gi} ({inst.get('profile')})" if inst else ""),
            model=model.key, gpu_index=index,
            capacity_bytes=_number(inst.get("memory_total_bytes"), None) if inst else model.memory_capacity_bytes,
            sms=_number(inst.get("sm_count"), None) if inst else model.sm_count,
            profile=str(inst.get("profile")) if inst else None)
        act = (inst.get("activity") if inst else gpu.get("activity")) or {}
        for proc in procs:
            _add_process(fleet, device, ts, proc, procs, act, expected)


def _add_process(fleet, device, ts, proc, procs, act, expected) -> None:
    util = _number(proc.get("sm_utilization_ratio"), None)
    active = _number(act.get("sm_active"), None)
    if util is not None and device.sms:
        sm = util * device.sms
    elif active is not None and device.sms:
        sm = active * device.sms / len(procs)  # the device's activity, shared out evenly
    else:
        sm = None
    workload = str(proc.get("workload") or "")
    if not workload:
        workload = str(proc.get("name") or "unknown")
        fleet.note("processes without a workload identity (snapshot from an older exporter): "
                   "identified by their executable name")
    fleet.sample(
        device=device, pid=proc["pid"], workload=workload, timestamp=ts,
        memory=_number(proc.get("used_memory_bytes"), None), sms=sm,
        tensor=_number(act.get("tensor_active"), None) if len(procs) == 1 else None,
        mps=bool(proc.get("is_mps_client")),
        expected=expected.get((device.uuid, device.gi, proc["pid"])),
    )
