"""`exporter recommend` as a command: flags, formats, one-line errors, and the simulator end to end."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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
    (("--workloads", "x.yaml", "--window", "7d"), "--window: only meaningful with --prometheus"),
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
    lines = []
    for t in times:
        done = subprocess.run([sys.executable, "-m", "exporter", "snapshot", "--simulate", str(scenario),
                               "--at", str(t)], capture_output=True, text=True, cwd=REPO, timeout=120)
        if done.returncode != 0:
            pytest.skip(f"simulated snapshots unavailable: {done.stderr.strip()[:200]}")
        lines.append(json.dumps(json.loads(done.stdout)))
    return lines


def test_simulated_wan_node_gets_a_stagger_or_a_concurrency_limit(tmp_path, capsys):
    """The seed talk's scenario through `exporter snapshot --simulate`: the shared H100 gets MPS advice
    that keeps the jobs apart (a stagger when their starts were observed, else at most 2 at once)."""
    scenario = REPO / "examples" / "scenarios" / "wan22-h100-mps-staggered.yaml"
    series = tmp_path / "wan-node.jsonl"
    series.write_text("\n".join(_simulated_snapshots(scenario, [float(t) for t in range(0, 840, 30)])))
    assert command.run(parse("--snapshot", str(series), "--format", "json")) == 0
    data = json.loads(capsys.readouterr().out)
    (shared,) = data["shared_now"]
    assert len(shared["clients"]) == 3
    assert shared["verdict"] in ("stagger", "limit-concurrency")
    if shared["verdict"] == "limit-concurrency":
        assert shared["max_concurrency"] == 2
