"""recommend plans on MIG sizes that are sure to fit (issue 25).

Real drivers print A100-80GB 1g.10gb as 9.50 GiB (9728 MiB), and A100-40GB 2g.10gb as 9.75 GiB
except on R525-R545 (9.62 GiB): without --driver a plan uses the smallest size any branch prints,
with --driver that branch's, and the basis says which it assumed (docs/hardware-facts.md).
"""

from __future__ import annotations

import json

import pytest

from exporter import catalog
from exporter.recommend.command import main

MIB = 1024 * 1024
GIB = 1024 * MIB

pytest.importorskip("scipy")


def _plan(tmp_path, capsys, model: str, memory: str, count: int, *extra: str) -> dict:
    path = tmp_path / "plan.yaml"
    path.write_text(f"gpu_model: {model}\nworkloads:\n  - {{name: job, memory: {memory}, count: {count}}}\n")
    assert main(["--workloads", str(path), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _instances(doc: dict) -> list[dict]:
    return [i for m in doc["models"] for g in m["gpus"] for i in g["instances"] if i["workload_at_peak"]]


def test_a_9_6_gib_workload_no_longer_goes_on_an_a100_80gb_1g_10gb(tmp_path, capsys):
    """9.6 GiB > 9.50 GiB: the plan takes 1g.20gb (19968 MiB) instances, each big enough."""
    doc = _plan(tmp_path, capsys, "A100-80GB", "9.6GiB", 7)
    placed = _instances(doc)
    assert len(placed) == 7
    assert {i["profile"] for i in placed}.isdisjoint({"1g.10gb", "1g.10gb+me"})
    assert all(i["memory_bytes"] >= i["need_bytes"] for i in placed)
    sizes = {i["profile"]: i["memory_bytes"] for i in placed}
    assert sizes.get("1g.20gb", 19968 * MIB) == 19968 * MIB
    assert any("A100-80GB" in line and "every observed driver branch" in line for line in doc["basis"]["mig_sizes"])


def test_a_9_4_gib_workload_still_fits_a_1g_10gb(tmp_path, capsys):
    """The counterpart: 9.4 GiB < 9.50 GiB goes seven to a GPU on 1g.10gb."""
    doc = _plan(tmp_path, capsys, "A100-80GB", "9.4GiB", 7)
    assert doc["models"][0]["gpus_needed"] == 1
    assert {i["profile"] for i in _instances(doc)} <= {"1g.10gb", "1g.10gb+me"}


def test_where_branches_differ_the_smallest_size_is_assumed_unless_the_plan_names_the_driver(tmp_path, capsys):
    """A100-40GB 2g.10gb: 9.75 GiB up to R510 and from R550, 9.62 GiB on R525-R545. Three 9.7 GiB
    jobs fit one GPU as 3 x 2g.10gb only where it is 9.75; with no driver named the plan must not
    count on that."""
    sure = _plan(tmp_path, capsys, "A100-40GB", "9.7GiB", 3)
    assert "2g.10gb" not in {i["profile"] for i in _instances(sure)}
    assert all(i["memory_bytes"] >= i["need_bytes"] for i in _instances(sure))
    assert any("smallest" in line for line in sure["basis"]["mig_sizes"])
    old = _plan(tmp_path, capsys, "A100-40GB", "9.7GiB", 3, "--driver", "470.129.06")
    assert old["models"][0]["gpus_needed"] == 1 < sure["models"][0]["gpus_needed"]
    assert {i["profile"] for i in _instances(old)} == {"2g.10gb"}
    assert {i["memory_bytes"] for i in _instances(old)} == {9984 * MIB}
    assert any("R470" in line for line in old["basis"]["mig_sizes"])
    r535 = _plan(tmp_path, capsys, "A100-40GB", "9.7GiB", 3, "--driver", "535.104.05")
    assert r535["models"][0]["gpus_needed"] == sure["models"][0]["gpus_needed"]
    assert any("R535" in line for line in r535["basis"]["mig_sizes"])
    r580 = _plan(tmp_path, capsys, "A100-40GB", "9.7GiB", 3, "--driver", "R580")
    assert r580["models"][0]["gpus_needed"] == 1
    assert catalog.MODELS["A100-40GB"].profile("2g.10gb").memory_mib == 9856  # restored after the run


def test_text_report_names_the_sizes_it_assumed(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text("gpu_model: A100-40GB\nworkloads:\n  - {name: job, memory: 4GiB, count: 2}\n")
    assert main(["--workloads", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MIG sizes assumed: A100-40GB MIG sizes for the smallest any observed driver branch prints" in out


@pytest.mark.parametrize("driver", ["abc", "5x.1", ""])
def test_bad_driver_is_one_line_exit_2(tmp_path, capsys, driver):
    path = tmp_path / "plan.yaml"
    path.write_text("gpu_model: A100-40GB\nworkloads:\n  - {name: job, memory: 4GiB}\n")
    assert main(["--workloads", str(path), "--driver", driver]) == 2
    err = capsys.readouterr().err
    assert "--driver" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
