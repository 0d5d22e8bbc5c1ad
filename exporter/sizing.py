"""Seed 004's sizing rule for LLM serving, shared by recommend and the foresight (no numpy here).

Memory a served model needs = parameters x bytes per parameter x 1.2 (weights plus about 20 %
for activations and KV cache at moderate load).
"""

from __future__ import annotations

import math
import re

# Bytes per parameter by precision (seed 004: "determine the precision of the model").
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0, "float32": 4.0, "tf32": 4.0,
    "fp16": 2.0, "float16": 2.0, "half": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "int8": 1.0, "e4m3": 1.0, "e5m2": 1.0,
    "int4": 0.5, "fp4": 0.5, "nf4": 0.5, "mxfp4": 0.5,
}

SIZING_OVERHEAD = 1.2

PARAM_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
MAX_PARAMS = 1e15
_PARAMS = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*")


def parse_params(value: object) -> float:
    """A parameter count from 8e9, '8B', '7.5B' or '350M'; ValueError saying what is wrong."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        count = float(value)
    else:
        match = _PARAMS.fullmatch(str(value).lower())
        if not match:
            raise ValueError(f"expected a parameter count such as 8B, 7.5B, 350M or 8e9, got {value!r}")
        count = float(match.group(1)) * PARAM_SUFFIX[match.group(2)]
    if not math.isfinite(count) or not 0 < count <= MAX_PARAMS:
        raise ValueError(f"expected a parameter count above 0 and at most {MAX_PARAMS:g}, got {value!r}")
    return count


def rule_sized_bytes(params: float, precision: str) -> int:
    """Memory (bytes) the seed-004 rule gives a model: params x bytes/param x 1.2."""
    return math.ceil(params * PRECISION_BYTES[precision] * SIZING_OVERHEAD)
