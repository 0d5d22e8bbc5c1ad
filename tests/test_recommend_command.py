"""`exporter recommend` as a command: flags, formats, one-line errors, and the simulator end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from exporter.errors import UserError
from exporter.recommend import command

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "workloads"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="exporter recommend")
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("fmt", command.FORMATS)
def test_every_format_renders_the_llama_plan(fmt, capsys):
    """Each --format prints something that names the layout all-1g.20gb."""
    assert command.run(parse("--workloads", str(EXAMPLES / "llama-8b-x4.yaml"), "--format", fmt)) == 0
    out = capsys.readouterr().out
    assert "all-1g.20gb" in out
    if fmt == "json":
        assert json.loads(out)["models"][0]["gpus_needed"] == 1
    if fmt in ("yaml", "mig-parted"):
        assert yaml.safe_load(out)


def test_output_file_and_gpu_model_override(tmp_path):
    """--gpu-model replaces the plan's target; -o writes the file."""
    out = tmp_path / "plan.json"
    args = parse("--workloads", str(EXAMPLES / "llama-8b-x4.yaml"), "--gpu-model", "A100-80GB",
                 "--format", "json", "-o", str(out))
    assert command.run(args) == 0
    assert [m["model"] for m in json.loads(out.read_text())["models"]] == ["A100-80GB"]


@pytest.mark.parametrize("argv,message", [
    ((), "give at least one input"),
    (("--workloads", "x.yaml", "--window", "7d"), "--window: only meaningful with --prometheus or --from"),
    (("--workloads", str(EXAMPLES / "llama-8b-x4.yaml"), "--gpu-model", "H900"), "--gpu-model: unknown GPU model"),
    (("--snapshot", "x.json", "--margin", "-1"), "--margin -1"),
    (("--snapshot", "/nonexistent/snap.json",), "--snapshot /nonexistent/snap.json"),
    (("--from", "ftp://x",), "--from ftp://x"),
    (("--prometheus", "http://127.0.0.1:9", "--window", "7x"), "--window 7x"),
])
def test_bad_input_is_a_one_line_user_error(argv, message):
    """Each mistake raises UserError naming the flag, in one line."""
    with pytest.raises(UserError) as info:
        command.run(parse(*argv))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_stand_alone_main_prints_one_error_line_and_exits_2(capsys):
    """The module's main() behaves like the exporter CLI: 'exporter: error: ...' and status 2."""
    assert command.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("exporter: error: ") and err.count("\n") == 1


def _simulated_snapshots(scenario: Path, times: list[float]) -> list[str]:
    """`exporter snapshot --simulate SCENARIO --at T` for each T, in-process (one JSON line each)."""
    import contextlib
    import io

    from exporter import cli

    lines = []
    for t in times:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["snapshot", "--simulate", str(scenario), "--at", str(t)])
        if status != 0:
            pytest.skip(f"simulated snapshots unavailable: {err.getvalue().strip()[:200]}")
        lines.append(json.dumps(json.loads(out.getvalue())))
    return lines


def _scenario_memory(t: float) -> float:
    """The scenario's own memory curve of one Wan job (bytes) t seconds after its start."""
    points = [(0, 2), (60, 22), (540, 22), (545, 33), (570, 33)]
    if not 0 <= t < 570:
        return 0.0
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t < t1:
            return (v0 + (v1 - v0) * (t - t0) / (t1 - t0)) * 2**30
    return 33 * 2**30


def test_simulated_wan_node_gets_a_stagger_that_avoids_the_oom(tmp_path, capsys):
    """The seed talk's three Wan jobs on one MPS H100, watched every 15 s through the simulator:
    their peaks (3 x 33 GiB) exceed the GPU, and the advised start offsets keep the scenario's
    true memory curves under its 79.2 GiB at every second."""
    scenario = REPO / "examples" / "scenarios" / "wan22-h100-mps-staggered.yaml"
    series = tmp_path / "wan-node.jsonl"
    series.write_text("\n".join(_simulated_snapshots(scenario, [float(t) for t in range(0, 840, 15)])))
    # With the 10% observed margin MIG slots get, the limits plus their plateaus exceed the H100 at any
    # spacing: the advice says so, and names the stagger bare peaks would allow.
    assert command.run(parse("--snapshot", str(series), "--format", "json")) == 0
    (shared,) = json.loads(capsys.readouterr().out)["shared_now"]
    assert shared["verdict"] == "limit-concurrency" and shared["max_concurrency"] == 2
    assert any(r.startswith("on bare peaks (no margin) starts at") for r in shared["reasons"])
    assert command.run(parse("--snapshot", str(series), "--format", "json", "--margin", "0")) == 0
    data = json.loads(capsys.readouterr().out)
    (shared,) = data["shared_now"]
    assert len(shared["clients"]) == 3 and shared["verdict"] == "stagger"
    assert shared["footprint_bytes"] + shared["room_left_bytes"] == shared["usable_bytes"]
    offsets = [c["start_offset_seconds"] for c in shared["clients"]]
    worst = max(sum(_scenario_memory(t - o) for o in offsets) for t in range(0, 900))
    assert worst <= shared["capacity_bytes"]
    assert sum(_scenario_memory(540 + 10) for _ in range(3)) > shared["capacity_bytes"]  # together: OOM


