"""Fake DCGM bindings (simulator): ``dcgmvalue``, the blank sentinels and their tests.

Written for gpushare-exporter's simulator; the names, values and semantics are those of the
module DCGM ships (facts: shared/reference/dcgm_k8s_facts.md §A3). A value at or above the
type's BLANK sentinel carries no reading: BLANK itself (no data), +1 NOT_FOUND, +2
NOT_SUPPORTED, +3 NOT_PERMISSIONED.
"""

DCGM_INT8_BLANK = 0x70
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0  # 2**47
DCGM_STR_BLANK = "<<<NULL>>>"

DCGM_INT32_NOT_FOUND = DCGM_INT32_BLANK + 1
DCGM_INT64_NOT_FOUND = DCGM_INT64_BLANK + 1
DCGM_FP64_NOT_FOUND = DCGM_FP64_BLANK + 1.0
DCGM_STR_NOT_FOUND = "<<<NOT_FOUND>>>"

DCGM_INT32_NOT_SUPPORTED = DCGM_INT32_BLANK + 2
DCGM_INT64_NOT_SUPPORTED = DCGM_INT64_BLANK + 2
DCGM_FP64_NOT_SUPPORTED = DCGM_FP64_BLANK + 2.0
DCGM_STR_NOT_SUPPORTED = "<<<NOT_SUPPORTED>>>"

DCGM_INT32_NOT_PERMISSIONED = DCGM_INT32_BLANK + 3
DCGM_INT64_NOT_PERMISSIONED = DCGM_INT64_BLANK + 3
DCGM_FP64_NOT_PERMISSIONED = DCGM_FP64_BLANK + 3.0
DCGM_STR_NOT_PERMISSIONED = "<<<NOT_PERM>>>"


def DCGM_INT8_IS_BLANK(val):
    return val >= DCGM_INT8_BLANK


def DCGM_INT32_IS_BLANK(val):
    return val >= DCGM_INT32_BLANK


def DCGM_INT64_IS_BLANK(val):
    return val >= DCGM_INT64_BLANK


def DCGM_FP64_IS_BLANK(val):
    return val >= DCGM_FP64_BLANK


def DCGM_STR_IS_BLANK(val):
    """A string blank starts with '<<<' and contains '>>>'."""
    return val.startswith("<<<") and ">>>" in val
