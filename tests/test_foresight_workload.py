"""Workload keys: volatile command-line parts, Kubernetes owners, configured rules, label bounds."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import UserError
from exporter.foresight.workload import (
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    kubernetes_owner,
    normalize_cmdline,
    parse_rules,
    profile_key,
    workload_key,
    workload_label,
)

WAN = (
    "/opt/venv/bin/python3 generate.py --task ti2v-5B --size 1280*704 --ckpt_dir ./Wan2.2-TI2V-5B "
    "--prompt '{prompt}' --base_seed {seed} --save_file /outputs/{out}.mp4"
)


def test_runs_differing_only_in_seed_prompt_and_output_share_a_key():
    """Two Wan runs with another prompt, seed and output file are the same workload."""
    a = normalize_cmdline(WAN.format(prompt="a red fox", seed=42, out="fox"))
    b = normalize_cmdline(WAN.format(prompt="two cats on a boat", seed=7, out="cats-2025-01-03"))
    assert a == b
    assert "seed" not in a and "prompt" not in a and "outputs" not in a


def test_model_and_task_stay_in_the_key():
    """A different task or checkpoint is a different workload, so it must change the key."""
    five = normalize_cmdline(WAN.format(prompt="x", seed=1, out="o"))
    fourteen = normalize_cmdline(WAN.replace("ti2v-5B", "i2v-A14B").format(prompt="x", seed=1, out="o"))
    assert five != fourteen
    assert "ti2v-5B" in five and "./Wan2.2-TI2V-5B" in five


def test_executable_keeps_only_its_basename():
    """The interpreter path depends on the venv, not on the job."""
    assert normalize_cmdline("/usr/bin/python3 train.py") == normalize_cmdline("/opt/conda/bin/python3 train.py")


@pytest.mark.parametrize(
    "cmdline",
    [
        "torchrun --master_port 29500 train.py --local-rank=0",
        "torchrun --master_port=29611 train.py --local-rank=3",
        "vllm serve llama --port 8001 --seed 3",
    ],
)
def test_ports_and_ranks_are_dropped_in_both_flag_forms(cmdline):
    """Ports, seeds and ranks given as '--f v' or '--f=v' leave no trace in the key."""
    key = normalize_cmdline(cmdline)
    assert not any(ch.isdigit() for ch in key.replace("llama", "")), key


def test_uuids_dates_and_tmp_paths_are_masked():
    """Embedded run ids, timestamps and scratch paths become '*'."""
    key = normalize_cmdline(
        "python eval.py ckpt-3f2a9c1b-1d2e-4f00-9abc-0123456789ab run_20250103T101500 /tmp/job123/data"
    )
    assert key == "python eval.py ckpt-* run_* *"


def test_unquoted_prompt_from_proc_is_dropped_up_to_the_next_flag():
    """/proc joins argv with spaces, so a multi-word prompt is several tokens; all of them go."""
    a = normalize_cmdline("python generate.py --prompt a cat surfing --size 1280*704")
    b = normalize_cmdline("python generate.py --prompt a red fox in snow --size 1280*704")
    assert a == b == "python generate.py --size 1280*704"


def test_long_numbers_in_paths_are_masked():
    """A notebook kernel file named after its port is the same notebook."""
    a = normalize_cmdline("python3 -m ipykernel_launcher -f /home/u1/runtime/kernel-9005.json")
    b = normalize_cmdline("python3 -m ipykernel_launcher -f /home/u1/runtime/kernel-9123.json")
    assert a == b and "kernel-*.json" in a


def test_profile_key_names_the_device_size():
    """Profiles are kept per device size, in whole GiB; without a size the key is unchanged."""
    assert profile_key("wan", 81559 * 2**20 - 512 * 2**20) == "wan@79GiB"
    assert profile_key("wan", 40448 * 2**20) == "wan@40GiB"
    assert profile_key("wan", None) == "wan"


def test_negative_numbers_are_values_not_flags():
    """A '-1' after an option is its value, kept as such."""
    assert normalize_cmdline("bench --layers -1 --seed 5") == "bench --layers -1"


@pytest.mark.parametrize(
    "pod,owner",
    [
        ("wan-gen-7d4b9c8f6-x2k9p", "wan-gen"),  # Deployment
        ("nightly-eval-8k2vq", "nightly-eval"),  # Job
        ("postgres-2", "postgres"),  # StatefulSet
        ("handmade", "handmade"),  # bare pod
    ],
)
def test_kubernetes_owner_strips_generated_suffixes(pod, owner):
    """Pods of one controller map to the controller's name."""
    assert kubernetes_owner(pod) == owner


def test_kubernetes_identity_wins_over_the_command_line():
    """With downward-API variables the key names namespace, owner and container."""
    env = {"POD_NAMESPACE": "video", "POD_NAME": "wan-gen-7d4b9c8f6-x2k9p", "CONTAINER_NAME": "worker"}
    assert workload_key("python3 generate.py", "python3", env) == "k8s:video/wan-gen/worker"


def test_explicit_variable_wins_over_kubernetes():
    """GPUSHARE_WORKLOAD is the user's own name for the job."""
    env = {"GPUSHARE_WORKLOAD": "wan-5b", "POD_NAMESPACE": "video", "POD_NAME": "x-2"}
    assert workload_key("python3 generate.py", "python3", env) == "wan-5b"


def test_configured_rule_overrides_and_expands_groups():
    """A rule with a capture group turns matching command lines into its template."""
    rules = parse_rules([{"match": r"generate\.py --task (\S+)", "key": r"wan-\1"}])
    assert workload_key(WAN.format(prompt="p", seed=1, out="o"), "python3", {}, rules) == "wan-ti2v-5B"
    assert workload_key("python3 other.py", "python3", {}, rules) == "python3 other.py"


