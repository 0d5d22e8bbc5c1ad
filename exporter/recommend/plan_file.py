"""`--workloads FILE`: a plan of workloads to place, in YAML (schema in docs/recommend.md).

    gpu_model: H100-80GB            # or gpu_models: [...]; target of workloads without one
    margin: 0                       # optional extra margin on every peak (fraction)
    fleet:                          # optional: GPUs that exist now
      - {node: node-a, gpu_model: H100-80GB, gpus: 8, layout: {"3g.40gb": 2}}
    workloads:
      - {name: llama-3.1-8b, count: 4, params: 8B, precision: fp16}
      - {name: wan2.2-5b, count: 3, memory: 33GB, timeline: [[0s, 0], [30s, 22GB], ...]}

Errors are UserError naming the file and the path inside it.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path

import yaml

from exporter import catalog
from exporter.errors import UserError
from exporter.inputs import value_problem
from exporter.recommend.demand import PRECISION_BYTES, Demand, FleetGpu, Workload, rule_sized_bytes
from exporter.sizing import parse_params
from exporter.units import parse_bytes, parse_duration

TOP_KEYS = {"gpu_model", "gpu_models", "margin", "fleet", "workloads"}
WORKLOAD_KEYS = {"name", "count", "memory", "params", "precision", "timeline", "compute_sms",
                 "compute", "tensor", "gpu_model", "margin"}
FLEET_KEYS = {"node", "gpu_model", "gpus", "layout"}
MIN_BARE_BYTES = 2**20  # a bare number below 1 MiB is surely GB meant, not bytes
MAX_SIZE_BYTES = 2**50  # 1 PiB: far beyond any GPU; larger is a typo (or 1e400)
MAX_COUNT = 100_000  # instances of one workload, GPUs of one fleet entry


def load_plan(path: str) -> Demand:
    """Demand from the plan file at ``path``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"--workloads {path}: {exc.strerror or exc}") from None
    text = data.decode("utf-8", "replace")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise UserError(f"{path}:{where} not valid YAML ({problem})") from None
    except (RecursionError, ValueError) as exc:  # nesting thousands deep, a number of thousands of digits
        problem = "nested too deeply" if isinstance(exc, RecursionError) else value_problem(exc)
        raise UserError(f"{path}: not valid YAML ({problem})") from None
    if "\ufffd" in text and "\ufffd" not in data.decode("utf-8", "ignore"):
        _not_utf8(data, doc, path)
    return parse_plan(doc, path)


