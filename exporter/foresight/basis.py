"""What a run without a learned profile of its own is forecast from: the other bases.

In the order the foresight tries them (exporter.foresight.forecast lists them all):

- ``scaled``: the same workload learned on a device of another size. A workload that took
  nearly all of the device it was learned on (SELF_SIZING_SHARE or more) sizes itself to
  its device (vLLM's gpu_memory_utilization, a framework's memory fraction), and so must one
  whose learned peak would not fit this device at all: its timeline is scaled by the ratio
  of the sizes. Otherwise it needs what it needed: bytes are kept. Either guess can be wrong:
  a run that holds steady at another level than the scaled profile at the same age rescales
  it to that level (calibrated_profile).
- ``declared``: GPUSHARE_EXPECTED_PEAK in the process's environment, a size (``30GiB``) or,
  for LLM serving, a parameter count and precision (``8B fp16``, ``70B int4``) that seed
  004's rule turns into bytes (parameters x bytes per parameter x 1.2). On Kubernetes, set
  it from a pod annotation through the downward API (docs/foresight.md). The rule is not
  applied to model names guessed from command lines: a model served quantized would be
  expected at twice or four times what it holds, a false alarm on every start.
- ``trend``: the run's own steady growth over the last TREND_WINDOW seconds (see trend()),
  extrapolated for a quarter of the run's age, at most TREND_MAX_SECONDS (a leak or a ramp
  on its first run; a line says little about what comes later).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import replace
from functools import lru_cache
from operator import itemgetter
from typing import Mapping, Sequence

from exporter.foresight.forecast import STEADY_BAND, STEADY_SECONDS
from exporter.foresight.profiles import WorkloadProfile, timeline_level
from exporter.sizing import PRECISION_BYTES, parse_params, rule_sized_bytes
from exporter.units import parse_bytes

DECLARED_VAR = "GPUSHARE_EXPECTED_PEAK"
SELF_SIZING_SHARE = 0.85  # a learned peak this close to the device's size means it sizes itself
CALIBRATION_LIMIT = 4.0  # a run steady at up to this factor from a scaled profile rescales it
TREND_WINDOW = 300.0  # seconds of a run's samples its trend is fitted on
TREND_MIN_SPAN = 60.0  # seconds of samples a trend needs
TREND_SKIP_LOAD = 60.0  # seconds at the start of a run that are loading, not trend
TREND_MIN_GROWTH = 64 * 2**20  # bytes the fitted line must rise over the stretch
TREND_MAX_SECONDS = 300.0  # a straight line is worth this much of the future, no more
TREND_MIN_AGE = 120.0  # seconds a run must have lasted before its growth is taken as a trend

_PARAM_LETTERS = ("k", "m", "b", "t")  # "8B fp16", "70b int4", "350M": parameters, never bytes


@lru_cache(maxsize=4096)  # asked for several times per process per poll; keys repeat
def workload_of(profile_key: str) -> str:
    """The workload key of a profile key (``<workload>@<GiB>GiB``)."""
    base, at, size = profile_key.rpartition("@")
    return base if at and size.endswith("GiB") and size[:-3].isdigit() else profile_key


def scaled_profile(candidates: Sequence[WorkloadProfile], capacity_bytes: int | None) -> WorkloadProfile | None:
    """The same workload's profile learned on the nearest other device size, scaled to this one."""
    usable = [p for p in candidates if p.usable and p.device_bytes]
    if not usable or not capacity_bytes:
        return None
    nearest = min(usable, key=lambda p: (abs(math.log(p.device_bytes / capacity_bytes)), p.key))
    ratio = capacity_bytes / nearest.device_bytes
    if nearest.peak_bytes < SELF_SIZING_SHARE * nearest.device_bytes and nearest.peak_bytes < capacity_bytes:
        ratio = 1.0  # it needs what it needed (one that could not fit at all must size itself)
    return replace(
        nearest,
        key=f"{nearest.key}~scaled@{capacity_bytes}",  # its own landmark cache entry
        peak_bytes=int(nearest.peak_bytes * ratio),
        timeline=tuple((age, int(v * ratio)) for age, v in nearest.timeline),
        recent_peaks=(),
        device_bytes=capacity_bytes,
    )


def calibrated_profile(profile: WorkloadProfile, used: int, position: float) -> WorkloadProfile | None:
    """``profile`` rescaled so that its level at ``position`` (learned seconds) is ``used``.

    None when the profile holds under a quarter of its peak there (loading: too steep to
    compare) or the ratio is beyond CALIBRATION_LIMIT either way (another kind of run).
    """
    level = timeline_level(profile.timeline, position)
    if level < profile.peak_bytes / 4 or used <= 0:
        return None
    ratio = used / level
    if not 1 / CALIBRATION_LIMIT <= ratio <= CALIBRATION_LIMIT:
        return None
    return replace(profile, key=f"{profile.key}~x{ratio:.4f}", peak_bytes=int(profile.peak_bytes * ratio),
                   timeline=tuple((age, int(v * ratio)) for age, v in profile.timeline))


