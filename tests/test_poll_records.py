"""The records a poll builds or copies without their dataclass __init__ (docs/performance.md, "The
poll, eighth pass"): each is the object __init__ or dataclasses.replace gives (equal, same repr and
field order, still frozen), and what does not fit goes the usual way."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.backend.nvml_types import DeviceTag, device_tag
from exporter.backend.procinfo import DeviceRef, device_ref
from exporter.collectors import PollStats
from exporter.frozen import is_plain, replace
from exporter.podshare import PodShare, _share, _share_by_dict
from exporter.snapshot import SimulationInfo, Snapshot


def test_replace_copies_poll_stats_and_snapshot_as_dataclasses_replace():
    """The poller's PollStats and the simulated backend's Snapshot, copied by __dict__."""
    stats = PollStats(backend="nvml", version="1.0", polls_ok=3, last_error="x")
    changes = dict(polls_ok=4, last_duration_seconds=0.5, last_success_timestamp=2.0,  # noqa: C408
                   last_success_monotonic=1.0, last_error=None)
    snapshot = Snapshot(timestamp=1.0, backend="nvml", driver_version="580", poll_duration_seconds=0.1, gpus=(),
                        section_ok={"gpu": True})
    info = SimulationInfo(time_seconds=601.0, oom_kills={(0, ""): 1}, epoch=5.0)
    for obj, change in ((stats, changes), (snapshot, {"simulation": info})):
        assert is_plain(type(obj))
        copy, expected = replace(obj, **change), dataclasses.replace(obj, **change)
        assert copy == expected and repr(copy) == repr(expected) and type(copy) is type(obj)
        assert list(vars(copy)) == [f.name for f in dataclasses.fields(obj)]  # __init__'s order
        assert copy is not obj and obj != copy  # the original untouched
        with pytest.raises(dataclasses.FrozenInstanceError):
            copy.backend = "dcgm"
    with pytest.raises(TypeError):
        replace(stats, no_such_field=1)  # dataclasses.replace says what is wrong


def test_replace_leaves_what_it_does_not_fit_to_dataclasses_replace():
    """A __post_init__ runs on the copy, as dataclasses.replace runs it."""

    @dataclasses.dataclass(frozen=True)
    class Checked:
        ratio: float

        def __post_init__(self):
            if not 0 <= self.ratio <= 1:
                raise ValueError("ratio out of range")

    assert not is_plain(Checked)
    assert replace(Checked(0.5), ratio=1.0) == Checked(1.0)
    with pytest.raises(ValueError, match="out of range"):
        replace(Checked(0.5), ratio=2.0)


def test_device_tags_and_refs_are_one_object_per_value():
    """device_tag and device_ref give the record __init__ gives, the same object for the same
    arguments (frozen: one serves every poll), a new one when a value or its type differs."""
    tag = device_tag("NVIDIA H100 80GB HBM3", "GPU-a", True)
    assert tag == DeviceTag("NVIDIA H100 80GB HBM3", "GPU-a", True) and type(tag) is DeviceTag
    assert device_tag("NVIDIA H100 80GB HBM3", "GPU-a", True) is tag
    assert device_tag("NVIDIA H100 80GB HBM3", "GPU-a", False) == DeviceTag("NVIDIA H100 80GB HBM3", "GPU-a", False)
    assert device_tag("NVIDIA H100 80GB HBM3", "GPU-a", 1).mig_mode == 1 and \
        type(device_tag("NVIDIA H100 80GB HBM3", "GPU-a", 1).mig_mode) is int  # typed: not the True tag
    assert device_tag("m", "GPU-a", True, True) == DeviceTag("m", "GPU-a", True, on_mig=True)
    ref = device_ref(3, "GPU-b", "MIG-c", 1, 0)
    assert ref == DeviceRef(3, "GPU-b", "MIG-c", 1, 0) and device_ref(3, "GPU-b", "MIG-c", 1, 0) is ref
    assert device_ref(3, "GPU-b") == DeviceRef(3, "GPU-b") and device_ref(3, "GPU-b") is not ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        tag.model = "x"


@pytest.mark.parametrize("values", [(0, "GPU-a", None, "", "", 3.0, 0.25), (7, "GPU-b", 2, "ns", "pod", None, None)])
def test_pod_share_rows_built_by_dict_are_inits(values):
    """The pod-share rows of a poll are built by filling __dict__: the row __init__ builds."""
    assert _share is _share_by_dict  # PodShare is still a plain frozen record
    fast, slow = _share_by_dict(*values), PodShare(*values)
    assert fast == slow and repr(fast) == repr(slow) and hash(fast) == hash(slow) and type(fast) is PodShare
    assert list(vars(fast)) == list(vars(slow)) and fast.key == slow.key and fast.attributed == slow.attributed
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.pod = "other"


def test_one_check_says_which_records_may_be_built_by_their_dict():
    """exporter.frozen.is_plain decides for replace, frozen_maker and positional_maker alike: a record
    with an InitVar (a pseudo-field its __init__ consumes) keeps its __init__ in all three."""
    from exporter.backend.nvml_types import frozen_maker
    from exporter.foresight.result import positional_maker

    @dataclasses.dataclass(frozen=True)
    class WithInitVar:
        ratio: float
        scale: dataclasses.InitVar[float] = 1.0

    @dataclasses.dataclass(frozen=True)
    class Plain:
        ratio: float

    assert not is_plain(WithInitVar) and is_plain(Plain)
    assert frozen_maker(WithInitVar) is WithInitVar and positional_maker(WithInitVar) is WithInitVar
    assert frozen_maker(Plain) is not Plain and positional_maker(Plain) is not Plain
    assert replace(WithInitVar(0.5), ratio=0.25) == WithInitVar(0.25)
