"""Tests for the scenario loader (exporter.sim.scenario) and the shipped example scenarios."""

import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

from exporter.catalog import MODELS
from exporter.errors import UserError
from exporter.sim.model import timeline_value
from exporter.sim.scenario import default_pci_bus_id, default_uuid, load_scenario, parse_scenario

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
GIB = 2**30

BASE_GPUS = """
gpus:
  - model: H100-80GB
    mps: true
  - model: A100-40GB
    mig:
      - {profile: 3g.20gb}
      - {profile: 2g.10gb}
"""


def write(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def refusal(tmp_path, text):
    """Load ``text`` and return the UserError message (fails the test if it loads)."""
    path = write(tmp_path, text)
    with pytest.raises(UserError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    return str(path), message


def assert_refused(tmp_path, text, where, *fragments):
    path, message = refusal(tmp_path, text)
    prefix = f"{path}: {where}: " if where else f"{path}: "
    assert message.startswith(prefix), message
    for fragment in fragments:
        assert fragment in message, message


# --- file-level refusals ----------------------------------------------------------------


def test_file_not_found(tmp_path):
    """A missing file is named with 'file not found'."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(UserError, match=re.escape(f"{missing}: file not found")):
        load_scenario(missing)


def test_yaml_syntax_error_gives_line(tmp_path):
    """A YAML syntax error names the file and the line."""
    assert_refused(tmp_path, "gpus:\n  - model: H100\n   bad: [\n", "", "line 3", "YAML syntax error")


def test_duplicate_yaml_key_is_refused(tmp_path):
    """A key repeated in one mapping is refused instead of silently keeping the last."""
    assert_refused(tmp_path, BASE_GPUS + "gpus: []\n", "", "line", "duplicate key 'gpus'")


@pytest.mark.parametrize("text,got", [("- 1\n- 2\n", "got a list"), ("", "the file is empty")])
def test_top_level_must_be_a_mapping(tmp_path, text, got):
    """A list or empty document at top level is refused."""
    assert_refused(tmp_path, text, "", "top level must be a mapping", got)


# --- unknown keys, models, units --------------------------------------------------------


def test_unknown_top_level_key_suggests(tmp_path):
    """A misspelt top-level key is refused with a suggestion."""
    assert_refused(tmp_path, BASE_GPUS + "proceses: []\n", "proceses", "unknown key",
                   "did you mean 'processes'")


def test_unknown_nested_key_suggests(tmp_path):
    """Unknown keys deep inside are reported with their full path."""
    text = "gpus:\n  - model: A100-40GB\n    mig:\n      - {profil: 3g.20gb}\n"
    assert_refused(tmp_path, text, "gpus[0].mig[0].profil", "unknown key", "did you mean 'profile'")


def test_unknown_model(tmp_path):
    """An unknown model names the known ones."""
    assert_refused(tmp_path, "gpus:\n  - model: H900\n", "gpus[0].model", "unknown GPU model 'H900'",
                   "H100-80GB")


def test_bad_size_unit(tmp_path):
    """A bad size names the timeline point and quotes the value."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, memory: [[0s, 1GiB], [5s, 22 GXB]]}\n"
    assert_refused(tmp_path, text, "processes[0].memory[1][1]", "bad size '22 GXB'")


def test_bad_duration_unit(tmp_path):
    """A bad duration names the field."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, memory: 1GiB, start: 5 minutes}\n"
    assert_refused(tmp_path, text, "processes[0].start", "bad duration '5 minutes'")


# --- GPUs and MIG placements ------------------------------------------------------------


def test_duplicate_gpu_index(tmp_path):
    """Two GPUs with the same index are refused."""
    text = "gpus:\n  - {model: H100-80GB, index: 0}\n  - {model: H100-80GB, index: 0}\n"
    assert_refused(tmp_path, text, "gpus[1].index", "duplicate index 0", "gpus[0]")


def test_gpu_indices_must_be_dense(tmp_path):
    """NVML numbers GPUs 0..n-1, so a gap is refused."""
    text = "gpus:\n  - {model: H100-80GB, index: 0}\n  - {model: H100-80GB, index: 2}\n"
    assert_refused(tmp_path, text, "gpus", "index 1 is missing")


def test_mig_start_not_allowed(tmp_path):
    """A 1g at memory slice 7 is an impossible placement."""
    text = "gpus:\n  - model: H100-80GB\n    mig: [{profile: 1g.10gb, start: 7}]\n"
    assert_refused(tmp_path, text, "gpus[0].mig[0].start", "cannot start at memory slice 7")


def test_mig_overlap(tmp_path):
    """A 2g inside a 3g's slices is refused at the second entry."""
    text = "gpus:\n  - model: H100-80GB\n    mig: [{profile: 3g.40gb, start: 0}, {profile: 2g.20gb, start: 2}]\n"
    assert_refused(tmp_path, text, "gpus[0].mig[1]", "overlaps 3g.40gb at 0")


def test_mig_no_free_placement(tmp_path):
    """A third 3g.40gb has nowhere to go."""
    text = "gpus:\n  - model: H100-80GB\n    mig: [{profile: 3g.40gb}, {profile: 3g.40gb}, {profile: 3g.40gb}]\n"
    assert_refused(tmp_path, text, "gpus[0].mig[2]", "no free placement left for 3g.40gb")


def test_mig_unknown_profile(tmp_path):
    """A profile of another model is refused with the valid list and a suggestion."""
    text = "gpus:\n  - model: H100-80GB\n    mig: [{profile: 3g.20gb}]\n"
    assert_refused(tmp_path, text, "gpus[0].mig[0].profile", "unknown MIG profile '3g.20gb'",
                   "did you mean '3g.40gb'")


def test_mig_on_non_mig_model(tmp_path):
    """An L4 cannot enable MIG."""
    assert_refused(tmp_path, "gpus:\n  - {model: L4, mig: []}\n", "gpus[0].mig", "not MIG-capable")


def test_gpu_level_mps_with_mig(tmp_path):
    """MPS on a MIG GPU must be set per instance."""
    text = "gpus:\n  - {model: H100-80GB, mps: true, mig: [{profile: 7g.80gb}]}\n"
    assert_refused(tmp_path, text, "gpus[0].mps", "per instance")


def test_bad_uuid(tmp_path):
    """A malformed GPU UUID is refused."""
    assert_refused(tmp_path, "gpus:\n  - {model: T4, uuid: GPU-1234}\n", "gpus[0].uuid", "not a GPU UUID")


# --- processes --------------------------------------------------------------------------


def test_process_on_missing_gpu(tmp_path):
    """A process on GPU 5 of a 2-GPU scenario is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 5, memory: 1GiB}\n"
    assert_refused(tmp_path, text, "processes[0].gpu", "no GPU with index 5")


def test_process_mig_index_out_of_range(tmp_path):
    """mig: 2 on a GPU with two instances is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 1, mig: 2, memory: 1GiB}\n"
    assert_refused(tmp_path, text, "processes[0].mig", "has 2 MIG instance(s)")


def test_process_mig_on_non_mig_gpu(tmp_path):
    """mig given for a GPU without MIG is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, mig: 0, memory: 1GiB}\n"
    assert_refused(tmp_path, text, "processes[0].mig", "MIG disabled")


def test_process_missing_mig_on_mig_gpu(tmp_path):
    """A process on a MIG GPU must say which instance."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 1, memory: 1GiB}\n"
    assert_refused(tmp_path, text, "processes[0]", "MIG enabled", "set mig")


def test_process_memory_above_gpu_capacity(tmp_path):
    """90 GiB at start cannot fit an H100 (79.2 GiB usable)."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, start: 1m, memory: 90GiB}\n"
    assert_refused(tmp_path, text, "processes[0].memory", "90.00 GiB at its start (1m) exceeds",
                   "GPU 0 (81559 MiB total")


def test_process_memory_above_mig_capacity(tmp_path):
    """10 GiB cannot fit a 2g.10gb instance (9984 MiB on the default R580; 9856 on R525-R545)."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 1, mig: 1, memory: 10GiB}\n"
    assert_refused(tmp_path, text, "processes[0].memory", "exceeds", "2g.10gb", "9984 MiB")


def test_start_memory_sum_above_capacity(tmp_path):
    """Two 45 GiB processes present at t=0 on one H100 exceed it together."""
    text = BASE_GPUS + """processes:
  - {pid: 1, name: a, gpu: 0, memory: 45GiB}
  - {pid: 2, name: b, gpu: 0, memory: 45GiB}
"""
    assert_refused(tmp_path, text, "processes[1].memory", "processes[0], processes[1]", "90.00 GiB together")


def test_later_starts_are_not_summed(tmp_path):
    """The at-rest sum applies to t=0 only: a second 45 GiB job starting later loads."""
    text = BASE_GPUS + """processes:
  - {pid: 1, name: a, gpu: 0, memory: 45GiB}
  - {pid: 2, name: b, gpu: 0, start: 10s, memory: 45GiB}
"""
    assert len(load_scenario(write(tmp_path, text)).processes) == 2


def test_duplicate_pid_overlapping(tmp_path):
    """The same pid alive twice at once is refused; reuse after exit is fine."""
    text = BASE_GPUS + """processes:
  - {pid: 7, name: a, gpu: 0, memory: 1GiB, end: 1m}
  - {pid: 7, name: b, gpu: 0, memory: 1GiB, start: 30s}
"""
    assert_refused(tmp_path, text, "processes[1].pid", "pid 7 is already used by processes[0]")
    ok = text.replace("start: 30s", "start: 1m")
    assert len(load_scenario(write(tmp_path, ok, "ok.yaml")).processes) == 2


def test_end_not_after_start(tmp_path):
    """end <= start is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, memory: 1GiB, start: 2m, end: 1m}\n"
    assert_refused(tmp_path, text, "processes[0].end", "end 1m must be after start 2m")


def test_timeline_times_must_not_decrease(tmp_path):
    """Timeline times going backwards are refused at the offending point."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, memory: [[0s, 1GiB], [2m, 2GiB], [1m, 3GiB]]}\n"
    assert_refused(tmp_path, text, "processes[0].memory[2][0]", "time 1m is before the previous point's 2m")


def test_ratio_outside_0_1(tmp_path):
    """An activity of 85 (percent) is refused: ratios are 0..1."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 0, memory: 1GiB, sm_active: [[0s, 0.5], [1m, 85]]}\n"
    assert_refused(tmp_path, text, "processes[0].sm_active[1][1]", "85 is outside 0..1")


def test_gpu_utilization_ratio(tmp_path):
    """GPU utilization is a ratio too."""
    assert_refused(tmp_path, "gpus:\n  - {model: T4, utilization: 1.5}\n", "gpus[0].utilization", "outside 0..1")


def test_mps_client_without_server(tmp_path):
    """mps_client: true on a device without an MPS server is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, name: a, gpu: 1, mig: 0, memory: 1GiB, mps_client: true}\n"
    assert_refused(tmp_path, text, "processes[0].mps_client", "no MPS server")


