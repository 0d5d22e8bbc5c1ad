"""exporter profiles export/import: round trip through state directories, and one-line refusals."""

from __future__ import annotations

import json

import pytest

from exporter import cli
from exporter.foresight import Foresight
from exporter.foresight.store import DB_NAME
from foresight_scenarios import learn_solo_run


@pytest.fixture
def learned_dir(tmp_path):
    """A state directory holding the profile one solo Wan run taught (saved as `exporter serve` saves it)."""
    state = tmp_path / "learned"
    foresight = Foresight(state_dir=state)
    learn_solo_run(foresight)
    foresight.flush()
    foresight.store.close()
    return state


def stored(state_dir) -> dict:
    """The profiles a fresh Foresight (an exporter restart) loads from ``state_dir``."""
    foresight = Foresight(state_dir=state_dir)
    foresight.store.close()
    return foresight.profiles


def run_main(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """The single `exporter: error:` line of a refusal (fails on a traceback or several lines)."""
    assert err.startswith("exporter: error: ") and err.count("\n") == 1, err
    return err


def test_round_trip_through_a_file(capsys, learned_dir, tmp_path):
    """Export to a file, import into an empty state dir: a restart there loads the same profiles."""
    export_file = tmp_path / "profiles.json"
    code, out, _ = run_main(capsys, "profiles", "export", "--state-dir", learned_dir, "-o", export_file)
    assert code == 0 and "exported 1 workload profile to" in out
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    code, out, _ = run_main(capsys, "profiles", "import", "--state-dir", fresh, export_file)
    assert code == 0 and out.startswith("imported 1 of 1 workload profile into")
    original = stored(learned_dir)
    assert len(original) == 1 and next(iter(original.values())).runs == 1
    assert stored(fresh) == original


def test_export_to_stdout_is_the_json_document(capsys, learned_dir):
    """Without -o the JSON document alone goes to stdout, holding the learned profile's key and peak."""
    code, out, err = run_main(capsys, "profiles", "export", "--state-dir", learned_dir)
    assert code == 0 and err == ""
    document = json.loads(out)
    (profile,) = stored(learned_dir).values()
    assert [(p["key"], p["peak_bytes"]) for p in document["profiles"]] == [(profile.key, profile.peak_bytes)]


def test_import_keeps_a_newer_stored_profile(capsys, learned_dir, tmp_path):
    """An imported profile older than the stored one of the same workload is skipped and said so."""
    (profile,) = stored(learned_dir).values()
    document = json.loads(Foresight(state_dir=learned_dir).export_json())
    document["profiles"][0]["updated_at"] = profile.updated_at - 100.0
    document["profiles"][0]["peak_bytes"] = profile.peak_bytes // 2
    older = tmp_path / "older.json"
    older.write_text(json.dumps(document))
    code, out, _ = run_main(capsys, "profiles", "import", "--state-dir", learned_dir, older)
    assert code == 0 and "imported 0 of 1" in out and "1 skipped" in out
    assert stored(learned_dir)[profile.key].peak_bytes == profile.peak_bytes


def test_import_merges_with_profiles_already_there(capsys, learned_dir, tmp_path):
    """Importing a different workload adds it; the stored one stays."""
    document = json.loads(Foresight(state_dir=learned_dir).export_json())
    document["profiles"][0]["key"] = "k8s:ml/other-job/main@79GiB"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(document))
    before = set(stored(learned_dir))
    code, _, _ = run_main(capsys, "profiles", "import", "--state-dir", learned_dir, other)
    assert code == 0
    assert set(stored(learned_dir)) == before | {"k8s:ml/other-job/main@79GiB"}


