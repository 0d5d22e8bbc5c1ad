"""The forecast cadence (exporter.foresight.cadence): between forecasts a poll reuses the last one,
and anything that changes what it rests on forecasts afresh at that poll."""

from __future__ import annotations

import pytest

from exporter.collectors.forecast import ForecastCollector
from exporter.foresight import Foresight
from exporter.foresight.cadence import FORECAST_SECONDS, IMMINENT_SECONDS, MOVE_SHARE
from foresight_scenarios import GiB, H100_RESERVED, H100_TOTAL, Job, learn_solo_run, mig_snapshot, mps_gpu_snapshot

CAPACITY = H100_TOTAL - H100_RESERVED


def feed(foresight: Foresight, jobs, times) -> list:
    """Observe the jobs at each time; the result after each poll."""
    out = []
    for t in times:
        foresight.observe(mps_gpu_snapshot(t, jobs), now=t)
        out.append(foresight.result())
    return out


def pair() -> tuple[Foresight, Foresight]:
    """A Foresight with the cadence and one that forecasts every poll, both after the same solo run."""
    cadenced, every = Foresight(), Foresight(forecast_seconds=0.0)
    learn_solo_run(cadenced)
    learn_solo_run(every)
    return cadenced, every


@pytest.mark.parametrize("step", [FORECAST_SECONDS, 7.0, 15.0])
def test_at_polls_of_forecast_seconds_or_more_every_poll_forecasts(step):
    """At a poll interval of FORECAST_SECONDS or longer the results are those of forecasting every poll."""
    cadenced, every = pair()
    t = 1_000_000.0 + 600.0
    jobs = [Job(pid=200 + i, start=t + 10 + 5 * i) for i in range(3)]  # near together: they overflow
    times = [t + step * n for n in range(int(700 / step))]
    a, b = feed(cadenced, jobs, times), feed(every, jobs, times)
    assert a == b
    assert any(r.devices[0].forecast.contention_in_seconds is not None for r in a)  # the story did overflow


def test_between_forecasts_the_held_rows_are_served_and_the_eta_counts_down():
    """At 1 s polls with nothing moving, a forecast every FORECAST_SECONDS; the polls between serve its
    rows as they were, with the contention ETA counted down by the time elapsed since it."""
    cadenced, every = pair()
    t = 1_000_000.0 + 600.0
    jobs = [Job(pid=200 + i, start=t) for i in range(3)]  # together: they overflow at their common peak
    feed(cadenced, jobs, [t + n for n in range(120)])  # loaded (20 s), level at 22 GiB since
    feed(every, jobs, [t + n for n in range(120)])
    forecasts, held = [], None
    for now in [t + 120 + n for n in range(20)]:
        result = feed(cadenced, jobs, [now])[0]
        reference = feed(every, jobs, [now])[0]
        eta = result.devices[0].forecast.contention_in_seconds
        assert eta is not None
        if held is None:
            held = result
            continue
        if result.processes[0] is not held.processes[0]:  # forecast afresh: new rows
            forecasts.append(now)
            held = result
            assert result == reference  # the same as forecasting every poll
            continue
        if not forecasts:
            continue  # still on a forecast made before the loop
        assert all(a is b for a, b in zip(result.processes, held.processes))
        assert result.devices[0].forecast.peak_demand_bytes == held.devices[0].forecast.peak_demand_bytes
        assert eta == held.devices[0].forecast.contention_in_seconds - (now - forecasts[-1])
        assert eta == reference.devices[0].forecast.contention_in_seconds  # nothing moved: as if forecast
    assert {b - a for a, b in zip(forecasts, forecasts[1:])} == {FORECAST_SECONDS}
    assert len(forecasts) >= 3


def test_a_process_arriving_between_ticks_is_forecast_at_that_poll():
    """A job that starts one second after a forecast is in that poll's result, with a fresh forecast."""
    cadenced, every = pair()
    t = 1_000_000.0 + 600.0
    first = Job(pid=200, start=t)
    feed(cadenced, [first], [t + n for n in range(60)])
    feed(every, [first], [t + n for n in range(60)])
    before = cadenced.result()
    late = Job(pid=201, start=t + 60)
    after = feed(cadenced, [first, late], [t + 60])[0]
    reference = feed(every, [first, late], [t + 60])[0]
    assert [r.pid for r in before.processes] == [200]
    assert [r.pid for r in after.processes] == [200, 201]
    assert after.devices[0].forecast.peak_demand_bytes > before.devices[0].forecast.peak_demand_bytes
    assert after.devices == reference.devices
    assert after.processes == reference.processes


def test_an_exit_between_ticks_is_forecast_at_that_poll():
    """A job gone one second after a forecast is gone from that poll's result."""
    cadenced, _ = pair()
    t = 1_000_000.0 + 600.0
    jobs = [Job(pid=200, start=t), Job(pid=201, start=t, duration=61.0)]
    results = feed(cadenced, jobs, [t + n for n in range(63)])
    assert [r.pid for r in results[60].processes] == [200, 201]
    assert [r.pid for r in results[61].processes] == [200]