def _not_utf8(data: bytes, doc, path: str) -> None:
    """UserError naming the field (else the line) that holds bytes that are not UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        byte = data[exc.start]
    field = _path_to(doc, "\ufffd")
    where = f"{field}: " if field else ""
    raise UserError(f"{path}: {where}not UTF-8 text (byte 0x{byte:02x} on line {line}); save the file as UTF-8")


def _path_to(node, needle: str, where: str = "") -> str | None:
    """The first path (``workloads[2].name``) whose key or value contains ``needle``."""
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{where}.{k}" if where else str(k)
            if needle in str(k):
                return here
            found = _path_to(v, needle, here)
            if found:
                return found
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found = _path_to(v, needle, f"{where}[{i}]")
            if found:
                return found
    elif isinstance(node, str) and needle in node:
        return where or "top level"
    return None


def parse_plan(doc, path: str = "plan") -> Demand:
    """Demand from an already parsed plan document; ``path`` names it in errors."""
    def fail(where: str, problem: str):
        raise UserError(f"{path}: {where}: {problem}")

    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a mapping with a 'workloads' list")
    _no_unknown(doc, TOP_KEYS, "top level", fail)
    targets = doc.get("gpu_models", [doc["gpu_model"]] if "gpu_model" in doc else [])
    if not isinstance(targets, list):
        fail("gpu_models", "expected a list of GPU model names")
    targets = [_model(t, "gpu_models" if "gpu_models" in doc else "gpu_model", fail) for t in targets]
    margin = _ratio(doc.get("margin", 0.0), "margin", fail)
    items = doc.get("workloads")
    if not isinstance(items, list) or not items:
        fail("workloads", "expected a non-empty list")
    workloads: list[Workload] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        for w in _workloads(item, f"workloads[{i}]", margin, fail):
            if w.name in names:
                fail(f"workloads[{i}].name", f"duplicate name {w.name!r}")
            names.add(w.name)
            workloads.append(w)
    gpus = _fleet(doc.get("fleet", []), fail)
    instances = sum(w.count for w in workloads)
    return Demand(workloads=tuple(workloads), gpus=tuple(gpus), targets=tuple(targets),
                  sources=(f"plan {path} ({len(workloads)} workload{'s' if len(workloads) != 1 else ''}, "
                           f"{instances} instance{'s' if instances != 1 else ''} at once)",))


def _no_unknown(item: dict, allowed: set[str], where: str, fail):
    unknown = sorted(set(map(str, item)) - allowed)
    if unknown:
        fail(where, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _model(name, where, fail) -> str:
    try:
        return catalog.resolve_model(str(name)).key
    except KeyError as exc:
        fail(where, exc.args[0])


def _ratio(value, where, fail, upper: float = 10.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= upper:
        fail(where, f"expected a number between 0 and {upper:g}, got {value!r}")
    return float(value)


def _size(value, where, fail, allow_zero: bool = False) -> int:
    if isinstance(value, str) and value.strip().startswith("-") or (
            isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0):
        fail(where, f"{value!r} is negative: a size must be above 0")
    try:
        size = parse_bytes(value)
    except OverflowError:
        fail(where, f"{value!r} is too large: at most {MAX_SIZE_BYTES // 2**50} PiB")
    except ValueError as exc:
        fail(where, str(exc))
    if size == 0 and not allow_zero:
        fail(where, f"{value!r} is zero: a workload needs some memory (e.g. '8GiB')")
    if size > MAX_SIZE_BYTES:
        fail(where, f"{value!r} is too large: at most {MAX_SIZE_BYTES // 2**50} PiB")
    if isinstance(value, (int, float)) and 0 < size < MIN_BARE_BYTES:
        fail(where, f"bare numbers are bytes; write e.g. '{value}GB' or '{value}GiB'")
    return size


def _params(value, where, fail) -> float:
    try:
        return parse_params(value)
    except ValueError as exc:
        fail(where, str(exc))


def _timeline(value, where, fail):
    if not isinstance(value, list) or not value:
        fail(where, "expected a list of [time, size] points, e.g. [[0s, 0], [30s, 22GB]]")
    points = []
    for j, point in enumerate(value):
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            fail(f"{where}[{j}]", "expected [time, size]")
        try:
            t = parse_duration(point[0])
        except ValueError as exc:
            fail(f"{where}[{j}][0]", str(exc))
        if points and t < points[-1][0]:
            fail(f"{where}[{j}][0]", "times must not decrease")
        points.append((t, _size(point[1], f"{where}[{j}][1]", fail, allow_zero=True)))
    if points[0][0] != 0:
        fail(f"{where}[0][0]", "a timeline starts at 0s (the workload's start)")
    if points[-1][0] <= 0:
        fail(where, "a timeline needs a duration (its last time must be after 0s)")
    return tuple(points)


def _workloads(item, where, default_margin, fail) -> list[Workload]:
    if not isinstance(item, dict):
        fail(where, "expected a mapping")
    _no_unknown(item, WORKLOAD_KEYS, where, fail)
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        fail(f"{where}.name", "expected a non-empty string")
    count = item.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        fail(f"{where}.count", f"expected a whole number from 1 to {MAX_COUNT:,}, got {count!r}")
    timeline = _timeline(item["timeline"], f"{where}.timeline", fail) if "timeline" in item else None
    if "params" in item:
        if "memory" in item:
            fail(where, "give either memory or params + precision, not both")
        precision = str(item.get("precision", "")).lower()
        if precision not in PRECISION_BYTES:
            fail(f"{where}.precision", f"expected one of {', '.join(sorted(PRECISION_BYTES))}")
        peak = rule_sized_bytes(_params(item["params"], f"{where}.params", fail), precision)
        sized_by = "params x bytes x 1.2"
    elif "memory" in item:
        peak, sized_by = _size(item["memory"], f"{where}.memory", fail), "explicit"
    elif timeline:
        peak, sized_by = 0, "timeline"
    else:
        fail(where, "needs memory, params + precision, or a timeline")
    if timeline:
        peak = max(peak, max(v for _, v in timeline))
    if "compute_sms" in item and "compute" in item:
        fail(where, "give either compute_sms or compute (a fraction of the GPU), not both")
    sms = item.get("compute_sms")
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, (int, float)) or not 0 <= sms <= 1e6):
        fail(f"{where}.compute_sms", f"expected a number of SMs >= 0, got {sms!r}")
    fraction = _ratio(item["compute"], f"{where}.compute", fail, 1.0) if "compute" in item else None
    tensor = _ratio(item["tensor"], f"{where}.tensor", fail, 1.0) if "tensor" in item else None
    model = _model(item["gpu_model"], f"{where}.gpu_model", fail) if "gpu_model" in item else None
    margin = _ratio(item.get("margin", default_margin), f"{where}.margin", fail)
    return [
        Workload(
            name=name.strip(), peak_memory_bytes=peak, margin_ratio=margin, count=count, compute_sms=sms,
            compute_fraction=fraction, tensor_ratio=tensor, timeline=timeline, gpu_model=model, sized_by=sized_by,
        )
    ]


def _fleet(items, fail) -> list[FleetGpu]:
    if not isinstance(items, list):
        fail("fleet", "expected a list of {node, gpu_model, gpus}")
    gpus = []
    for i, item in enumerate(items):
        where = f"fleet[{i}]"
        if not isinstance(item, dict):
            fail(where, "expected a mapping")
        _no_unknown(item, FLEET_KEYS, where, fail)
        node = str(item.get("node", f"node-{i + 1}"))
        if "gpu_model" not in item:
            fail(where, "gpu_model is required")
        key = _model(item["gpu_model"], f"{where}.gpu_model", fail)
        count = item.get("gpus", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            fail(f"{where}.gpus", f"expected a whole number from 1 to {MAX_COUNT:,}, got {count!r}")
        layout = _layout(item["layout"], key, f"{where}.layout", fail) if "layout" in item else None
        gpus.extend(FleetGpu(node=node, index=k, model=key, layout=layout) for k in range(count))
    return gpus


def _layout(value, key, where, fail):
    """Current layout given as {profile: count} (mig-parted style), at positions that fit."""
    if not isinstance(value, dict):
        fail(where, "expected {profile: count}, e.g. {\"3g.40gb\": 2}")
    model = catalog.MODELS[key]
    want: dict[str, int] = {}
    for name, count in value.items():
        try:
            model.profile(str(name))
        except KeyError as exc:
            fail(where, exc.args[0])
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            fail(f"{where}.{name}", f"expected a count >= 0, got {count!r}")
        if count:
            want[str(name)] = count
    if not want:
        return ()
    for layout in _layouts(key):  # any order of creation may fail where another works
        if Counter(name for name, _ in layout) == want:
            return layout
    described = ", ".join(f"{n} x {p}" for p, n in want.items())
    fail(where, f"{described} do not fit together on one {key}")


@lru_cache(maxsize=None)
def _layouts(key: str):
    return catalog.enumerate_layouts(catalog.MODELS[key])