def test_bad_json_is_one_line_naming_the_file(capsys, tmp_path):
    """A file that is not JSON: exit 2, one line with the file and position; nothing is created."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "gpushare-workload-profiles",\n  "version": 1, profiles: []}')
    state = tmp_path / "state"
    state.mkdir()
    code, out, err = run_main(capsys, "profiles", "import", "--state-dir", state, bad)
    assert code == 2 and out == ""
    assert f"{bad}: not valid JSON" in one_error_line(err) and "line 2" in err
    assert not (state / DB_NAME).exists()


def test_json_of_another_kind_is_refused(capsys, tmp_path):
    """Valid JSON that is not a profile export (a snapshot, say) is refused by name."""
    other = tmp_path / "snapshot.json"
    other.write_text(json.dumps({"gpus": []}))
    state = tmp_path / "state"
    state.mkdir()
    code, _, err = run_main(capsys, "profiles", "import", "--state-dir", state, other)
    assert code == 2 and "not a workload profile export" in one_error_line(err)


def test_bad_profile_field_is_named(capsys, learned_dir, tmp_path):
    """A profile with a negative peak is refused with its index and field."""
    document = json.loads(Foresight(state_dir=learned_dir).export_json())
    document["profiles"][0]["peak_bytes"] = -1
    bad = tmp_path / "negative.json"
    bad.write_text(json.dumps(document))
    code, _, err = run_main(capsys, "profiles", "import", "--state-dir", learned_dir, bad)
    assert code == 2 and f"{bad}: profiles[0].peak_bytes" in one_error_line(err)


def test_missing_import_file(capsys, tmp_path):
    """An import file that does not exist: exit 2, one line naming it."""
    code, _, err = run_main(capsys, "profiles", "import", "--state-dir", tmp_path, tmp_path / "nope.json")
    assert code == 2 and f"{tmp_path / 'nope.json'}: cannot read" in one_error_line(err)


def test_export_refuses_a_missing_state_dir(capsys, tmp_path):
    """Exporting from a --state-dir that does not exist is refused (not created)."""
    missing = tmp_path / "typo"
    code, _, err = run_main(capsys, "profiles", "export", "--state-dir", missing)
    assert code == 2 and f"--state-dir {missing}: no such directory" in one_error_line(err)
    assert not missing.exists()


def test_import_creates_the_state_dir_as_serve_does(capsys, tmp_path, learned_dir):
    """Seeding a new node: importing into a --state-dir that does not exist yet creates it."""
    new = tmp_path / "new" / "state"
    export_file = tmp_path / "profiles.json"
    export_file.write_text(Foresight(state_dir=learned_dir).export_json())
    code, out, _ = run_main(capsys, "profiles", "import", "--state-dir", new, export_file)
    assert code == 0 and "imported" in out and new.is_dir()
    code, out, _ = run_main(capsys, "profiles", "export", "--state-dir", new)
    assert code == 0 and json.loads(out)


def test_export_to_dash_writes_stdout(capsys, tmp_path, learned_dir, monkeypatch):
    """-o - means stdout, not a file named '-'."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(capsys, "profiles", "export", "--state-dir", learned_dir, "-o", "-")
    assert code == 0 and json.loads(out) and not (tmp_path / "-").exists()


def test_export_of_a_dir_without_profiles(capsys, tmp_path):
    """Exporting a directory the exporter never wrote to is refused rather than printing an empty export."""
    code, out, err = run_main(capsys, "profiles", "export", "--state-dir", tmp_path)
    assert code == 2 and out == "" and "no learned profiles here" in one_error_line(err)
    assert not (tmp_path / DB_NAME).exists()


def test_unwritable_output_file(capsys, learned_dir, tmp_path):
    """-o into a directory that does not exist: exit 2, one line naming the flag and file."""
    target = tmp_path / "no" / "such" / "dir.json"
    code, _, err = run_main(capsys, "profiles", "export", "--state-dir", learned_dir, "-o", target)
    assert code == 2 and f"-o {target}: cannot write" in one_error_line(err)


def test_missing_action(capsys):
    """`exporter profiles` alone names the two actions."""
    code, _, err = run_main(capsys, "profiles")
    assert code == 2 and "export, import" in one_error_line(err)