def test_memory_moving_more_than_the_share_forecasts_afresh():
    """A run that grows by more than MOVE_SHARE of the capacity between ticks is forecast again at once;
    one that moves less keeps the held forecast."""
    foresight = Foresight()
    t = 1_000_000.0
    level = {"bytes": 10 * GiB}
    job = Job(pid=300, start=t, memory=lambda age: level["bytes"])
    feed(foresight, [job], [t + n for n in range(30)])
    held = foresight.result()
    level["bytes"] += int(MOVE_SHARE * CAPACITY / 2)  # within the share: the held rows
    same = feed(foresight, [job], [t + 30])[0]
    if same.processes[0] is not held.processes[0]:  # t + 30 was the cadence's tick: step past it
        held = same
        same = feed(foresight, [job], [t + 31])[0]
        t += 1
    assert same.processes[0] is held.processes[0]
    level["bytes"] += int(2 * MOVE_SHARE * CAPACITY)  # beyond it: a fresh forecast at this poll
    moved = feed(foresight, [job], [t + 31])[0]
    assert moved.processes[0] is not held.processes[0]
    assert moved.processes[0].expected_peak_bytes == level["bytes"]


def test_learning_stays_per_poll():
    """Every poll's sample is recorded, whether or not the forecast was reused."""
    foresight = Foresight()
    t = 1_000_000.0
    job = Job(pid=400, start=t)
    feed(foresight, [job], [t + n for n in range(40)])
    (live,) = foresight._live.values()
    assert live.run.samples == 40


def test_a_profile_learned_elsewhere_forecasts_afresh_where_its_workload_runs():
    """A run that ends on one MIG instance teaches its workload's profile: the next poll forecasts the
    other instance running the same workload afresh, though nothing changed there."""
    foresight = Foresight()
    instances = [(1, "3g.40gb", 40 * GiB), (2, "3g.40gb", 40 * GiB)]
    small = lambda age: 8 * GiB if age < 100 else 12 * GiB  # noqa: E731
    jobs = [Job(pid=100, start=1005.0, memory=small, duration=150, gi=1, cmdline="python serve.py"),
            Job(pid=101, start=1005.0, memory=small, duration=400, gi=2, cmdline="python serve.py")]

    def rows_at(t):
        foresight.observe(mig_snapshot(t, jobs, instances), now=t)
        return {row.gi: row for row in foresight.result().processes}

    for t in range(1000, 1155):
        before = rows_at(float(t))
    assert set(before) == {1, 2}
    ended = rows_at(1155.0)  # job 100 is gone (its instance forecasts afresh), and learned
    assert set(ended) == {2}
    assert [p.runs for p in foresight.profiles.values()] == [1]
    after = rows_at(1156.0)
    assert after[2] is not ended[2]  # forecast afresh, one second after, on what was learned
    assert after[2].basis == "learned"
    assert rows_at(1157.0)[2] is after[2]  # and then held again


def test_the_collector_serves_what_a_fresh_collector_would():
    """The forecast collector keeps series with the records they came from: at every poll, held
    forecast or fresh, its series are those of a collector that never saw an earlier poll."""
    cadenced, _ = pair()
    kept = ForecastCollector(cadenced)
    t = 1_000_000.0 + 600.0
    jobs = [Job(pid=200 + i, start=t + 3 * i, duration=60.0 + 7 * i) for i in range(3)]
    for now in [t + n for n in range(90)]:
        feed(cadenced, jobs, [now])
        series = [(f.spec.name, list(f.rows.items())) for f in kept.collect_series()]
        assert series == [(f.spec.name, list(f.rows.items())) for f in ForecastCollector(cadenced).collect_series()]


def test_an_imminent_collision_is_forecast_every_poll():
    """Within IMMINENT_SECONDS of a predicted collision every poll forecasts afresh (the imminent rule's
    window; the confidence counts polls in a row there), as a Foresight without the cadence does."""
    cadenced, every = pair()
    t = 1_000_000.0 + 600.0
    jobs = [Job(pid=200 + i, start=t) for i in range(3)]  # together: they collide at their common peak
    times = [t + n for n in range(470)]
    a, b = feed(cadenced, jobs, times), feed(every, jobs, times)
    imminent = [n for n, r in enumerate(a) if r.devices[0].forecast.contention_in_seconds is not None
                and r.devices[0].forecast.contention_in_seconds <= IMMINENT_SECONDS]
    assert len(imminent) >= 10
    for n in imminent[1:]:
        assert a[n].processes[0] is not a[n - 1].processes[0]  # a fresh forecast
        assert a[n] == b[n]
