"""Parsing of human-written sizes and durations (scenario files, CLI flags).

Errors raise ValueError with a short message such as ``bad size '22 GXB': unknown unit
'GXB' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)``; callers add the place.
"""

from __future__ import annotations

import math
import re

# Decimal units are powers of 10, binary units powers of 2 (IEC). Matched case-insensitively,
# so "gib", "GiB" and "GIB" are the same; "GB" is 10^9 bytes as on a spec sheet.
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_UNIT_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"

# CUDA MPS limits ("0=30G", "set_default_device_pinned_mem_limit 0 900M"): an integer plus G
# or M, binary multiples as the CUDA driver interprets them. "MB"/"GB" are also seen in the
# MPS docs' env-var examples ("1=512MB") and mean the same there.
_MPS_UNITS = {"m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ms|us|h|m|s)")


def _split(kind: str, value: object) -> tuple[float, str]:
    """(number, unit) of a string like '1.5GiB'; ValueError naming ``kind`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"bad {kind} {value!r}: expected a number or a string like '2GiB'")
    match = _NUMBER_UNIT.match(str(value))
    if not match:
        raise ValueError(f"bad {kind} {str(value)!r}: expected a number followed by a unit")
    return float(match.group(1)), match.group(2)


def _whole(kind: str, value: object, number: float) -> int:
    result = round(number)
    if not math.isfinite(number) or abs(number - result) > 1e-6 * max(1.0, abs(number)):
        raise ValueError(f"bad {kind} {str(value)!r}: not a whole number of bytes")
    return int(result)


def parse_bytes(value: object) -> int:
    """Bytes from an int or a string: '512', '2GiB', '22 GiB', '1.5GiB', '500MB', '2GB'."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"bad size {value!r}: negative")
        return value
    number, unit = _split("size", value)
    factor = _SIZE_UNITS.get(unit.lower() if unit else "b")
    if factor is None:
        raise ValueError(f"bad size {str(value)!r}: unknown unit {unit!r} (use {_SIZE_UNIT_NAMES})")
    return _whole("size", value, number * factor)


def parse_mps_size(value: object) -> int:
    """Bytes from an MPS limit such as '30G' or '900M' (G = GiB, M = MiB as CUDA uses)."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(f"bad MPS size {value!r}: needs a unit, G or M (e.g. '30G')")
    number, unit = _split("MPS size", value)
    factor = _MPS_UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"bad MPS size {str(value)!r}: unit must be G or M (e.g. '30G', '900M')")
    return _whole("MPS size", value, number * factor)


def parse_duration(value: object) -> float:
    """Seconds from a number or a string: '90s', '1h2m3s', '9m30s', '500ms', '1.5s', '90'."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"bad duration {value!r}: expected seconds or a string like '9m30s'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _parse_duration_parts(text)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"bad duration {value!r}: must be a finite number >= 0")
    return seconds


def _parse_duration_parts(text: str) -> float:
    parts = _DURATION_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(
            f"bad duration {text!r}: expected e.g. '90s', '1h2m3s', '9m30s', '500ms' or seconds"
        )
    units = [u for _, u in parts]
    if len(set(units)) != len(units):
        raise ValueError(f"bad duration {text!r}: a unit appears twice")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def parse_mps_pinned_limits(value: str) -> dict[str, int]:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ('0=30G,1=512MB', 'GPU-...=900M') as {device: bytes}.

    The device part is a CUDA device ordinal or a GPU/MIG UUID, kept as written.
    """
    limits: dict[str, int] = {}
    for part in str(value).split(","):
        device, sep, size = part.strip().partition("=")
        if not sep or not device.strip():
            raise ValueError(f"bad MPS memory limit {value!r}: expected '<device>=<size>' items "
                             "such as '0=30G,1=512M'")
        limits[device.strip()] = parse_mps_size(size.strip())
    return limits
