"""Profile store: persistence, size bound, crash and corruption safety, JSON export/import."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from exporter.errors import UserError
from exporter.foresight.profiles import WorkloadProfile
from exporter.foresight.store import DB_NAME, ProfileStore, export_json, import_json

REPO = Path(__file__).resolve().parent.parent


def profile(key: str, updated: float = 1.0, peak: int = 10) -> WorkloadProfile:
    """A small valid profile."""
    return WorkloadProfile(key, peak, 5.0, 10.0, 1, 3, ((0.0, 1), (5.0, peak)), updated)


def test_profiles_survive_reopening(tmp_path):
    """What one store saved, the next store opened on the same directory loads unchanged."""
    store = ProfileStore(tmp_path)
    saved = [profile("a"), profile("b", peak=99)]
    assert store.save(saved)
    store.close()
    assert ProfileStore(tmp_path).load() == {p.key: p for p in saved}


def test_store_keeps_only_the_most_recently_updated(tmp_path):
    """Beyond max_profiles, the oldest updated profiles are dropped."""
    store = ProfileStore(tmp_path, max_profiles=3)
    store.save([profile(f"k{i}", updated=float(i)) for i in range(10)])
    assert sorted(store.load()) == ["k7", "k8", "k9"]


def test_garbage_file_is_set_aside_with_a_warning(tmp_path, caplog):
    """A file that is not a database is renamed *.corrupt-<ts> and a fresh store starts."""
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    with caplog.at_level(logging.WARNING):
        store = ProfileStore(tmp_path)
    assert store.ok and store.load() == {}
    aside = list(tmp_path.glob(f"{DB_NAME}.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not sqlite")
    assert "unreadable" in caplog.text and str(aside[0]) in caplog.text
    assert store.save([profile("a")]) and "a" in store.load()


def test_foreign_schema_is_set_aside(tmp_path):
    """A database from another schema version is not read as ours."""
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema', '99')")
    db.commit()
    db.close()
    store = ProfileStore(tmp_path)
    assert store.ok and list(tmp_path.glob(f"{DB_NAME}.corrupt-*"))


def test_unreadable_row_is_dropped_not_fatal(tmp_path, caplog):
    """One bad row costs that profile only."""
    store = ProfileStore(tmp_path)
    store.save([profile("good")])
    store._db.execute("INSERT INTO profiles VALUES ('bad', '{\"key\": \"bad\"}', 1.0)")
    with caplog.at_level(logging.WARNING):
        assert list(store.load()) == ["good"]
    assert "dropping unreadable profile" in caplog.text


def test_unwritable_state_dir_degrades_to_memory(tmp_path, caplog):
    """A state dir that cannot be created disables the store with a warning, no exception."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING):
        store = ProfileStore(blocker / "state")
    assert not store.ok and store.load() == {} and not store.save([profile("a")])
    assert "state store disabled" in caplog.text


