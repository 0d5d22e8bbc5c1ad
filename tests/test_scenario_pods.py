"""Scenario `pod` entries: validated with one-line errors naming the place."""

from __future__ import annotations

import pytest

from exporter.errors import UserError
from exporter.sim.scenario import parse_scenario


def scenario(*pods):
    processes = [{"pid": 100 + i, "name": "python3", "gpu": 0, "memory": "1GiB", "pod": pod} for i, pod in enumerate(pods)]
    return {"name": "t", "gpus": [{"model": "H100-80GB"}], "processes": processes}


def test_a_pod_with_defaults():
    spec = parse_scenario(scenario({"namespace": "ml", "name": "train-0"}), "t.yaml").processes[0]
    assert (spec.pod.container, spec.pod.runtime, spec.pod.cgroup_driver, spec.pod.cgroup_version, spec.pod.qos) == (
        "main", "containerd", "systemd", 2, "burstable")
    assert len(spec.pod.uid) == 36 and spec.env["HOSTNAME"] == "train-0" and len(spec.pod.container_id) == 64


@pytest.mark.parametrize("pod,message", [
    ({"name": "x"}, "processes[0].pod: missing required key 'namespace'"),
    ({"namespace": "ML", "name": "x"}, "processes[0].pod.namespace: 'ML' is not a valid namespace name"),
    ({"namespace": "ml", "name": "x", "runtime": "podman"}, "processes[0].pod.runtime: expected one of containerd"),
    ({"namespace": "ml", "name": "x", "cgroup_version": 3}, "processes[0].pod.cgroup_version: expected 1 or 2"),
    ({"namespace": "ml", "name": "x", "uid": "abc"}, "processes[0].pod.uid: 'abc' is not a pod UID"),
    ({"namespace": "ml", "name": "x", "qos": "gold"}, "processes[0].pod.qos: expected one of guaranteed"),
    ({"namespace": "ml", "name": "x", "resource": "gpu"}, "processes[0].pod.resource: 'gpu' is not an extended"),
    ({"namespace": "ml", "name": "x", "colour": 1}, "processes[0].pod.colour: unknown key"),
    ("ml/x", "processes[0].pod: must be a mapping"),
])
def test_bad_pods_are_one_line_errors(pod, message):
    with pytest.raises(UserError) as info:
        parse_scenario(scenario(pod), "t.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_processes_of_one_pod_must_agree():
    with pytest.raises(UserError) as info:
        parse_scenario(scenario({"namespace": "ml", "name": "x"}, {"namespace": "ml", "name": "x", "runtime": "cri-o"}),
                       "t.yaml")
    assert "processes[1].pod.runtime" in str(info.value) and "processes[0]" in str(info.value)
    uid = "0f5e8b4c-3a2d-4e1f-9b8a-7c6d5e4f3a21"
    with pytest.raises(UserError) as info:
        parse_scenario(scenario({"namespace": "ml", "name": "x", "uid": uid}, {"namespace": "ml", "name": "y", "uid": uid}),
                       "t.yaml")
    assert "already the UID of pod ml/x" in str(info.value)


@pytest.mark.parametrize("argv,message", [
    (["--process-series", "container"], "--process-series: expected one of pid, pod, workload"),
    (["--kubernetes-api", "ftp://api"], "--kubernetes-api: expected auto, off or an http(s):// URL"),
    (["--pod-resources-socket", "kubelet.sock"], "--pod-resources-socket: expected auto, off or an absolute path"),
    (["--simulate", "no-such-scenario"], "--simulate no-such-scenario: no such file, nor a shipped scenario"),
])
def test_bad_kubernetes_flags_are_one_line(capsys, argv, message):
    from exporter.cli import main

    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_config_file_keys(tmp_path):
    from exporter.config import load_settings

    path = tmp_path / "exporter.yaml"
    path.write_text("process_series: workload\nkubernetes_api: https://10.0.0.1:6443/\n"
                    "pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock\nnode_name: gpu-1\n"
                    "simulate: k8s-shared-node\n")
    settings = load_settings(str(path), {})
    assert (settings.process_series, settings.kubernetes_api, settings.node_name, settings.simulate) == (
        "workload", "https://10.0.0.1:6443", "gpu-1", "k8s-shared-node")
    path.write_text("process_series: [pid]\n")
    with pytest.raises(UserError) as info:
        load_settings(str(path), {})
    assert "process_series: expected one of pid, pod, workload" in str(info.value)
