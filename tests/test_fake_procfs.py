"""The simulation's /proc is complete enough for psutil (what nvitop and gpustat read).

Expected values come from the scenario each test writes (pid, name, command line, start,
uid, host memory) and from proc(5) (52 stat fields), not from the fake's own files.
"""

from __future__ import annotations

import os
import pwd

import psutil
import pytest

from exporter.backend.procinfo import ProcFs
from exporter.sim import Simulation
from exporter.sim.scenario import parse_scenario

SCENARIO = {
    "name": "procfs",
    "gpus": [{"model": "H100-80GB"}],
    "processes": [
        {"pid": 4242, "name": "python3", "cmdline": "python3 train.py --epochs 3", "gpu": 0,
         "start": "90s", "memory": "2GiB", "uid": 0, "host_memory": "3GiB",
         "env": {"CUDA_VISIBLE_DEVICES": "0"}},
        {"pid": 4343, "cmdline": "/opt/bin/a-very-long-server-name --port 1", "gpu": 0, "start": 0,
         "end": "200s", "memory": "1GiB"},
    ],
}


@pytest.fixture
def sim():
    simulation = Simulation(parse_scenario(SCENARIO, "procfs.yaml"), start_at=120)
    simulation.advance_to(120)
    saved = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = simulation.procfs_root
    yield simulation
    psutil.PROCFS_PATH = saved
    simulation.close()


def test_stat_has_all_52_fields_and_the_start_time(sim):
    """proc(5): 52 fields; field 22 is starttime in clock ticks; field 39 (processor) exists."""
    raw = open(os.path.join(sim.procfs_root, "4242", "stat"), "rb").read()
    rest = raw[raw.rfind(b")") + 2:].split()
    assert len(rest) + 2 == 52
    assert int(rest[22 - 3]) == 90 * os.sysconf("SC_CLK_TCK")
    assert rest[39 - 3] == b"0"


def test_psutil_process_reads_the_scenario(sim):
    """name, cmdline, create_time, memory_info, status, username, ppid, environ, threads."""
    p = psutil.Process(4242)
    with p.oneshot():
        assert p.name() == "python3"
        assert p.cmdline() == ["python3", "train.py", "--epochs", "3"]
        assert p.create_time() == pytest.approx(sim.boot_time + 90, abs=0.02)
        assert p.memory_info().rss == 3 * 2**30
        assert p.status() == psutil.STATUS_SLEEPING
        assert p.username() == pwd.getpwuid(0).pw_name
        assert p.ppid() == 1
        assert p.environ()["CUDA_VISIBLE_DEVICES"] == "0"
        assert p.num_threads() == 1
        assert p.cpu_times().user == 0.0
        assert p.num_fds() == 3
        assert p.exe() == "/usr/bin/python3"
        assert p.memory_full_info().uss == 3 * 2**30
        assert p.is_running()


def test_create_time_is_on_the_simulation_clock(sim):
    """The clock reads the real time at start_at: a process started 30 s of virtual time
    before it looks 30 s old to psutil (nvitop's TIME column)."""
    import time

    age = time.time() - psutil.Process(4242).create_time()
    assert 29 <= age <= 32


def test_long_names_are_truncated_in_comm_like_the_kernel(sim):
    """comm (and stat's field 2) hold 15 bytes; psutil then reads the full name from cmdline."""
    assert open(os.path.join(sim.procfs_root, "4343", "comm")).read() == "a-very-long-ser\n"
    assert psutil.Process(4343).name() == "a-very-long-server-name"


def test_ended_process_is_gone_for_psutil(sim):
    """After its end the pid disappears: NoSuchProcess, as for a real exited process."""
    sim.advance_to(201)
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(4343)
    assert 4343 not in psutil.pids() and 4242 in psutil.pids()


def test_exporter_procfs_reader_agrees(sim):
    """The exporter's own /proc reader sees the same start time and command line."""
    fs = ProcFs(sim.procfs_root)
    assert fs.start_time(4242) == sim.boot_time + 90
    assert fs.cmdline(4242) == "python3 train.py --epochs 3"


def test_mirror_host_lets_psutil_see_this_process_and_the_host(sim):
    """After mirror_host, psutil pointed at the fake tree still finds this process, its
    parent, and host-wide figures (what nvitop's header reads)."""
    sim.mirror_host()
    me = psutil.Process()
    assert me.pid == os.getpid() and me.parent() is not None
    assert psutil.virtual_memory().total > 0
    assert psutil.boot_time() == sim.boot_time


def test_argv_without_quotes_or_odd_spaces_skips_shlex_with_the_same_words():
    """procfs._argv splits plain command lines with str.split (shlex reads a character at a time); the
    words must be shlex's for every text, including the Unicode spaces str.split splits on and shlex not."""
    import random
    import shlex

    from exporter.sim.procfs import _argv

    alphabet = ["a", "b", "-", "=", "#", "é", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\xa0", "\u2003",
                '"', "'", "\\"]
    rng = random.Random(22)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(20000)]
    texts += ["python3 -m vllm.entrypoints.openai.api_server --port 9001", "", "  ", "a\xa0b", "x 'y z'"]
    for text in texts:
        try:
            expected = shlex.split(text)
        except ValueError:
            expected = text.split()
        assert _argv(text) == expected, repr(text)
