"""Typed field readers for the scenario loader: each one fails with (path, problem).

``Invalid(path, problem)`` is caught by exporter.sim.scenario and turned into the one-line
UserError ``<file>: <path>: <problem>``. Paths look like ``gpus[1].mig[2].profile``.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from exporter.sim.piecewise import Timeline
from exporter.units import parse_bytes, parse_duration


class Invalid(Exception):
    """A scenario value is wrong; ``path`` says where, ``problem`` what."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


def fail(path: str, problem: str):
    raise Invalid(path, problem)


def key(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def kind(value: Any) -> str:
    """The YAML word for a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def check_keys(data: Any, path: str, allowed: Iterable[str], required: Iterable[str] = ()) -> dict:
    """``data`` as a mapping with only ``allowed`` keys and every ``required`` key."""
    allowed = list(allowed)
    if not isinstance(data, dict):
        fail(path, f"must be a mapping, got {kind(data)}")
    for name in data:
        if not isinstance(name, str) or name not in allowed:
            fail(key(path, str(name)), f"unknown key{did_you_mean(name, allowed)}; "
                 f"allowed here: {', '.join(allowed)}")
    for name in required:
        if name not in data:
            fail(path, f"missing required key '{name}'")
    return data


def as_list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        fail(path, f"must be a list, got {kind(value)}")
    return value


def as_int(value: Any, path: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"must be an integer, got {kind(value)} {value!r}")
    if minimum is not None and value < minimum:
        fail(path, f"must be >= {minimum}, got {value}")
    return value


def as_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        fail(path, f"must be true or false, got {kind(value)} {value!r}")
    return value


def as_str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        fail(path, f"must be a non-empty string, got {kind(value)} {value!r}")
    return value


def as_number(value: Any, path: str, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(path, f"must be a number, got {kind(value)} {value!r}")
    if minimum is not None and value < minimum:
        fail(path, f"must be >= {minimum:g}, got {value:g}")
    return float(value)


def as_ratio(value: Any, path: str) -> float:
    number = as_number(value, path)
    if not 0.0 <= number <= 1.0:
        fail(path, f"{number:g} is outside 0..1 (ratios, not percent)")
    return number


def as_bytes(value: Any, path: str) -> float:
    try:
        return float(parse_bytes(value))
    except ValueError as exc:
        fail(path, str(exc))


def as_count(value: Any, path: str) -> float:
    return float(as_int(value, path, minimum=0))


def as_duration(value: Any, path: str, origin: float | None = None) -> float:
    """Seconds from scenario start; with ``origin``, '+90s' means origin + 90 s."""
    if origin is not None and isinstance(value, str) and value.strip().startswith("+"):
        return origin + as_duration(value.strip()[1:], path)
    try:
        return parse_duration(value)
    except ValueError as exc:
        fail(path, str(exc))


def fmt_time(seconds: float) -> str:
    """'9m30s' style rendering of virtual seconds, for messages."""
    if seconds != int(seconds) or seconds < 60:
        return f"{seconds:g}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return out + (f"{secs}s" if secs else "")


def timeline(
    value: Any,
    path: str,
    read_value: Callable[[Any, str], float],
    origin: float | None = None,
    non_decreasing_values: bool = False,
) -> Timeline:
    """A scalar, or ``[[t, v], ...]`` with non-decreasing times, as a model Timeline.

    A scalar holds from time ``origin`` (or 0). With ``origin`` set, times may be written
    '+90s' (relative to it). ``non_decreasing_values`` is for cumulative counters.
    """
    if not isinstance(value, list):
        return ((origin or 0.0, read_value(value, path)),)
    if not value:
        fail(path, "timeline must have at least one [time, value] point")
    points: list[tuple[float, float]] = []
    for i, point in enumerate(value):
        where = item(path, i)
        if not isinstance(point, list) or len(point) != 2:
            fail(where, f"timeline point must be [time, value], got {point!r}")
        t = as_duration(point[0], item(where, 0), origin)
        v = read_value(point[1], item(where, 1))
        if points and t < points[-1][0]:
            fail(item(where, 0), f"time {fmt_time(t)} is before the previous point's "
                 f"{fmt_time(points[-1][0])} (times must not decrease)")
        if non_decreasing_values and points and v < points[-1][1]:
            fail(item(where, 1), f"cumulative count {v:g} is below the previous {points[-1][1]:g}")
        points.append((t, v))
    return tuple(points)