WRITER = textwrap.dedent(
    """
    import sys
    from exporter.foresight.profiles import WorkloadProfile
    from exporter.foresight.store import ProfileStore
    store = ProfileStore(sys.argv[1])
    i = 0
    while True:
        batch = [WorkloadProfile(f"k{j}", i, 1.0, 2.0, 1, i, ((0.0, i),), float(i)) for j in range(50)]
        store.save(batch)
        i += 1
        if i == 20:
            print("ready", flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_kill_during_writes_leaves_a_consistent_store(tmp_path):
    """SIGKILL in the middle of a stream of saves: every profile reads back, all from one save."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.05)  # let it get into further transactions; not a timing assertion
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    loaded = ProfileStore(tmp_path).load()
    assert len(loaded) == 50
    assert len({p.peak_bytes for p in loaded.values()}) == 1  # one transaction's worth, never a mix


def test_json_round_trip(tmp_path):
    """Export then import gives back equal profiles."""
    profiles = [profile("a"), WorkloadProfile("b", 7, 0.0, None, 0, 1, (), 3.0, device_bytes=40 * 2**30)]
    assert import_json(export_json(profiles), "p.json") == profiles


def test_peak_timing_round_trips_and_a_profile_written_before_it_loads(tmp_path):
    """recent_peak_ages (when each recent run reached its peak) survive the store and export; a
    row or an export written before the field existed loads with none."""
    timed = WorkloadProfile("t", 10, 5.0, 10.0, 2, 6, ((0.0, 1), (5.0, 10)), 1.0, recent_peaks=(10, 10),
                            recent_peak_ages=(4.5, 5.2))
    store = ProfileStore(tmp_path)
    store.save([timed])
    store.close()
    assert ProfileStore(tmp_path).load()["t"] == timed
    assert import_json(export_json([timed]), "p.json") == [timed]
    document = json.loads(export_json([timed]))
    del document["profiles"][0]["recent_peak_ages"]
    assert import_json(json.dumps(document), "p.json")[0].recent_peak_ages == ()
    # a store row written before the field: the same row without it loads, its other fields kept
    db = sqlite3.connect(tmp_path / DB_NAME)
    row = json.loads(db.execute("SELECT data FROM profiles WHERE key = 't'").fetchone()[0])
    del row["recent_peak_ages"]
    db.execute("UPDATE profiles SET data = ? WHERE key = 't'", (json.dumps(row),))
    db.commit()
    db.close()
    old = ProfileStore(tmp_path).load()["t"]
    assert old.recent_peak_ages == () and old.recent_peaks == timed.recent_peaks and old.timeline == timed.timeline


def test_export_is_stable_and_sorted():
    """The same profiles export to the same text whatever their order."""
    assert export_json([profile("b"), profile("a")]) == export_json([profile("a"), profile("b")])


@pytest.mark.parametrize(
    "document,message",
    [
        ("{", "p.json: not valid JSON: "),
        ('{"format": "other"}', "p.json: not a workload profile export"),
        ('{"format": "gpushare-workload-profiles", "version": 9, "profiles": []}', "p.json: version: unsupported"),
        ('{"format": "gpushare-workload-profiles", "version": 1, "profiles": {}}', "p.json: profiles: must be a list"),
    ],
)
def test_bad_export_documents_raise_user_errors(document, message):
    """Import errors are one line naming the file and the problem."""
    with pytest.raises(UserError) as err:
        import_json(document, "p.json")
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("peak_bytes", -1, "p.json: profiles[0].peak_bytes: must be a non-negative integer"),
        ("peak_bytes", 1.5, "p.json: profiles[0].peak_bytes: must be a non-negative integer"),
        ("runs", True, "p.json: profiles[0].runs: must be a non-negative integer"),
        ("duration_seconds", "long", "p.json: profiles[0].duration_seconds: must be a non-negative number"),
        ("key", "", "p.json: profiles[0].key: must be a non-empty string"),
        ("timeline", [[5, 1], [1, 2]], "p.json: profiles[0].timeline[1]: ages must increase"),
        ("timeline", [[5]], "p.json: profiles[0].timeline[0]: must be [age_seconds, bytes]"),
        ("recent_peak_ages", [10.0, -1], "p.json: profiles[0].recent_peak_ages: must be a list of non-negative numbers"),
        ("recent_peak_ages", "soon", "p.json: profiles[0].recent_peak_ages: must be a list of non-negative numbers"),
    ],
)
def test_bad_profile_fields_are_named(field, value, message):
    """A bad field inside a profile is reported with its index and name."""
    document = json.loads(export_json([profile("a")]))
    document["profiles"][0][field] = value
    with pytest.raises(UserError) as err:
        import_json(json.dumps(document), "p.json")
    assert str(err.value).startswith(message)


def test_duplicate_keys_are_rejected():
    """Two profiles with one key in an import are ambiguous."""
    with pytest.raises(UserError, match="key 'a' appears more than once"):
        import_json(export_json([profile("a")]).replace('"profiles": [', '"profiles": [' + json.dumps(
            {"key": "a", "peak_bytes": 1, "peak_offset_seconds": 0, "duration_seconds": 1, "runs": 1,
             "samples": 1, "timeline": [], "updated_at": 0}) + ","), "p.json")
