"""field_rows (exporter/backend/nvml_fieldrows.py), its conversions applied as the health
reader applies them, reads a field-values answer as the reader's ctypes path does
(exporter.backend.nvml_health._ctypes_rows): the same tuples, value by value, for every value
type NVML has, on the simulator's answers and on filled arrays; and None for a layout it does
not know, where the health reader reads through ctypes and exports the same health."""

from __future__ import annotations

import ctypes
import math
import random
import struct

import pynvml
import pytest

from exporter.backend import nvml_fieldrows
from exporter.backend.nvml_fieldrows import field_rows
from exporter.backend.nvml_health import _ctypes_rows, _value_members
from exporter.shipped import resolve_scenario
from exporter.sim import Simulation
from exporter.sim.scenario import load_scenario

MEMBERS = _value_members(pynvml)
TYPES = [pynvml.NVML_VALUE_TYPE_DOUBLE, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG,
         pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG,
         getattr(pynvml, "NVML_VALUE_TYPE_SIGNED_INT", 5), 99]  # 99: a type NVML does not have


def _same(a, b) -> bool:
    """Tuples equal, floats by their bits (NaN and -0.0 included)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return False
        if isinstance(x, float) and struct.pack("d", x) != struct.pack("d", y):
            return False
        if not isinstance(x, float) and x != y:
            return False
    return True


def _check(answer):
    read = field_rows(answer, MEMBERS)
    assert read is not None
    raw, converts = read
    rows = [row if row[4] not in converts else row[:6] + (converts[row[4]](row[6]),) for row in raw]
    slow = list(_ctypes_rows(answer, MEMBERS))
    assert len(rows) == len(slow) == len(answer)
    for fast, ctypes_row in zip(rows, slow):
        assert _same(fast[:3] + fast[4:], ctypes_row[:3] + ctypes_row[4:]), (fast, ctypes_row)
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_every_value_type_reads_as_through_ctypes(seed):
    rng = random.Random(seed)
    answer = (pynvml.c_nvmlFieldValue_t * 300)()
    for entry in answer:
        entry.fieldId, entry.scopeId = rng.randrange(2**32), rng.randrange(2**32)
        entry.timestamp, entry.latencyUsec = rng.randrange(-(2**63), 2**63), rng.randrange(2**40)
        entry.valueType, entry.nvmlReturn = rng.choice(TYPES), rng.choice([0, 0, 3, 999])
        raw = rng.choice([rng.randrange(2**64), 0, 2**64 - 1, 2**63, 2**32 - 1, 2**31,
                          struct.unpack("Q", struct.pack("d", rng.choice([-0.0, math.nan, math.inf, 1e-300, 1.5])))[0]])
        ctypes.memmove(ctypes.addressof(entry.value), struct.pack("Q", raw), 8)
    rows = _check(answer)
    assert {row[4] for row in rows} == set(TYPES)


def test_the_simulators_answers_read_as_through_ctypes(install_simulation):
    """The health reader's requests on every GPU of the mixed node (NVLink boards, MIG, none)."""
    sim = Simulation(load_scenario(resolve_scenario("h100-mixed-node")))
    sim.advance_to(600.0)
    install_simulation(sim)
    nv = pynvml
    ids = [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, nv.NVML_FI_DEV_MEMORY_TEMP,
           nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER, nv.NVML_FI_DEV_NVLINK_LINK_COUNT, nv.NVML_FI_DEV_PERF_POLICY_POWER,
           999_999] + [(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in range(18)]
    read = 0
    for index in range(nv.nvmlDeviceGetCount()):
        answer = nv.nvmlDeviceGetFieldValues(nv.nvmlDeviceGetHandleByIndex(index), ids)
        rows = _check(answer)
        read += sum(1 for row in rows if row[5] == nv.NVML_SUCCESS)
    assert read > 0


def test_an_unknown_layout_is_read_through_ctypes():
    """Another struct (fields renamed, reordered, or a value union of another size): None."""

    class Renamed(ctypes.Structure):
        _fields_ = [(name if name != "scopeId" else "scope", typ) for name, typ in pynvml.c_nvmlFieldValue_t._fields_]

    class Reordered(ctypes.Structure):
        _fields_ = [pynvml.c_nvmlFieldValue_t._fields_[i] for i in (1, 0, 2, 3, 4, 5, 6)]

    class Wide(ctypes.Union):
        _fields_ = [("ullVal", ctypes.c_ulonglong), ("pad", ctypes.c_char * 16)]

    class WideValue(ctypes.Structure):
        _fields_ = pynvml.c_nvmlFieldValue_t._fields_[:6] + [("value", Wide)]

    for kind in (Renamed, Reordered, WideValue):
        assert field_rows((kind * 3)(), MEMBERS) is None
    assert nvml_fieldrows._readers[Renamed * 3] is None  # asked once per array class


def test_the_health_reader_exports_the_same_health_either_way(install_simulation, monkeypatch):
    """The mixed node's health through the NVML backend, rows by struct and by ctypes: equal."""
    from exporter.backend import nvml_health
    from exporter.backend.sim import SimBackend

    def snapshot_health():
        backend = SimBackend(resolve_scenario("h100-mixed-node"))
        backend.step_to(600.0)
        backend.open()
        try:
            polls = []
            for at in (601.0, 602.0):  # the second has PCIe rates (counters of two polls)
                backend.step_to(at)
                polls.append([gpu.health for gpu in backend.poll().gpus])
            return polls
        finally:
            backend.close()

    fast = snapshot_health()
    monkeypatch.setattr(nvml_health, "field_rows", lambda answer, members: None)
    slow = snapshot_health()
    assert fast == slow
    assert any(health is not None and health.nvlinks for health in fast[1])
    assert any(health is not None and health.pcie_tx_bytes_per_second is not None and health.clock_event_seconds
               and health.memory_temperature_celsius is not None for health in fast[1])