def test_fits_the_cli_registry(monkeypatch, capsys):
    """Registered in exporter.cli like the other commands, it runs and reports errors the CLI way."""
    from exporter import cli

    if ("recommend", "exporter.recommend.command") not in cli.COMMANDS:
        monkeypatch.setattr(cli, "COMMANDS", [*cli.COMMANDS, ("recommend", "exporter.recommend.command")])
    assert cli.main(["recommend", "--workloads", str(EXAMPLES / "wan22-5b-x3.yaml"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["gpus_needed"] == 2
    assert cli.main(["recommend", "--workloads", "/nonexistent.yaml"]) == 2
    assert capsys.readouterr().err.strip() == "exporter: error: --workloads /nonexistent.yaml: No such file or directory"


@pytest.mark.parametrize("memory,problem", [
    ("1e400GiB", "too large"), ("-5GiB", "negative"), ("0", "zero"), ("0GiB", "zero"),
])
def test_bad_sizes_exit_2_naming_the_file_and_the_field(tmp_path, capsys, memory, problem):
    """The sizes issue 10 found crashing or accepted: exit 2 and one line naming file and field."""
    from exporter import cli

    path = tmp_path / "plan.yaml"
    path.write_text(f"gpu_model: H100\nworkloads:\n  - {{name: a, memory: {memory}}}\n")
    assert cli.main(["recommend", "--workloads", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"exporter: error: {path}: workloads[0].memory: ") and problem in err
    assert err.count("\n") == 1


def test_a_workload_file_that_is_not_utf8_exits_2(tmp_path, capsys):
    from exporter import cli

    path = tmp_path / "plan.yaml"
    path.write_bytes(b"gpu_model: H100\nworkloads:\n  - {name: \xff\xfe, memory: 8GiB}\n")
    assert cli.main(["recommend", "--workloads", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"exporter: error: {path}: workloads[0].name: not UTF-8 text (byte 0xff on line 3); " \
                  "save the file as UTF-8\n"


@pytest.mark.parametrize("argv,message", [
    (("--workloads", "x.yaml", "--quantile", "0"), "--quantile 0"),
    (("--workloads", "x.yaml", "--quantile", "nan"), "--quantile nan"),
    (("--workloads", "x.yaml", "--min-window", "soon"), "--min-window soon"),
    (("--workloads", "x.yaml", "--at", "yesterday"), "--at: only meaningful with --prometheus"),
    (("--prometheus", "http://127.0.0.1:9", "--at", "yesterday"), "--at yesterday: expected Unix seconds"),
    (("--prometheus", "http://127.0.0.1:9", "--from", "http://x", "--window", "1h"), "--window: ambiguous"),
    (("--state-dir", "/nonexistent/dir",), "--state-dir /nonexistent/dir: no such directory"),
    (("--from", "node-a:18474",), "--from node-a:18474: expected an http(s) URL such as http://node-a:18474"),
])
def test_more_bad_flags_are_one_line(argv, message):
    with pytest.raises(UserError) as info:
        command.run(parse(*argv))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_at_takes_unix_seconds_or_an_iso_date():
    assert command.parse_at("1735689600") == command.parse_at("2025-01-01T00:00:00Z") == 1735689600.0


def test_a_planner_failure_is_one_line_not_a_traceback(monkeypatch, capsys):
    """Should the solver find no layout (a planner bug or its time limit), the command still says
    so in one line and exits 2, naming HiGHS's message."""
    from types import SimpleNamespace

    from exporter import cli
    from exporter.recommend import planner_milp

    monkeypatch.setattr(planner_milp, "_milp", lambda *a, **k: SimpleNamespace(x=None, status=2,
                                                                              message="The problem is infeasible."))
    assert cli.main(["recommend", "--workloads", str(EXAMPLES / "wan22-5b-x3.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the planner found no layout (The problem is infeasible.)" in err[0], err
