"""The collect and encode shortcuts of issue 22's fifth pass give what the series-by-series way
gives: Families.put / put_column / put_columns against add / add_all (the same series, values,
first-use family order and first-value-wins), GroupPlans against group() on real simulator
snapshots poll after poll, the health collector's NVLink columns against the per-link way, and
the encoder's remembered family lines against the library's encoding when values flip between
0.0 and -0.0, move or change."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import encode
from exporter.backend.sim import SimBackend
from exporter.collectors.base import Block, Families, Spec, gpu_labels
from exporter.collectors.health import NVLINK_ERRORS, NVLINK_RX, NVLINK_TX, NVLINK_UP, HealthCollector
from exporter.collectors.instances import MODES, GroupPlans, group
from exporter.collectors.process import process_plans, process_series
from exporter.poller import Poller
from exporter.snapshot import NvLink
from tests.conftest import SCENARIOS
from tests.test_encode import assert_same_bytes, no_fallback  # noqa: F401 - a fixture

A = Spec("gpushare_fast_a_bytes", "gauge", "a", ("gpu", "uuid"), "bytes")
B = Spec("gpushare_fast_b_ratio", "gauge", "b", ("gpu", "uuid"), "ratio")
C = Spec("gpushare_fast_c_total", "counter", "c", ("gpu", "uuid"))
BLOCK = Block(A, B, C)


def shape(out: Families) -> list:
    """Everything /metrics shows of ``out``: families in order, rows in order, exact values."""
    return [(f.spec.name, [(k, math.copysign(1.0, v), v) for k, v in f.rows.items()]) for f in out.series()]


value = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False), st.booleans())
label = st.sampled_from(["0", "1", "2"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(label, st.tuples(value, value, value)), max_size=8), st.booleans())
def test_put_is_add_all(writes, single_first):
    """None skipped, a family made at its first value (first-use order), repeated label sets
    keep their first values, ints and bools stored as floats."""
    fast, slow = Families(), Families()
    if single_first:  # a family made by another path before the block's first put
        fast.add(B, ("9", "x"), 1.5)
        slow.add(B, ("9", "x"), 1.5)
    for gpu, values in writes:
        fast.put(BLOCK, (gpu, "u"), values)
        slow.add_all((gpu, "u"), zip(BLOCK.specs, values))
    assert shape(fast) == shape(slow)


def test_put_checks_its_labels_and_blocks_refuse_infos_and_mixed_widths():
    out = Families()
    with pytest.raises(ValueError):
        out.put(BLOCK, ("0",), (1, 2, 3))
    out.put(BLOCK, (0, None), (1, None, 2))  # label values made str, as add_all does
    assert shape(out) == [(A.name, [(("0", ""), 1.0, 1.0)]), (C.name, [(("0", ""), 1.0, 2.0)])]
    with pytest.raises(ValueError):
        Block(A, Spec("gpushare_fast_info", "info", "i", ("gpu", "uuid")))
    with pytest.raises(ValueError):
        Block(A, Spec("gpushare_fast_d", "gauge", "d", ("gpu",)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["0", "1", "2", "3"]), max_size=6, unique=True),
       st.lists(st.tuples(label, st.floats(allow_nan=False)), max_size=4), st.data())
def test_put_column_is_add_by_add(links, before, data):
    """A column over label sets already partly present keeps their first values."""
    labels = tuple((link, "u") for link in links)
    values = tuple(data.draw(st.one_of(st.floats(allow_nan=False), st.booleans(), st.integers(-5, 5)))
                   for _ in labels)
    fast, slow = Families(), Families()
    for gpu, v in before:
        fast.add(A, (gpu, "u"), v)
        slow.add(A, (gpu, "u"), v)
    fast.put_column(A, labels, values)
    for labels_, v in zip(labels, values):
        slow.add(A, labels_, v)
    assert shape(fast) == shape(slow)
    with pytest.raises(ValueError):
        fast.put_column(A, (("0",),), (1.0,))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(value, value, value), max_size=6))
def test_put_columns_is_put_by_put_once_the_families_exist(rows):
    labels = tuple((str(i), "u") for i in range(len(rows)))
    columns = tuple(zip(*rows)) if rows else ((), (), ())
    fast, slow = Families(), Families()
    assert fast.put_columns(BLOCK, labels, columns) is False and not fast.series()  # families not made yet
    for out in (fast, slow):
        out.put(BLOCK, ("first", "u"), (1, 2, 3))
    assert fast.put_columns(BLOCK, labels, columns) is True
    for labels_, values in zip(labels, rows):
        slow.put(BLOCK, labels_, values)
    assert shape(fast) == shape(slow)


def snapshots(name: str, start: int, polls: int):
    backend = SimBackend(SCENARIOS / f"{name}.yaml")
    poller = Poller(backend, interval=1.0)
    backend.open()
    try:
        for t in range(start, start + polls):
            backend.step_to(t)
            poller.poll_once()
            yield poller.exposition.snapshot
    finally:
        backend.close()


@pytest.mark.parametrize("name,start", [("h100-mixed-node", 595), ("k8s-shared-node", 20), ("faults-demo", 180)])
def test_process_plans_are_process_series_poll_after_poll(name, start):
    """Every mode, every GPU, eight polls (processes start and end in between): the same series,
    labels and members, also when a poll repeats its predecessor's process set (the kept plan)."""
    plans = {mode: process_plans(mode) for mode in MODES}
    compared = 0
    for snapshot in snapshots(name, start, 8):
        for gpu in snapshot.gpus:
            ids = gpu_labels(gpu.index, gpu.uuid)
            for mode, kept in plans.items():
                expected = [(labels, list(members)) for labels, members in process_series(gpu, gpu.processes, mode)]
                for _ in range(2):  # worked out, then kept
                    got = kept.series(gpu.processes, ids, gpu.sharing)
                    assert [(labels, list(members)) for labels, members in got] == expected
                    singles = kept.singles(gpu.processes, ids, gpu.sharing)
                    if all(len(members) == 1 for _, members in expected):
                        assert singles == (tuple(labels for labels, _ in expected),
                                           tuple(members[0] for _, members in expected))
                    else:
                        assert singles is None
                compared += len(expected)
    assert compared > 20


