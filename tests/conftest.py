"""Shared pytest options and fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"
GOLDEN = Path(__file__).resolve().parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current code instead of comparing (review the diff!)",
    )


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def bench_module(name: str):
    """A module of bench/ (its modules import each other by bare name, so bench/ is on the path
    while it imports)."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


@pytest.fixture
def install_simulation():
    """install(sim) -> ``sim`` installed as pynvml's C library with NVML initialised; every
    simulation installed this way is shut down and closed after the test."""
    import pynvml

    installed = []

    def install(sim):
        sim.install()
        pynvml.nvmlInit()
        installed.append(sim)
        return sim

    yield install
    for sim in installed:
        pynvml.nvmlShutdown()
        sim.close()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path to promtool: skipped on a developer machine without it, a failure under CI."""
    return require_binary("promtool")


@pytest.fixture(scope="session")
def run_shared_dir(tmp_path_factory) -> Path:
    """A directory for what several modules of one test run compute alike (tests/sim_snapshots.py's
    shared_series): under pytest-xdist the run's base temporary directory, which every worker's own
    lies in, so all workers share it; a serial run's own base directory otherwise. Never reused by a
    later run, whose code may differ."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    path.mkdir(exist_ok=True)
    return path


def require_binary(name: str) -> str:
    """Path of a Debian-packaged tool the tests drive for real (promtool, prometheus, alertmanager)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not installed (apt-get install prometheus prometheus-alertmanager)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)
    return path


def _group_shared_fixtures(item) -> None:
    """Under pytest-xdist (``--dist loadgroup``, pyproject.toml): the tests of a module that share a
    module-scoped fixture (a Prometheus, an exporter, a long simulation) run on one worker, so the
    fixture starts once, not once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None or item.get_closest_marker("xdist_group") is not None:
        return
    if any(defs and defs[-1].scope in ("module", "class", "package") for defs in info.name2fixturedefs.values()):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


