"""The collect and encode shortcuts of issue 22's fifth pass give what the series-by-series way
gives: Families.put / put_column against add / add_all (the same series, values, first-use
family order and first-value-wins), the health collector's NVLink columns against the per-link
way, and the encoder's remembered family lines against the library's encoding when values flip
between 0.0 and -0.0, move or change."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import encode
from exporter.collectors.base import Block, Families, Spec
from exporter.collectors.health import NVLINK_ERRORS, NVLINK_RX, NVLINK_TX, NVLINK_UP, HealthCollector
from exporter.snapshot import NvLink
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("put"), label, st.tuples(value, value, value)),
                          st.tuples(st.just("add"), st.sampled_from([A, B, C]), label, value)), max_size=10))
def test_put_makes_families_as_add_all_when_others_write_between_puts(steps):
    """put makes a block's family itself (the _entry it inlines) at the first value, or takes the
    one another path made after the block's first put: the same families, order and rows."""
    fast, slow = Families(), Families()
    for step in steps:
        if step[0] == "put":
            fast.put(BLOCK, (step[1], "u"), step[2])
            slow.add_all((step[1], "u"), zip(BLOCK.specs, step[2]))
        else:
            fast.add(step[1], (step[2], "v"), step[3])
            slow.add(step[1], (step[2], "v"), step[3])
    assert shape(fast) == shape(slow)
    assert [f.spec for f in fast.series()] == [f.spec for f in slow.series()]
    assert all(type(f).__name__ == "Family" and f.rows is fast.rows(f.spec) for f in fast.series())


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