def test_group_plans_reject_an_unknown_mode_at_each_call_as_group_does():
    plans = GroupPlans(lambda item: item, lambda key, _: key, "bogus")
    for items in ([], [("x",)]):
        with pytest.raises(ValueError):
            plans.series(items, ("0", "u"))
        with pytest.raises(ValueError):
            group(items, ("0", "u"), lambda item: item, "bogus")


def health_rows(links: tuple[NvLink, ...], gpus: int = 1, same_ids: bool = False) -> list:
    """The NVLink families a health collector writes for GPUs carrying ``links``."""
    from tests.snapshot_samples import mps_gpu, rich_snapshot

    snapshot = rich_snapshot()
    gpu = mps_gpu()
    gpu = replace(gpu, up=True, health=replace(gpu.health, nvlinks=links))
    others = [replace(gpu, index=gpu.index if same_ids else gpu.index + i + 1) for i in range(gpus - 1)]
    snapshot = replace(snapshot, gpus=(gpu, *others))
    names = {NVLINK_UP.name, NVLINK_TX.name, NVLINK_RX.name, NVLINK_ERRORS.name}
    out = HealthCollector(lambda: snapshot).families(snapshot)
    return [(f.spec.name, list(f.rows.items())) for f in out.series() if f.spec.name in names]


def per_link(links: tuple[NvLink, ...], ids=("0",)) -> list:
    """What the per-link way writes (the rules of exporter.collectors.base.Families)."""
    out = Families()
    for gpu in ids:
        errors: dict = {}
        for link in links:
            out.add_all((gpu, "U") + (str(link.link),), ((NVLINK_UP, None if link.active is None else int(link.active)),
                                                         (NVLINK_TX, link.tx_bytes), (NVLINK_RX, link.rx_bytes)))
            for kind, count in link.errors.items():
                errors[kind] = errors.get(kind, 0) + count
        out.add_each(NVLINK_ERRORS, (gpu, "U"), sorted(errors.items()))
    return [(f.spec.name, list(f.rows.items())) for f in out.series()]


LINKS = (NvLink(0, True, 10, 20, {"replay": 1, "crc_flit": 2}), NvLink(1, False, 0, 5, {"replay": 3}),
         NvLink(2, True, 7, 8, {"recovery": 4, "crc_data": 0}))


