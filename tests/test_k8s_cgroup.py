"""/proc/<pid>/cgroup -> pod UID and container id, for every runtime, driver and cgroup version.

The fixtures are fake /proc trees: one directory per pid with the cgroup file the kubelet and
the runtime produce (shapes from kubernetes pkg/kubelet/cm naming and the runtimes' scope
names, dcgm_k8s_facts.md B2), read through the exporter's own ProcFs.
"""

from __future__ import annotations

import itertools

import pytest

from exporter.backend.procinfo import ProcFs
from exporter.k8s.cgroup import CgroupRef, normalize_container_id, parse_cgroup
from exporter.sim.kube import cgroup_file
from exporter.sim.model import PodSpec

UID = "0f5e8b4c-3a2d-4e1f-9b8a-7c6d5e4f3a21"
UID_ = UID.replace("-", "_")
CID = "4c8f1e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100"
OTHER = "aa" * 32
STATIC = "5d41402abc4b2a76b9719d911017c592"

V1_CONTROLLERS = ["12:hugetlb", "11:cpuset", "10:memory", "9:devices", "8:pids", "7:net_cls,net_prio",
                  "6:perf_event", "5:freezer", "4:blkio", "3:cpu,cpuacct", "2:rdma", "1:name=systemd"]


def v1(path: str, hybrid: bool = True) -> str:
    lines = [f"{c}:{path}" for c in V1_CONTROLLERS]
    if hybrid:
        lines.append("0::/")
    return "\n".join(lines) + "\n"


# (description, cgroup file, expected)
SHAPES = [
    ("containerd, systemd, v2, Burstable",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(UID, CID, "containerd")),
    ("containerd, systemd, v2, BestEffort",
     f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(UID, CID, "containerd")),
    ("containerd, systemd, v2, Guaranteed (no QoS level)",
     f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(UID, CID, "containerd")),
    ("CRI-O, systemd, v2",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope\n",
     CgroupRef(UID, CID, "cri-o")),
    ("CRI-O with the nested container leaf",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope/container\n",
     CgroupRef(UID, CID, "cri-o")),
    ("CRI-O conmon: in the pod, but never a container",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-conmon-{CID}.scope\n",
     CgroupRef(UID, None, "")),
    ("cri-dockerd, systemd, v2",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n",
     CgroupRef(UID, CID, "docker")),
    ("cgroupfs driver, v2", f"0::/kubepods/burstable/pod{UID}/{CID}\n", CgroupRef(UID, CID, "")),
    ("cgroupfs driver, v2, Guaranteed", f"0::/kubepods/pod{UID}/{CID}\n", CgroupRef(UID, CID, "")),
    ("cgroupfs driver, v1 hybrid", v1(f"/kubepods/besteffort/pod{UID}/{CID}"), CgroupRef(UID, CID, "")),
    ("systemd driver, v1 without unified line",
     v1(f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope",
        hybrid=False),
     CgroupRef(UID, CID, "containerd")),
    ("seen from inside a cgroup namespace (../ prefix)",
     f"0::/../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(UID, CID, "containerd")),
    ("cgroupfs from inside a cgroup namespace", f"0::/../../../kubepods/burstable/pod{UID}/{CID}\n",
     CgroupRef(UID, CID, "")),
    ("kind / --cgroup-root prefix",
     f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(UID, CID, "containerd")),
    ("static pod: the manifest hash in place of a UID",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(STATIC, CID, "containerd")),
    ("process in a sub-cgroup of its container",
     f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope/workers/w1\n",
     CgroupRef(UID, CID, "containerd")),
    ("plain Docker (cgroupfs), no pod", f"0::/docker/{CID}\n", CgroupRef(None, CID, "docker")),
    ("plain Docker (systemd), no pod", f"0::/system.slice/docker-{CID}.scope\n", CgroupRef(None, CID, "docker")),
]
NOT_IN_A_CONTAINER = [
    ("host session", "0::/user.slice/user-1000.slice/session-3.scope\n"),
    ("system service", "0::/system.slice/nvidia-persistenced.service\n"),
    ("root cgroup", "0::/\n"),
    ("v1 host process", v1("/user.slice")),
    ("empty file", ""),
    ("garbage", "not a cgroup file\n\x00\x01"),
    ("a pod-like word that is not a UID", "0::/kubepods/burstable/podnotauid/abc\n"),
    ("a 64-hex id outside kubepods and docker", f"0::/system.slice/{CID}\n"),
]


def write_tree(root, files: dict[int, str]) -> ProcFs:
    for pid, text in files.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "cgroup").write_text(text)
    return ProcFs(str(root))


@pytest.mark.parametrize("text,expected", [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_every_runtime_and_layout_gives_pod_and_container(tmp_path, text, expected):
    """Each shape, read from a fake /proc, gives the pod UID (dashed) and the container id."""
    procfs = write_tree(tmp_path, {4242: text})
    assert parse_cgroup(procfs.cgroup(4242)) == expected


@pytest.mark.parametrize("text", [s[1] for s in NOT_IN_A_CONTAINER], ids=[s[0] for s in NOT_IN_A_CONTAINER])
def test_processes_outside_containers_have_no_pod(tmp_path, text):
    procfs = write_tree(tmp_path, {7: text})
    assert parse_cgroup(procfs.cgroup(7)) is None


def test_a_whole_fake_proc_tree_puts_each_pid_in_its_pod(tmp_path):
    """One tree with a process of each shape: every pid resolves independently; a gone pid is None."""
    files = {1000 + i: text for i, (_, text, _) in enumerate(SHAPES)}
    procfs = write_tree(tmp_path, files)
    for i, (_, _, expected) in enumerate(SHAPES):
        assert parse_cgroup(procfs.cgroup(1000 + i)) == expected
    assert procfs.cgroup(99999) is None


def test_v1_majority_wins_over_a_stray_hierarchy():
    """On v1, the answer most hierarchies give wins; a stray one (here the rdma root) does not."""
    path = f"/kubepods/burstable/pod{UID}/{CID}"
    lines = [f"{c}:{path}" for c in V1_CONTROLLERS[:-1]] + [f"1:name=systemd:/kubepods/burstable/pod{UID}/{OTHER}"]
    assert parse_cgroup("\n".join(lines)) == CgroupRef(UID, CID, "")


@pytest.mark.parametrize("runtime,driver,version,qos", list(itertools.product(
    ("containerd", "cri-o", "docker"), ("systemd", "cgroupfs", "systemd-literal"), (1, 2),
    ("guaranteed", "burstable", "besteffort"))))
def test_parser_reads_what_the_simulator_writes(runtime, driver, version, qos):
    """The simulator's cgroup files (every runtime x driver x version x QoS) parse to its pod."""
    pod = PodSpec("ns", "p", "c", UID, runtime, driver, version, qos)
    ref = parse_cgroup(cgroup_file(pod))
    assert ref is not None and ref.pod_uid == UID and ref.container_id == pod.container_id
    # cgroupfs names only CRI-O's containers (crio-<id>); the others are bare ids
    assert ref.runtime == (runtime if driver != "cgroupfs" or runtime == "cri-o" else "")


def test_container_ids_from_the_api_lose_their_scheme():
    assert normalize_container_id(f"containerd://{CID}") == CID
    assert normalize_container_id(f"cri-o://{CID}") == CID
    assert normalize_container_id(f"docker://{CID.upper()}") == CID