# Tests left out of the inner loop (`python3 -m pytest -m "not e2e"`, README.md), besides those marked
# in their files: each starts real processes (an exporter, promtool, Prometheus, chromium, nvitop,
# a bench) or plays a whole scenario through the exporter, and takes seconds (the 80 slowest of
# `python3 -m pytest --durations=80` on 2026-11-26, then of the inner loop's --durations=25).
# {module: {test function}} with all its parameters; "*": every test of the module.
E2E_TESTS: dict[str, set[str]] = {
    "test_nvml_clients": {"*"},  # nvitop, gpustat, nvidia-smi-like clients as processes
    "test_bench_smoke": {"*"},  # each runs a bench script
    "test_recommend_bench": {"*"},
    "test_cli": {"test_serve_shuts_down_cleanly_on_signal", "test_real_no_gpu_path_in_subprocess",
                 "test_json_logs_are_json_lines"},
    "test_backend_sim": {"test_example_scenarios_poll_cleanly"},
    "test_process_series": {"*"},  # a module fixture plays the k8s node for minutes
    "test_pod_accounting": {"*"},
    "test_alert_rules": {"test_promtool_unit_tests_pass"},
    "test_dashboards": {"test_every_panel_query_runs_without_error", "test_mps_dashboard_shows_the_contention_minutes_before_the_kill"},
    "test_dcgm_alerts": {"test_mig_advice_alerts_cannot_fire_through_nvml", "test_mig_advice_alerts_fire_through_dcgm"},
    "test_dcgm_degrade": {"test_host_engine_goes_away_and_comes_back"},
    "test_dcgm_e2e": {"test_serve_recovers_from_a_host_engine_restart"},
    "test_dcgm_parity": {"test_dcgm_and_nvml_export_the_same_series"},
    "test_deploy": {"test_generated_files_are_in_sync_with_alerts_and_dashboards"},
    "test_e2e_alerting": {"test_contention_alert_reaches_the_webhook_before_the_oom"},
    "test_e2e_serve": {"test_serve_a_shipped_scenario_by_name_shows_pod_labels", "test_serve_names_pods_through_a_real_api_server", "test_serving_survives_every_fault_and_follows_changes", "test_sigterm_exits_cleanly"},
    "test_encode": {"test_any_label_values_and_floats_match_the_library", "test_shipped_scenarios_encode_byte_identical"},
    "test_foresight_outcome": {"test_staggered_jobs_raise_no_warning"},
    "test_foresight_profiles": {"test_long_runs_keep_bounded_samples"},
    "test_foresight_sim": {"test_mixed_node_never_predicts_contention_for_long"},
    "test_foresight_state": {"test_together_goes_negative_at_start_and_staggered_never"},
    "test_golden_metrics": {"test_golden_rendering_is_deterministic", "test_metrics_match_golden"},
    "test_http_hardening": {"test_any_bytes_get_a_4xx_or_an_answer_never_a_500"},
    "test_input_errors": {"test_cli_exits_2_with_one_line_naming_the_file", "test_command_line_arguments", "test_config_files", "test_profile_exports", "test_scenario_files", "test_workload_plans"},
    "test_recommend_command": {"test_simulated_wan_node_gets_a_stagger_that_avoids_the_oom"},
    "test_recommend_inputs": {"test_from_uses_what_the_exporter_learned", "test_from_watches_a_running_exporter", "test_snapshots_give_workloads_not_processes"},
    "test_recommend_outputs": {"test_html_renders_in_headless_chromium"},
    "test_recommend_planner": {"test_optimum_equals_brute_force"},
    "test_recommend_prometheus_e2e": {"test_history_and_snapshots_of_the_same_fleet_give_the_same_plan", "test_history_gives_the_true_peak_concurrency_and_the_optimal_gpu_count", "test_live_fleet_with_churn_needs_no_more_gpus_than_it_runs", "test_runs_and_formats_agree"},
    "test_recommend_report": {"test_baselines_never_beat_the_optimum", "test_summary_counts_add_up"},
    "test_redact": {"test_exporter_snapshot_prints_no_secret", "test_serve_shows_no_secret_in_metrics_snapshot_or_log"},
    "test_reliability": {"test_fault_storm_under_10000_scrapes"},
    "test_scenario": {"test_mixed_node_is_generated_and_reproducible", "test_shipped_scenarios_load"},
    "test_transitions": {"test_each_change_of_the_fault_demo_is_logged_once", "test_health_never_flaps_while_one_gpu_hangs_with_default_settings", "test_health_stays_up_and_says_so_when_every_gpu_is_lost"},
    "test_web_config": {"test_every_case_gets_promtools_verdict", "test_generated_configs_get_promtools_verdict", "test_random_bytes_get_promtools_verdict"},
    "test_helm": {"*"},  # helm and kubectl processes for every value set
    "test_hardware_alerts_e2e": {"*"},  # plays the health node through both backends into promtool
    "test_recommend_consistency": {"test_simulated_histories_give_plans_that_never_contradict_themselves",
                                   "test_all_histories_together_as_one_fleet"},  # plays nine scenarios
    "test_recommend_operator": {"test_simulated_fleet_objects_are_valid_and_labels_name_only_their_configs",
                                # these three read fleet_args, which plays four nodes for 30 minutes each
                                "test_owner_settings_carry_the_mps_advice_as_pod_template_patches",
                                "test_a_group_moved_from_whole_gpu_sharing_into_a_mig_slice_is_told_how_to_share_there",
                                "test_mig_parted_comments_name_only_configs_the_file_defines"},
    "test_backend_dcgm_supply": {"test_in_place_equals_copy_on_a_node_with_faults",
                                 "test_in_place_equals_copy_on_shipped_nodes"},  # play whole nodes twice
    "test_bench_foresight_smoke": {"*"},  # each runs a bench script
    "test_dcgm_pairs": {"*"},  # both backends poll whole scenarios in turn
}


