"""The garbage collector's settings serve polls under (exporter.commands.serve.settle_gc).

With Python's default threshold, every poll of the shipped mixed 8-GPU node paid a
generation-0 pass (a poll builds a few thousand containers before the previous poll's are
freed); under serve's settings a run of polls pays none, and the polls leave almost no cyclic
garbage for the rarer passes to find.
"""

from __future__ import annotations

import gc

import pytest

from exporter.backend.sim import SimBackend
from exporter.commands.serve import GC_THRESHOLDS, make_poller, settle_gc
from exporter.foresight.state import Foresight
from exporter.shipped import resolve_scenario


@pytest.fixture
def collector_settings():
    """Restores the interpreter's collector settings after the test."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def _polls(count: int) -> tuple[list[int], list]:
    """Generations of the passes made during ``count`` polls of the mixed node (after a warm-up),
    and the cyclic garbage those polls left."""
    backend = SimBackend(resolve_scenario("h100-mixed-node"))
    backend.step_to(600.0)
    poller = make_poller(backend, 1.0, Foresight(), "pod")
    backend.open()
    passes: list[int] = []

    def seen(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    try:
        for step in range(3):
            backend.step_to(601.0 + step)
            poller.poll_once()
        gc.collect()
        gc.callbacks.append(seen)
        try:
            for step in range(count):
                backend.step_to(610.0 + step)
                assert poller.poll_once()
        finally:
            gc.callbacks.remove(seen)
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        return passes, garbage
    finally:
        backend.close()


def test_polls_under_serve_settings_make_no_collector_pass(collector_settings):
    settle_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    passes, garbage = _polls(10)
    assert passes == []
    # pynvml's per-call ctypes array classes were ~15 a poll (7 objects each); what is left is a
    # MIG device handle now and then (a ctypes pointer with its dict), found by the rare pass.
    classes = [o for o in garbage if type(o).__name__ == "PyCArrayType"]
    assert len(classes) <= 2 and len(garbage) <= 5 * 10


def test_default_settings_pay_a_pass_about_every_poll(collector_settings):
    """What the setting is for: the same polls under Python's defaults pass nearly every poll."""
    gc.set_threshold(700, 10, 10)
    passes, _ = _polls(10)
    assert len(passes) >= 5