def test_bad_mps_pinned_limit(tmp_path):
    """A malformed CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is refused at the env variable."""
    text = BASE_GPUS + ("processes:\n  - {pid: 1, name: a, gpu: 0, memory: 1GiB, "
                        "env: {CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: \"0=30GiB\"}}\n")
    assert_refused(tmp_path, text, "processes[0].env.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "bad MPS size")


def test_process_needs_name_or_cmdline(tmp_path):
    """A process with neither name nor cmdline is refused."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, gpu: 0, memory: 1GiB}\n"
    assert_refused(tmp_path, text, "processes[0]", "needs a name or a cmdline")


# --- events -----------------------------------------------------------------------------


def test_fault_error_must_be_an_nvml_error(tmp_path):
    """An error name without an NVMLError_ class is refused with a suggestion."""
    text = BASE_GPUS + "events:\n  - {at: 1m, fault: {call: nvmlDeviceGetPowerUsage, error: GpuLost}}\n"
    assert_refused(tmp_path, text, "events[0].fault.error", "unknown NVML error 'GpuLost'",
                   "did you mean 'GpuIsLost'")


def test_fault_call_must_exist(tmp_path):
    """A misspelt NVML call is refused; pynvml names and C symbols are both accepted."""
    text = BASE_GPUS + "events:\n  - {at: 1m, fault: {call: nvmlDeviceGetPowerUsag, error: Timeout}}\n"
    assert_refused(tmp_path, text, "events[0].fault.call", "did you mean 'nvmlDeviceGetPowerUsage'")
    good = text.replace("nvmlDeviceGetPowerUsag,", "nvmlDeviceGetComputeRunningProcesses_v3,")
    assert load_scenario(write(tmp_path, good, "ok.yaml")).events[0].fault.call.endswith("_v3")


def test_fault_until_before_at(tmp_path):
    """A fault ending before it starts is refused."""
    text = BASE_GPUS + "events:\n  - {at: 2m, fault: {call: '*', error: Unknown, until: 1m}}\n"
    assert_refused(tmp_path, text, "events[0].fault.until", "must be after the event time")


def test_event_needs_exactly_one_kind(tmp_path):
    """An event with two kinds is ambiguous."""
    text = BASE_GPUS + "events:\n  - {at: 1m, gpu_lost: {gpu: 0}, xid: {gpu: 0, code: 79}}\n"
    assert_refused(tmp_path, text, "events[0]", "needs exactly one of")


def test_event_after_duration(tmp_path):
    """An event after the end of the scenario would never happen."""
    text = "duration: 5m\n" + BASE_GPUS + "events:\n  - {at: 6m, gpu_lost: {gpu: 0}}\n"
    assert_refused(tmp_path, text, "events[0].at", "after the scenario duration 5m")


def test_reconfigure_on_non_mig_gpu(tmp_path):
    """mig_reconfigure needs a MIG-enabled GPU."""
    text = BASE_GPUS + "events:\n  - {at: 1m, mig_reconfigure: {gpu: 0, mig: [{profile: 7g.80gb}]}}\n"
    assert_refused(tmp_path, text, "events[0].mig_reconfigure.gpu", "MIG disabled")


def test_reconfigure_with_invalid_layout(tmp_path):
    """The new layout is checked like an initial one."""
    text = BASE_GPUS + "events:\n  - {at: 1m, mig_reconfigure: {gpu: 1, mig: [{profile: 7g.40gb}, {profile: 1g.5gb}]}}\n"
    assert_refused(tmp_path, text, "events[0].mig_reconfigure.mig[1]", "no free placement")


def test_reconfigure_while_process_runs(tmp_path):
    """A process still on the GPU at a reconfigure is refused (NVML: instance in use)."""
    text = BASE_GPUS + """processes:
  - {pid: 1, name: a, gpu: 1, mig: 0, memory: 1GiB}
events:
  - {at: 1m, mig_reconfigure: {gpu: 1, mig: [{profile: 7g.40gb}]}}
"""
    assert_refused(tmp_path, text, "processes[0]", "still running on GPU 1", "set end <= 1m")


def test_process_mig_index_uses_layout_at_its_start(tmp_path):
    """After a reconfigure to one 7g instance, mig: 1 no longer exists."""
    text = BASE_GPUS + """processes:
  - {pid: 1, name: a, gpu: 1, mig: 1, memory: 1GiB, start: 2m}
events:
  - {at: 1m, mig_reconfigure: {gpu: 1, mig: [{profile: 7g.40gb}]}}
"""
    assert_refused(tmp_path, text, "processes[0].mig", "has 1 MIG instance(s) at 2m")


def test_xid_mig_index_checked(tmp_path):
    """An XID attributed to a missing instance is refused."""
    text = BASE_GPUS + "events:\n  - {at: 1m, xid: {gpu: 1, code: 43, mig: 5}}\n"
    assert_refused(tmp_path, text, "events[0].xid.mig", "has 2 MIG instance(s)")


def test_mps_restart_needs_a_server(tmp_path):
    """mps_restart on an instance without MPS is refused."""
    text = BASE_GPUS + "events:\n  - {at: 1m, mps_restart: {gpu: 1, mig: 0}}\n"
    assert_refused(tmp_path, text, "events[0].mps_restart", "no MPS server")


# --- defaults and resolution ------------------------------------------------------------


def test_defaults_are_resolved(tmp_path):
    """Name, UUID, PCI bus id, MIG starts and mps_client are filled in deterministically."""
    text = BASE_GPUS + "processes:\n  - {pid: 1, cmdline: /usr/bin/python3 x.py, gpu: 0, memory: 1GiB}\n"
    scenario = load_scenario(write(tmp_path, text, "my-node.yaml"))
    (tmp_path / "copy").mkdir()
    again = load_scenario(write(tmp_path, text, "copy/my-node.yaml"))  # same name, other path
    assert scenario.name == "my-node"
    g0, g1 = scenario.gpus
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g0.uuid)
    assert g0.uuid == default_uuid("my-node", 0) == again.gpus[0].uuid
    assert g0.uuid != g1.uuid
    assert (g0.pci_bus_id, g1.pci_bus_id) == ("00000000:18:00.0", "00000000:1A:00.0")
    assert default_pci_bus_id(3) == "00000000:1E:00.0"
    # 3g.20gb takes the first free start (0); 2g.10gb then the first 2-slice start after it (4).
    assert [(m.profile, m.start) for m in g1.mig] == [("3g.20gb", 0), ("2g.10gb", 4)]
    process = scenario.processes[0]
    assert (process.name, process.start, process.end, process.mps_client) == ("python3", 0.0, None, True)
    assert g1.model == "A100-40GB" and g0.mig is None and scenario.duration is None


def test_explicit_starts_are_placed_before_free_ones(tmp_path):
    """An entry without start does not steal the slice a later entry asks for."""
    text = "gpus:\n  - model: H100-80GB\n    mig: [{profile: 1g.10gb}, {profile: 3g.40gb, start: 0}]\n"
    gpu = load_scenario(write(tmp_path, text)).gpus[0]
    assert [(m.profile, m.start) for m in gpu.mig] == [("1g.10gb", 4), ("3g.40gb", 0)]


def test_relative_times_and_nvml_names(tmp_path):
    """'+' times count from the process start; NVML product names resolve to catalog keys."""
    text = """gpus:
  - model: NVIDIA H100 80GB HBM3
processes:
  - {pid: 1, name: a, gpu: 0, start: 1m, end: +30s, memory: [[+0s, 1GiB], [+10s, 2GiB]]}
"""
    scenario = load_scenario(write(tmp_path, text))
    process = scenario.processes[0]
    assert scenario.gpus[0].model == "H100-80GB"
    assert process.end == 90.0
    assert process.memory == ((60.0, 1.0 * GIB), (70.0, 2.0 * GIB))


def test_x_keys_hold_anchors(tmp_path):
    """Top-level x- keys are ignored, so they can hold YAML anchors for reuse."""
    text = """x-job: &job {name: a, gpu: 0, memory: 1GiB}
gpus: [{model: T4}]
processes:
  - {<<: *job, pid: 1}
  - {<<: *job, pid: 2, memory: 2GiB}
"""
    processes = load_scenario(write(tmp_path, text)).processes
    assert [(p.pid, p.memory[0][1]) for p in processes] == [(1, 2.0**30), (2, 2.0 * 2**30)]


def test_events_are_sorted_by_time(tmp_path):
    """Events come out in time order whatever the file order."""
    text = BASE_GPUS + """events:
  - {at: 5m, gpu_lost: {gpu: 0}}
  - {at: 1m, xid: {gpu: 0, code: 79}}
"""
    assert [e.kind for e in load_scenario(write(tmp_path, text)).events] == ["xid", "gpu_lost"]


def test_parse_scenario_accepts_a_dict():
    """parse_scenario validates already-parsed data and uses the source in messages."""
    scenario = parse_scenario({"gpus": [{"model": "T4"}]}, "inline.yaml")
    assert scenario.name == "inline" and scenario.gpus[0].model == "T4"
    with pytest.raises(UserError, match=r"^inline: gpus: needs at least one GPU$"):
        parse_scenario({"gpus": []}, "inline")


# --- shipped scenarios ------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path):
    """Every example scenario is valid."""
    scenario = load_scenario(path)
    assert scenario.gpus and scenario.name == path.stem


def test_expected_scenarios_are_shipped():
    """The documented example scenarios exist."""
    names = {p.stem for p in EXAMPLES.glob("*.yaml")}
    assert {"wan22-h100-mps-together", "wan22-h100-mps-staggered", "a100-40gb-two-3g",
            "h100-mixed-node", "h200-mig", "faults-demo", "wan22-h100-mps-solo", "node-faults"} <= names


def _peak_gpu_memory(scenario, gpu=0):
    """Largest summed memory of live processes on a GPU, sampled every 0.5 s."""
    horizon = int(2 * (scenario.duration or 3600))
    return max(
        sum(timeline_value(p.memory, t / 2) for p in scenario.processes
            if p.gpu == gpu and p.start <= t / 2 < (p.end or float("inf")))
        for t in range(horizon)
    )


def test_wan22_together_exceeds_h100_and_staggered_fits():
    """Seed 000: 3 x 33 GiB peaks together exceed the H100; staggered 60 s apart peak at 77 GiB."""
    capacity = MODELS["H100-80GB"].memory_capacity_bytes
    together = load_scenario(EXAMPLES / "wan22-h100-mps-together.yaml")
    staggered = load_scenario(EXAMPLES / "wan22-h100-mps-staggered.yaml")
    assert _peak_gpu_memory(together) == pytest.approx(99 * GIB)
    assert _peak_gpu_memory(together) > capacity
    assert _peak_gpu_memory(staggered) == pytest.approx(77 * GIB)
    assert _peak_gpu_memory(staggered) < capacity
    assert [p.start for p in staggered.processes] == [0.0, 60.0, 120.0]


def test_mixed_node_is_generated_and_reproducible():
    """h100-mixed-node.yaml is exactly what gen_mixed_node.py renders, with about 300 processes."""
    spec = importlib.util.spec_from_file_location("gen_mixed_node", EXAMPLES / "gen_mixed_node.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render() == (EXAMPLES / "h100-mixed-node.yaml").read_text()
    scenario = load_scenario(EXAMPLES / "h100-mixed-node.yaml")
    assert 250 <= len(scenario.processes) <= 350
    assert len(scenario.gpus) == 8 and not any(p.gpu == 5 for p in scenario.processes)
    assert sum(1 for p in scenario.processes if p.gpu == 4) == 1


def test_faults_demo_has_every_event_kind():
    """faults-demo exercises each event kind at least once."""
    scenario = load_scenario(EXAMPLES / "faults-demo.yaml")
    assert {e.kind for e in scenario.events} == {"fault", "gpu_lost", "mig_reconfigure", "xid", "mps_restart"}
