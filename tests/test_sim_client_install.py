"""The simulator's client runner on a plain install (issue 25): a fresh venv, `pip install` of
this checkout with only its runtime dependencies (no psutil, no test extra), then
`python3 -m exporter.sim.client SCENARIO -- CLIENT` with a pynvml client that never imports psutil.
e2e because it installs packages.

Half the minute it took went to pip itself, not to the install under test: `venv` with pip (ensurepip
unpacks pip and setuptools into the venv) and pip's isolated build environment (setuptools downloaded
and installed for every build). Now the venv has no pip: this interpreter's pip installs into it
(`pip --python`, pip >= 22.3), the wheel a `pip install .` would build is built once with this
interpreter's setuptools (in pip's isolated environment where it has none), and pip resolves the runtime dependencies of that wheel from the index as
for a user. The venv still holds only the wheel and what its metadata pulls in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.e2e

CLIENT = """\
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    print(i, pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetMemoryInfo(h).total)
pynvml.nvmlShutdown()
"""


def test_client_runner_works_without_psutil(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "tests", "bench", "build", "*.egg-info", "__pycache__", ".venv*", "node_modules"))
    env_dir = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    python = env_dir / "bin" / "python"
    if _pip_can_target_another_python():
        venv.create(env_dir, with_pip=False)
        wheels = tmp_path / "wheels"
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_without_build_isolation(),
                                "-w", str(wheels), str(src)], env=env, capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, build.stderr[-2000:]
        (wheel,) = wheels.glob("gpushare_exporter-*.whl")
        # --no-compile: the .pyc files pip would write ahead of time; the runs below compile what they import
        command = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", str(wheel)]
    else:  # an older pip: the venv's own pip, as a user would run it
        venv.create(env_dir, with_pip=True)
        command = [str(python), "-m", "pip", "install", "-q", str(src)]
    install = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    assert (env_dir / "bin" / "exporter").is_file(), "the install gave no `exporter` command"
    probe = subprocess.run([str(python), "-c", "import psutil"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0, "psutil is installed: the venv does not test a plain install"
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    scenario = src / "examples" / "scenarios" / "a100-40gb-two-3g.yaml"
    run = subprocess.run([str(python), "-m", "exporter.sim.client", str(scenario), "--", str(client)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ModuleNotFoundError" not in run.stderr
    lines = run.stdout.splitlines()
    assert lines and all(" NVIDIA A100-PCIE-40GB " in line for line in lines), run.stdout
    # Same answer from the checkout's own interpreter (psutil installed there): the install
    # changes nothing in what the client sees.
    here = subprocess.run([sys.executable, "-m", "exporter.sim.client", str(scenario), "--", str(client)],
                          env={**env, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert here.returncode == 0, here.stderr[-2000:]
    assert here.stdout == run.stdout


def _pip_can_target_another_python() -> bool:
    """pip >= 22.3 installs into another interpreter's environment (`pip --python`)."""
    try:
        from pip import __version__
    except ImportError:
        return False
    return tuple(int(part) for part in __version__.split(".")[:2] if part.isdigit()) >= (22, 3)


def _without_build_isolation() -> list[str]:
    """``--no-build-isolation`` where this interpreter has the setuptools pyproject.toml's build-system
    asks for (>= 68); otherwise pip builds in its own isolated environment, as for a user."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if major >= 68 else []