def test_rule_on_the_derived_key_sees_the_kubernetes_identity():
    """field: key matches what the built-in derivation produced."""
    rules = parse_rules([{"match": "^k8s:video/", "key": "video-team", "field": "key"}])
    env = {"POD_NAMESPACE": "video", "POD_NAME": "a-1"}
    assert workload_key("python3 x.py", "python3", env, rules) == "video-team"


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"match": "x"}, "config: foresight.workload_rules: must be a list of rules, got dict"),
        (["x"], "config: foresight.workload_rules[0]: must be a mapping with 'match' and 'key'"),
        ([{"match": "(", "key": "k"}], "config: foresight.workload_rules[0].match: invalid regular expression"),
        ([{"match": "a", "key": ""}], "config: foresight.workload_rules[0].key: required non-empty string"),
        ([{"match": "(a)", "key": r"\2"}], "config: foresight.workload_rules[0].key: invalid template"),
        ([{"match": "a", "key": "b", "field": "env"}], "config: foresight.workload_rules[0].field: must be one of"),
        ([{"match": "a", "key": "b", "when": 1}], "config: foresight.workload_rules[0]: unknown field 'when'"),
    ],
)
def test_bad_rules_raise_one_line_user_errors(raw, message):
    """Each malformed rule names its position and problem on one line."""
    with pytest.raises(UserError) as err:
        parse_rules(raw)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_long_keys_get_short_distinct_labels():
    """Two long keys sharing a prefix get different labels within the length bound."""
    a, b = "python3 " + "x" * 200 + " a", "python3 " + "x" * 200 + " b"
    la, lb = workload_label(a), workload_label(b)
    assert la != lb and len(la) <= MAX_LABEL_LENGTH and len(lb) <= MAX_LABEL_LENGTH
    assert workload_label(a) == la  # stable


def test_short_keys_are_their_own_label():
    """Readable keys are not hashed."""
    assert workload_label("wan-5b") == "wan-5b"


@given(st.text(max_size=3000))
def test_any_command_line_gives_a_bounded_key_and_label(cmdline):
    """Whatever /proc holds, keys stay under the stored bound and labels under the label bound."""
    key = workload_key(cmdline, "proc", {})
    assert 0 < len(key) <= MAX_KEY_LENGTH
    assert len(workload_label(key)) <= MAX_LABEL_LENGTH


EMBED = "python3 embed_server.py --model BAAI/bge-large-en-v1.5 --port 8000 --batch-size 64 --max-length 512"


@pytest.mark.parametrize(("key", "kept"), [
    (normalize_cmdline(EMBED), ("embed_server.py", "BAAI/bge-large-en-v1.5")),
    (normalize_cmdline(EMBED) + "@79GiB", ("embed_server.py", "bge-large-en-v1.5", "@79GiB")),
    ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --gpu-memory-utilization 0.9@79GiB",
     ("vllm serve", "Llama-3.1-70B-Instruct", "@79GiB")),
    ("python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-70B-Instruct --tp 4",
     ("api_server", "Llama-3.1-70B-Instruct")),
    ("torchrun --nproc_per_node 8 train.py --config=configs/llama3_70b.yaml --lr 3e-4 --warmup-steps 2000",
     ("train.py", "configs/llama3_70b.yaml")),
    ("perf_analyzer -m resnet50 -u localhost:8001 --concurrency-range 1:8 --measurement-interval 5000@20GiB",
     ("perf_analyzer", "resnet50", "@20GiB")),
])
def test_long_labels_keep_program_model_and_device_size(key, kept):
    """A long key's label keeps what tells jobs apart (script, model, config, device size), not a prefix."""
    label = workload_label(key)
    assert len(key) > MAX_LABEL_LENGTH and len(label) <= MAX_LABEL_LENGTH
    for part in kept:
        assert part in label, (label, part)
    assert re.search(r"~[0-9a-f]{8}$", label)


def test_kubernetes_labels_keep_namespace_owner_and_container():
    """k8s keys keep all three parts, each cut in its middle, the longest first."""
    label = workload_label("k8s:ml/text-embedding-server-with-a-long-owner-name/server@80GiB")
    assert len(label) <= MAX_LABEL_LENGTH
    assert label.startswith("k8s:ml/text-") and "/server@80GiB~" in label
    label = workload_label("k8s:machine-learning-inference/text-embedding-server-large/embedding-server@80GiB")
    namespace, owner, container = label[4:].split("~")[0].removesuffix("@80GiB").split("/")
    assert namespace.startswith("mach") and owner.startswith("text") and container.startswith("embe")
    assert len(label) <= MAX_LABEL_LENGTH


def test_keys_differing_only_in_what_is_elided_get_different_labels():
    """Two servers differing only in a flag that does not make it into the label still differ by the hash."""
    a = normalize_cmdline(EMBED)
    b = a.replace("--max-length 512", "--max-length 1024")
    assert workload_label(a) != workload_label(b)
    assert workload_label(a).split("~")[0] == workload_label(b).split("~")[0]


@given(st.lists(st.sampled_from(["python3", "-m", "--model", "--config=", "a/b", "k8s:", "/", "@80GiB", "x" * 30,
                                 "serve", "run.py", " ", "--task", "é", "…", "~"]), max_size=40))
def test_labels_of_any_key_are_bounded_and_deterministic(pieces):
    """Any key, however its pieces combine, gives a label within the bound, the same each time."""
    key = "".join(pieces) or "x"
    label = workload_label(key)
    assert len(label) <= MAX_LABEL_LENGTH and label == workload_label(key)
    if len(key) > MAX_LABEL_LENGTH:
        assert label != key