def declared_bytes(environ: Mapping[str, str]) -> int | None:
    """Bytes a process declared it will need (see module docstring); None when it did not
    or the declaration is unusable (docs/foresight.md: an unusable declaration is ignored).

    A count with a one-letter suffix (``8B``, ``70B int4``, ``350M``) is a parameter count:
    ``8B`` is eight billion parameters, not eight bytes. Anything else is a size (``30GiB``).
    """
    raw = environ.get(DECLARED_VAR, "").strip()
    if not raw:
        return None
    tokens = raw.lower().split()
    if len(tokens) <= 2 and tokens[0][-1:] in _PARAM_LETTERS and tokens[0][:-1].replace(".", "", 1).isdigit():
        precision = tokens[1] if len(tokens) == 2 else "fp16"
        try:
            params = parse_params(tokens[0])
        except ValueError:
            return None
        return rule_sized_bytes(params, precision) if precision in PRECISION_BYTES else None
    try:
        return parse_bytes(raw)
    except ValueError:
        return None


def trend(points: Sequence[tuple[float, int]], age: float) -> tuple[float, float]:
    """(bytes per second, seconds to extrapolate) of a run's steady growth; (0, 0) without one.

    ``points`` are the run's (age, bytes) samples, ``age`` its age now. Loading a model is
    fast growth that stops, and a server's load spikes come and go: the first
    TREND_SKIP_LOAD seconds of a run are left out, and the growth is read from the *floor*
    of the window's three thirds (their minima), which must rise from each third to the next.
    A leak raises its floor; a spiky server does not. The line is trusted for a quarter of
    the run's age (at most TREND_MAX_SECONDS): the longer the evidence, the further it reaches.
    """
    if age < TREND_MIN_AGE:
        return 0.0, 0.0
    recent = points[bisect_left(points, max(age - TREND_WINDOW, TREND_SKIP_LOAD), key=_age):]  # ages ascend
    if len(recent) < 6 or recent[-1][0] - recent[0][0] < TREND_MIN_SPAN:
        return 0.0, 0.0
    first, span = recent[0][0], recent[-1][0] - recent[0][0]
    cuts = [0] + [bisect_left(recent, first + span * k / 3, key=_age) for k in (1, 2)] + [len(recent)]
    if any(a >= b for a, b in zip(cuts, cuts[1:])):
        return 0.0, 0.0
    values = list(map(_value, recent))  # each sample's bytes, taken in C (a few hundred a run)
    floors = [min(values[a:b]) for a, b in zip(cuts, cuts[1:])]
    if not floors[0] < floors[1] < floors[2] or floors[2] - floors[0] < TREND_MIN_GROWTH:
        return 0.0, 0.0
    return (floors[2] - floors[0]) / (span * 2 / 3), min(age / 4, TREND_MAX_SECONDS)


def recent_fall(points: Sequence[tuple[float, int]], age: float) -> tuple[int, int] | None:
    """(least held, largest fall below an earlier high) of a run over its last TREND_WINDOW
    seconds, its first TREND_SKIP_LOAD (loading) left out (bytes); None before it has any such
    sample. A run that only grows or holds level has fallen 0; a server whose cache comes and
    goes, or a notebook that dropped a model, has given memory back."""
    recent = points[bisect_left(points, max(age - TREND_WINDOW, TREND_SKIP_LOAD), key=_age):]  # ages ascend
    if not recent:
        return None
    values = list(map(_value, recent))
    top, fall = 0, 0
    for value in values:  # fall = the largest of (the highest so far - value), top = that highest
        if value > top:
            top = value
        elif top - value > fall:
            fall = top - value
    return min(values), fall


def is_steady(points: Sequence[tuple[float, int]], used: int) -> bool:
    """True when a run's samples of the last STEADY_SECONDS (at least 3, and an older one
    before them) all lie within STEADY_BAND of its use now."""
    if not points or used <= 0:
        return False
    start = bisect_left(points, points[-1][0] - STEADY_SECONDS, key=_age)  # ages ascend
    if start == 0 or len(points) - start < 3:
        return False
    band = STEADY_BAND * used
    values = list(map(_value, points[start:]))
    # all(abs(v - used) <= band): v - used grows with v, so only the highest and the lowest can fail
    return max(values) - used <= band and used - min(values) <= band


def _age(point: tuple[float, int]) -> float:
    return point[0]


_value = itemgetter(1)  # a sample's bytes
