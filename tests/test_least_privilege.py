"""The minimal privilege mode (docs/kubernetes.md, "Least privilege") loses exactly what the docs say.

Without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH the kernel refuses to open other processes'
/proc/<pid>/environ (EACCES); cgroup, cmdline, comm and stat stay world-readable. The simulated
Kubernetes node (time-slicing, MPS and MIG pods) is run twice through the real backend, pod
resolver and collectors: as the default mode reads it, and with every environ open refused as the
kernel refuses it in the minimal mode.
"""

from __future__ import annotations

import builtins
import logging

import pytest

from exporter.backend.sim import SimBackend
from exporter.collectors.mps import MpsCollector
from exporter.collectors.process import ProcessCollector
from exporter.k8s.resolver import KubernetesResolver
from exporter.sim.kube import SimulatedKube
from exporter.sim.scenario import load_scenario
from tests.conftest import SCENARIOS

SCENARIO = load_scenario(SCENARIOS / "k8s-shared-node.yaml")
TIMES = (30, 420, 800, 1200, 1790)
LIMIT_SERIES = ("gpushare_mps_client_memory_limit_bytes", "gpushare_mps_client_active_thread_ratio")


@pytest.fixture
def environ_refused(monkeypatch):
    """Every read of a <pid>/environ fails as it does for root without the two capabilities (the
    simulator still writes them: only the exporter's side is refused)."""
    real_open = builtins.open

    def refusing(path, *args, **kwargs):
        mode = args[0] if args else kwargs.get("mode", "r")
        if str(path).endswith("/environ") and "r" in mode:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing)


def run(pod_resolver=None):
    """Per time: the processes' (pid -> namespace, pod, container, MPS limits) and the exported samples."""
    backend = SimBackend(SCENARIO, pod_resolver=pod_resolver)
    snap = {}
    collectors = [ProcessCollector(lambda: snap["s"], "pod"), MpsCollector(lambda: snap["s"], "pod")]
    out = {}
    backend.open()
    try:
        for t in TIMES:
            backend.step_to(t)
            snap["s"] = backend.poll()
            procs = {p.pid: ((p.namespace, p.pod, p.container), p.mps_memory_limit_bytes, p.mps_active_thread_ratio)
                     for g in snap["s"].gpus for p in g.processes}
            samples = [s for c in collectors for f in c.collect() for s in f.samples]
            out[t] = procs, samples
    finally:
        backend.close()
    return out


@pytest.fixture(scope="module")
def standard():
    return run()


def test_minimal_mode_keeps_every_pod_and_loses_only_the_mps_limits(standard, environ_refused, caplog):
    with caplog.at_level(logging.WARNING):
        minimal = run()
    mps_clients = 0
    for t in TIMES:
        full, reduced = standard[t][0], minimal[t][0]
        assert full.keys() == reduced.keys()
        for pid, (pod, limit, threads) in full.items():
            assert reduced[pid][0] == pod, f"pid {pid} at {t}s: pod attribution changed"
            if limit is not None:  # an MPS client whose environment sets its limits
                mps_clients += 1
                assert limit == 30 * 2**30 and threads == 0.5
                assert reduced[pid][1:] == (None, None), f"pid {pid}: limits read without environ"
        names = {s.name for s in standard[t][1]}
        reduced_names = {s.name for s in minimal[t][1]}
        assert names - reduced_names <= set(LIMIT_SERIES)
        assert not reduced_names & set(LIMIT_SERIES), "limit series exported without a known limit"
        process_rows = lambda samples: sorted(  # noqa: E731
            (s.name, tuple(sorted(s.labels.items())), s.value) for s in samples if s.name not in LIMIT_SERIES)
        assert process_rows(standard[t][1]) == process_rows(minimal[t][1])
    assert mps_clients > 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "environ" in r.getMessage()]
    assert len(warnings) == 1 and "CAP_SYS_PTRACE" in warnings[0]


def test_minimal_mode_without_the_api_server_cannot_name_pods(environ_refused):
    """The kubelet-only fallback matches a process's HOSTNAME, which lives in environ: without it,
    and without the API server (rbac.create=false), no process is placed in a pod."""

    def kubelet_only(procfs, simulation):
        return KubernetesResolver(procfs, index=None, allocations=SimulatedKube(simulation))

    placed = [pod for procs, _ in run(kubelet_only).values() for pod, _, _ in procs.values() if pod[1]]
    assert placed == []