@pytest.mark.parametrize("links", [
    LINKS,
    (NvLink(0, None, 10, 20), *LINKS[1:]),  # the first link's state unknown: RX family before UP
    (LINKS[0], NvLink(1, True, None, 5), LINKS[2]),  # an unknown counter: no series for it
    (LINKS[0], NvLink(0, False, 1, 1, {"replay": 9}), LINKS[2]),  # a repeated link number: the first wins
])
def test_nvlink_columns_are_the_per_link_series(links):
    uuid = health_rows(links)
    got = [(name, [((k[0], "U", k[2]), v) for k, v in rows]) for name, rows in uuid]
    assert got == per_link(links)


def test_nvlink_columns_of_two_gpus_and_of_a_repeated_gpu():
    got = health_rows(LINKS, gpus=2)
    assert [(name, [((k[0], "U", k[2]), v) for k, v in rows]) for name, rows in got] == per_link(LINKS, ("0", "1"))
    # The same GPU twice (a broken snapshot): its first series are kept, nothing is doubled.
    twice = health_rows(LINKS, gpus=2, same_ids=True)
    assert [(name, [((k[0], "U", k[2]), v) for k, v in rows]) for name, rows in twice] == per_link(LINKS)


def test_nvlink_error_maps_that_are_not_dicts_are_summed_too():
    from types import MappingProxyType

    links = tuple(replace(link, errors=MappingProxyType(dict(link.errors))) for link in LINKS)
    assert health_rows(links) == health_rows(LINKS)


GAUGE = Spec("gpushare_fast_memo_bytes", "gauge", "remembered lines", ("gpu", "uuid"), "bytes")


def encode_rows(rows: list[tuple[tuple[str, str], float]]):
    out = Families()
    for labels, v in rows:
        out.add(GAUGE, labels, v)
    assert_same_bytes(out.series())
    return encode.text(out.series())


def test_remembered_lines_follow_every_change_of_labels_order_and_value_bits(no_fallback):
    """The same rows again give the remembered lines; a zero's sign, a moved row, a changed or
    added value each give new lines, and each time the library's bytes."""
    base = [(("0", "u"), 0.0), (("1", "u"), 5.0), (("2", "u"), math.nan)]
    first = encode_rows(base)
    assert encode_rows(base) == first
    flipped = encode_rows([(("0", "u"), -0.0)] + base[1:])
    assert flipped != first and b' -0.0\n' in flipped
    assert encode_rows([base[1], base[0], base[2]]) != first
    assert encode_rows([(("0", "u"), 0.0), (("1", "u"), 5.000000000000001), base[2]]) != first
    assert encode_rows(base + [(("3", "u"), 1e6)]) != first
    assert encode_rows(base) == first


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["0", "1", "2"]),
                                   st.sampled_from([0.0, -0.0, 1.0, 1e6, math.inf, -math.inf, math.nan, 2.5])),
                         max_size=4), min_size=2, max_size=6))
def test_polls_of_changing_rows_encode_as_the_library(polls):
    for rows in polls:
        encode_rows([((gpu, "u"), v) for gpu, v in rows])


@pytest.mark.parametrize("mode", MODES)
def test_process_and_mps_series_of_a_repeated_gpu_are_written_once(mode):
    """A GPU listed twice (a broken snapshot) gives its series once, with the first values."""
    from exporter.collectors.mps import MpsCollector
    from exporter.collectors.process import ProcessCollector
    from tests.snapshot_samples import rich_snapshot

    snapshot = rich_snapshot()
    def other_values(p):  # known values changed, unknown ones left unknown (a later known one would be new)
        return replace(p, used_memory_bytes=None if p.used_memory_bytes is None else 1,
                       mps_memory_limit_bytes=None if p.mps_memory_limit_bytes is None else 2)

    doubled = replace(snapshot, gpus=snapshot.gpus + tuple(
        replace(gpu, processes=tuple(map(other_values, gpu.processes))) for gpu in snapshot.gpus))
    for collector in (ProcessCollector, MpsCollector):
        once = collector(lambda: snapshot, mode)
        twice = collector(lambda: doubled, mode)
        for _ in range(2):  # the second time from the kept plans
            expected = [(f.spec.name, list(f.rows.items())) for f in once.families(snapshot).series()]
            assert expected and [(f.spec.name, list(f.rows.items()))
                                 for f in twice.families(doubled).series()] == expected
