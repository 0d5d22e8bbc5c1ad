"""exporter.identity: workload key and pod of a process, pod resolver before the environment."""

from __future__ import annotations

from exporter.foresight.workload import parse_rules
from exporter.identity import Identifier, PodRef, pod_from_environ


class FixedPods:
    def __init__(self, pods):
        self.pods = pods

    def resolve(self, pid):
        return self.pods.get(pid)


def test_environment_is_the_fallback_for_the_pod():
    env = {"POD_NAMESPACE": "ml", "POD_NAME": "trainer-0", "CONTAINER_NAME": "main"}
    identity = Identifier().identify(7, "python3", "python3 train.py", env)
    assert identity.pod == PodRef("ml", "trainer-0", "main")
    assert identity.workload == "k8s:ml/trainer/main"  # StatefulSet ordinal removed


def test_resolved_pod_wins_over_the_environment():
    """A pod found from the cgroup is the truth; stale or forged variables do not override it."""
    env = {"POD_NAMESPACE": "other", "POD_NAME": "forged"}
    pods = FixedPods({7: PodRef("inference", "llm-7d9f8b6c4-x2k9p", "server")})
    identity = Identifier(pods=pods).identify(7, "python3", "python3 serve.py", env)
    assert identity.pod == PodRef("inference", "llm-7d9f8b6c4-x2k9p", "server")
    assert identity.workload == "k8s:inference/llm/server"


def test_outside_kubernetes_the_command_line_names_the_workload():
    identity = Identifier(pods=FixedPods({})).identify(8, "python3", "python3 gen.py --seed 4 --steps 50", {})
    assert identity.pod is None
    assert identity.workload == "python3 gen.py --steps 50"


def test_rules_apply_to_resolved_identity():
    rules = parse_rules([{"match": "^k8s:inference/", "key": "inference-pool", "field": "key"}])
    pods = FixedPods({9: PodRef("inference", "llm-0", "server")})
    assert Identifier(rules, pods).identify(9, "python3", "python3 serve.py", {}).workload == "inference-pool"


def test_half_set_environment_names_no_pod():
    assert pod_from_environ({"POD_NAME": "x"}) is None
    assert pod_from_environ({"POD_NAMESPACE": "ns", "POD_NAME": " "}) is None
