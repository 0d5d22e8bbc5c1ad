"""Every input format, whatever its bytes: a result or ONE line naming the file, never another exception.

Property tests (hypothesis) over the config file, scenario files, workload plans, snapshot JSON,
profile exports and command-line arguments: random bytes, random YAML/JSON trees (huge numbers,
NaN, deep nesting, odd keys), and byte-level mutations of the shipped examples. The loaders either
return or raise UserError whose message is one line that names the source. The web config has its
own, promtool-checked properties in test_web_config.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import cli
from exporter.commands import settings_from_args
from exporter.config import load_settings
from exporter.errors import UserError
from exporter.foresight.store import import_json
from exporter.recommend.plan_file import load_plan
from exporter.recommend.snapshot_input import parse_snapshot_text
from exporter.sim.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                  st.text(max_size=12), st.sampled_from(["9" * 5000, "1e999", "-inf", ".nan", "0x1F", "~", "80GB",
                                                          "22GiB", "1h2m", "+30s", "H100-80GB", "3g.40gb"]))
_tree = st.recursive(_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.sampled_from(["gpus", "processes", "events", "model", "mig", "memory", "pid", "gpu",
                                     "interval", "listen", "workloads", "name", "profiles", "format", "version",
                                     "at", "fault", "call", "error", "x", ""]), kids, max_size=4)), max_leaves=20)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _contents(example: Path):
    """Random bytes, random trees as YAML and JSON, deep nesting, and mutations of ``example``."""
    original = example.read_bytes()
    mutate = st.tuples(st.integers(0, max(0, len(original) - 1)), st.binary(max_size=8), st.integers(0, 8)).map(
        lambda m: original[:m[0]] + m[1] + original[m[0] + m[2]:])
    return st.one_of(
        st.binary(max_size=200),
        _tree.map(lambda t: yaml.safe_dump(t).encode()),
        _tree.map(lambda t: json.dumps(t).encode()),
        st.sampled_from([_deep(5000).encode(), ("x: " + _deep(3000)).encode(), b"a: " + b"9" * 5000,
                         b"\xff\xfe\x00\x00", b"\xef\xbb\xbf", b"{" * 3000, b"a: &a [1,1,1,1,1,1,1,1,1,1]\n"
                         + b"".join(b"%c: &%c [" % (98 + i, 98 + i) + b",".join([b"*%c" % (97 + i)] * 10) + b"]\n"
                                    for i in range(7))]),
        mutate,
    )


def _check(load, path: Path) -> None:
    try:
        load(str(path))
    except UserError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert path.name in message, message


@pytest.fixture
def place(tmp_path):
    counter = iter(range(10**9))

    def write(content: bytes, suffix: str) -> Path:
        path = tmp_path / f"input-{next(counter)}{suffix}"
        path.write_bytes(content)
        return path

    return write


@SETTINGS
@given(content=_contents(EXAMPLES / "scenarios" / "faults-demo.yaml"))
def test_scenario_files(place, content):
    _check(load_scenario, place(content, ".yaml"))


@SETTINGS
@given(content=_contents(EXAMPLES / "workloads" / "mixed-inference.yaml"))
def test_workload_plans(place, content):
    _check(load_plan, place(content, ".yaml"))


@SETTINGS
@given(content=_contents(EXAMPLES / "scenarios" / "a100-40gb-two-3g.yaml"))
def test_config_files(place, content):
    _check(lambda p: load_settings(p, {}), place(content, ".yaml"))


@SETTINGS
@given(content=st.one_of(_contents(EXAMPLES / "scenarios" / "h200-mig.yaml"), _tree.map(lambda t: json.dumps(
    {"format": "gpushare-profiles", "version": 1, "profiles": t}).encode())))
def test_profile_exports(place, content):
    path = place(content, ".json")

    def load(p):
        import_json(Path(p).read_bytes().decode("utf-8", "replace"), p)

    _check(load, path)


@SETTINGS
@given(content=_contents(EXAMPLES / "scenarios" / "wan22-h100-mps-solo.yaml"))
def test_snapshot_json(place, content):
    _check(lambda p: parse_snapshot_text(Path(p).read_bytes().decode("utf-8", "replace"), p),
           place(content, ".json"))


_value = st.one_of(st.sampled_from(["1", "0", "-1", "1e400", "nan", "inf", "99999999999999999999999", "1e308", "",
                                    "abc", ":0", "[::1]:1", "127.0.0.1:99999", "x" * 300, "0.000001", "\x00"]),
                   st.text(max_size=10))
_flag = st.sampled_from(["--interval", "--gpu-timeout", "--speed", "--listen", "--log-level", "--log-format",
                         "--backend", "--web.max-connections", "--web.read-timeout", "--web.idle-timeout"])


@settings(max_examples=300, deadline=None)
@given(args=st.lists(st.tuples(_flag, _value), max_size=4))
def test_command_line_arguments(args):
    """Any flag values: parsed settings or a UserError naming the flag, one line."""
    argv = ["serve"] + [part for flag, value in args for part in (flag, value)]
    try:
        namespace = cli.build_parser().parse_args(argv)
        settings_from_args(namespace)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("serve: argument --"), str(exc)


@pytest.mark.parametrize("argv, content, expected", [
    (["snapshot", "--config"], b"interval: 1\n# \xff\n", "line 2, column 3: not UTF-8 text (byte 0xff)"),
    (["snapshot", "--config"], b"interval: " + b"[" * 3000, "nested more than 100 levels deep"),
    (["snapshot", "--config"], b"interval: " + b"9" * 5000, "a number with thousands of digits"),
    (["snapshot", "--config"], b"interval: 1e999", "interval: expected a positive number of seconds"),
    (["snapshot", "--config"], b"gpu_timeout: 1e12", "gpu_timeout: expected at most 86400 seconds"),
    (["snapshot", "--simulate"], b"gpus: " + b"[" * 3000, "nested more than 100 levels deep"),
    (["snapshot", "--simulate"], b"gpus: [{model: H100-80GB}]\nduration: " + b"9" * 5000, "thousands of digits"),
    (["recommend", "--workloads"], b"\xff", "not UTF-8 text"),
    (["recommend", "--snapshot"], b"[" * 100000, "nested too deeply"),
    (["serve", "--web.config.file"], b"tls_server_config: {min_version: TLS9}", "unknown TLS version"),
    (["serve", "--web.config.file"], b"basic_auth_users: {a: b}", "not a bcrypt hash"),
])
def test_cli_exits_2_with_one_line_naming_the_file(tmp_path, argv, content, expected):
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    extra = ["--simulate", str(EXAMPLES / "scenarios" / "faults-demo.yaml")] if "--config" in argv else []
    result = subprocess.run([sys.executable, "-m", "exporter", *argv, str(path), *extra], cwd=REPO,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("exporter: error: ")
    assert str(path) in result.stderr and expected in result.stderr, result.stderr
