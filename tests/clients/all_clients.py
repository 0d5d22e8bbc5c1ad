"""Harness run by tests/test_nvml_clients.py inside exporter.sim.client: runs unmodified NVML
clients one after the other on the simulated host, each through its own public entry point,
and writes what each printed (or read) into OUTDIR (argv[1]):

- nvitop_api.json: nvitop's Python API (tests/clients/nvitop_api.py);
- gpustat.json: ``gpustat --json``;
- example.txt: pynvml's own example.py (shipped in the nvidia-ml-py wheel);
- nvitop_once.txt: ``nvitop --once``;
- errors.txt: a traceback per client that raised.
"""

import contextlib
import io
import os
import runpy
import sys
import sysconfig
import traceback

out_dir = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))


def run(label, argv, main=None, path=None):
    buffer = io.StringIO()
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(buffer):
            if path:
                runpy.run_path(path, run_name="__main__")
            else:
                main()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            buffer.write(f"\nEXIT {exc.code}\n")
    except Exception:  # noqa: BLE001 - recorded for the test to show
        with open(os.path.join(out_dir, "errors.txt"), "a", encoding="utf-8") as fh:
            fh.write(f"== {label}\n{traceback.format_exc()}\n")
    with open(os.path.join(out_dir, label), "w", encoding="utf-8") as fh:
        fh.write(buffer.getvalue())


run("nvitop_api.json.log", ["nvitop_api.py", os.path.join(out_dir, "nvitop_api.json")],
    path=os.path.join(here, "nvitop_api.py"))
from gpustat.cli import main as gpustat_main  # noqa: E402

run("gpustat.json", ["gpustat", "--json"], main=gpustat_main)
run("example.txt", ["example.py"], path=os.path.join(sysconfig.get_paths()["purelib"], "example.py"))
from nvitop.cli import main as nvitop_main  # noqa: E402

run("nvitop_once.txt", ["nvitop", "--once"], main=nvitop_main)