# Tests that run real processes against the clock (an exporter that must answer within its poll
# interval, Prometheus rule evaluation, promtool using every core): one worker runs them one after
# another, so that two of them never starve each other of the two cores; the other worker takes the
# rest meanwhile. {module: {test function}}, "*": the whole module (its shared fixture stays on it).
TIMED_PROCESSES: dict[str, set[str]] = {
    "test_alert_rules": {"test_promtool_unit_tests_pass"},
    "test_reliability": {"test_fault_storm_under_10000_scrapes"},
    "test_e2e_alerting": {"*"},
    "test_recommend_prometheus_e2e": {"*"},
    "test_dashboards": {"*"},
    "test_e2e_serve": {"*"},
}


# Under pytest-xdist the slowest items are handed out first, so that the two workers finish together
# instead of one starting a minute-long test while the other has nothing left. --dist loadgroup sends
# the shared-fixture groups first (most tests first), then single tests in collection order; these are
# moved to the front of that order, slowest first (`--durations=80` of a full run, 2026-11-26), then
# the other e2e tests, then the rest. A serial run (-n0) keeps the collection order.
SLOWEST_FIRST: list[tuple[str, str]] = [
    ("test_bench_smoke", "test_foresight_accuracy_smoke_prints_the_table_with_ratios_in_range"),
    ("test_sim_client_install", "test_client_runner_works_without_psutil"),
    ("test_foresight_sim", "test_mixed_node_never_predicts_contention_for_long"),
    ("test_bench_smoke", "test_foresight_bench_sim_alerts_minutes_before_the_wan_oom"),
    ("test_input_errors", "test_workload_plans"),
    ("test_recommend_planner", "test_optimum_equals_brute_force"),
    ("test_bench_smoke", "test_smoke_run_prints_every_table"),
    ("test_recommend_bench", "test_scale_bench_runs_recommend_against_the_synthetic_prometheus"),
    ("test_transitions", "test_health_never_flaps_while_one_gpu_hangs_with_default_settings"),
    ("test_hardware_alerts_e2e", "test_a_real_prometheus_fires_the_instant_alerts_and_nothing_on_the_healthy_node"),
    ("test_bench_smoke", "test_missing_peer_is_skipped_with_one_line"),
    ("test_transitions", "test_health_stays_up_and_says_so_when_every_gpu_is_lost"),
    ("test_dcgm_parity", "test_dcgm_and_nvml_export_the_same_series"),
    ("test_http_hardening", "test_any_bytes_get_a_4xx_or_an_answer_never_a_500"),
    ("test_foresight_profiles", "test_long_runs_keep_bounded_samples"),
    ("test_recommend_report", "test_baselines_never_beat_the_optimum"),
]


def _function_of(item) -> str:
    return getattr(item, "originalname", None) or item.name.split("[", 1)[0]


def _start_order(item) -> tuple[int, int]:
    """Sort key: the listed slow tests in their order, then the other e2e tests, then the rest. Tests
    of an xdist group keep their order among themselves (xdist sends a group as one unit)."""
    if item.get_closest_marker("xdist_group") is not None:
        return (1, 0)
    rank = _SLOWEST_RANK.get((item.module.__name__.rpartition(".")[2], _function_of(item)))
    if rank is not None:
        return (0, rank)
    return (1, 0) if item.get_closest_marker("e2e") is not None else (2, 0)


_SLOWEST_RANK = {name: rank for rank, name in enumerate(SLOWEST_FIRST)}


def _listed(table: dict[str, set[str]], item) -> bool:
    function = _function_of(item)
    listed = table.get(item.module.__name__.rpartition(".")[2], ())
    return function in listed or "*" in listed


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _listed(E2E_TESTS, item):
            item.add_marker(pytest.mark.e2e)
        if _listed(TIMED_PROCESSES, item):
            item.add_marker(pytest.mark.xdist_group("timed-processes"))
        _group_shared_fixtures(item)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts the same way, so their collections agree
        items.sort(key=_start_order)
