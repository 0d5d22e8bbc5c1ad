"""Learning from outcomes: quiet warnings give a workload its observed slack, unwarned kills a margin;
both persist with the profiles (schema 2 store; a schema 1 store is migrated) and are exported."""

from __future__ import annotations

import json
import sqlite3

from exporter.collectors.forecast import ForecastCollector
from exporter.foresight import Foresight
from exporter.foresight.calibration import (
    MAX_MARGIN, MAX_SLACK, OutcomeLearner, WorkloadOutcome, quiet_run, unwarned_kill,
)
from exporter.foresight.profiles import RunRecorder, WorkloadProfile
from exporter.foresight.runs import LiveRun
from exporter.foresight.store import DB_NAME, SCHEMA_VERSION, ProfileStore, profile_to_dict
from foresight_scenarios import WAN_DURATION, Job, learn_solo_run, replay, wan_memory

GiB = 2**30


def test_slack_is_used_once_quiet_warnings_agree_and_is_bounded():
    one = quiet_run(None, "w", 40 * GiB, 36 * GiB, 1.0)
    assert one.factor == 1.0  # a single quiet warning proves little
    two = quiet_run(one, "w", 40 * GiB, 36 * GiB, 2.0)
    assert abs(two.factor - 0.9) < 1e-9
    huge = quiet_run(quiet_run(None, "w", 40 * GiB, 4 * GiB, 1.0), "w", 40 * GiB, 4 * GiB, 2.0)
    assert huge.factor == 1.0 - MAX_SLACK


def test_an_unwarned_kill_raises_the_margin_and_undoes_slack():
    quiet = quiet_run(quiet_run(None, "w", 40 * GiB, 30 * GiB, 1.0), "w", 40 * GiB, 30 * GiB, 2.0)
    killed = unwarned_kill(quiet, "w", 3.0)
    assert killed.factor > 1.0 and killed.slack == 0.0 and killed.quiet == 0
    many = killed
    for t in range(10):
        many = unwarned_kill(many, "w", 4.0 + t)
    assert many.factor == 1.0 + MAX_MARGIN


def live_run(peak: int) -> LiveRun:
    run = RunRecorder("w|80", 0.0, True, 80 * GiB)
    run.add(10.0, peak)
    return LiveRun(run, 10.0, 0.5, 2)


def test_learner_waits_for_the_warning_to_settle_quietly():
    learner = OutcomeLearner({}, grace=120.0)
    device = ("GPU-a", None)
    ended = live_run(30 * GiB)
    ended.warned_peak = 40 * GiB
    learner.run_ended(ended, device, "w", suspected=False, warned=True, now=100.0)
    assert "w" not in learner.outcomes  # its warning has not settled yet
    learner.settled([(device, False)], [], now=150.0)
    assert learner.outcomes["w"].quiet == 1 and abs(learner.outcomes["w"].slack - 0.15) < 1e-9
    assert learner.dirty == {"w"}
    loud = live_run(39 * GiB)
    loud.warned_peak = 40 * GiB
    learner.run_ended(loud, device, "v", suspected=False, warned=True, now=200.0)
    learner.settled([(device, True)], [], now=210.0)  # that warning ended with an OOM: no slack to learn
    assert "v" not in learner.outcomes
    learner.run_ended(live_run(1), device, "k", suspected=True, warned=False, now=300.0)
    assert learner.outcomes["k"].unwarned_kills == 1


def test_outcomes_round_trip_and_a_schema_1_store_is_migrated(tmp_path):
    """A store written by the previous schema (profiles only) opens with its profiles and gains outcomes."""
    profile = WorkloadProfile("job|80", 10 * GiB, 5.0, 10.0, 1, 3, ((0.0, GiB), (5.0, 10 * GiB)), 1.0)
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE profiles (key TEXT PRIMARY KEY, data TEXT NOT NULL, updated_at REAL NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema', '1')")
    db.execute("INSERT INTO profiles VALUES (?, ?, ?)", (profile.key, json.dumps(profile_to_dict(profile)), 1.0))
    db.commit()
    db.close()
    store = ProfileStore(tmp_path)
    assert store.ok and store.load() == {profile.key: profile}
    assert store.load_outcomes() == {}
    outcome = quiet_run(quiet_run(None, "job", 10 * GiB, 9 * GiB, 5.0), "job", 10 * GiB, 9 * GiB, 6.0)
    assert store.save_outcomes([outcome])
    store.close()
    again = ProfileStore(tmp_path)
    assert again.load_outcomes() == {"job": outcome}
    schema = sqlite3.connect(tmp_path / DB_NAME).execute("SELECT value FROM meta WHERE name='schema'").fetchone()
    assert schema[0] == SCHEMA_VERSION == "2"


def test_unreadable_outcome_row_is_dropped(tmp_path, caplog):
    store = ProfileStore(tmp_path)
    assert store.save_outcomes([WorkloadOutcome("good", 2, 0.1, 0, 1.0)])
    store._db.execute("INSERT INTO outcomes VALUES ('bad', '{\"workload\": \"bad\", \"slack\": 7}', 2.0)")
    assert set(store.load_outcomes()) == {"good"}
    assert "bad" in caplog.text


def test_quiet_warnings_lower_the_forecast_and_persist(tmp_path):
    """Learned from two full runs (33 GiB at the end), two Wan jobs share the H100 with a 16 GiB
    server; this time their final step only reaches 29 GiB: the warning (82 GiB expected) comes
    and ends without an OOM. The workload then has the observed slack (it is exported and
    persisted), and the same three together are no longer forecast to overflow."""
    foresight = Foresight(state_dir=tmp_path)
    t = learn_solo_run(foresight, 1_000_000.0, pid=101)
    t = learn_solo_run(foresight, t, pid=102)

    def lower_end(age: float) -> int:
        return wan_memory(age) if age < WAN_DURATION - 30.0 else 29 * GiB

    warned = []
    for round_ in range(2):
        jobs = [Job(pid=300 + 10 * round_ + i, start=t + 10.0, memory=lower_end) for i in range(2)]
        jobs.append(Job(pid=399 - round_, start=t, duration=WAN_DURATION + 100.0, memory=lambda age: 16 * GiB,
                        cmdline="python3 embed_server.py"))
        headrooms = [r.devices[0].forecast.headroom_bytes  # every poll: replay runs while consumed
                     for _, r in replay(foresight, jobs, t, t + WAN_DURATION + 200.0) if r.devices]
        warned.append(min(headrooms) < 0)
        t += WAN_DURATION + 210.0
    assert warned == [True, False]
    (outcome,) = foresight.learner.outcomes.values()
    assert outcome.quiet == 2 and 0.1 < outcome.slack <= MAX_SLACK and outcome.factor < 1.0
    assert outcome.workload.startswith("python3 generate.py")
    exposition = {m.name: m for m in ForecastCollector(foresight).collect()}
    slack = exposition["gpushare_workload_forecast_slack_ratio"].samples
    assert len(slack) == 1 and slack[0].value == round(1 - outcome.factor, 4)
    foresight.flush()
    assert Foresight(state_dir=tmp_path).learner.outcomes == foresight.learner.outcomes
