"""Seed 004's sizing rule for LLM serving, shared by recommend and the foresight (no numpy here).

Memory a served model needs = parameters x bytes per parameter x 1.2 (weights plus about 20 %
for activations and KV cache at moderate load).
"""

from __future__ import annotations

import math

# Bytes per parameter by precision (seed 004: "determine the precision of the model").
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0, "float32": 4.0, "tf32": 4.0,
    "fp16": 2.0, "float16": 2.0, "half": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "int8": 1.0, "e4m3": 1.0, "e5m2": 1.0,
    "int4": 0.5, "fp4": 0.5, "nf4": 0.5, "mxfp4": 0.5,
}

SIZING_OVERHEAD = 1.2


def rule_sized_bytes(params: float, precision: str) -> int:
    """Memory (bytes) the seed-004 rule gives a model: params x bytes/param x 1.2."""
    return math.ceil(params * PRECISION_BYTES[precision] * SIZING_OVERHEAD)
