"""Issue 3, part 5: a predicted OOM reaches a person before it happens, through the real alerting stack.

Learn: one Wan job alone (examples/scenarios/wan22-h100-mps-solo.yaml) is played in-process
through SimBackend + Foresight; its export is loaded with `exporter profiles import` into the
state dirs of two `exporter serve --simulate` processes at SPEED x real time, one running
wan22-h100-mps-together.yaml (three jobs whose peaks collide: OOM kill ~9 min after they start),
one wan22-h100-mps-staggered.yaml (the same jobs 60 s apart: they fit). Both run from copies in
which every job starts JOBS_AT virtual seconds later, on an idle GPU: Prometheus applies new
scrape targets only on its 5 s discovery and scrape-reload ticks, and the jobs must not run
unwatched meanwhile (in production the exporter is scraped long before jobs are submitted).

Alert: Debian's Prometheus scrapes both every half second (30 virtual s) and evaluates a copy of
the shipped alerts/*.yml in which every `for:` is divided by SPEED (30 s virtual = 0.5 s real; the
shipped files are unchanged and promtool checks them in test_alert_rules.py), and sends to Debian's
Alertmanager (group_wait/group_interval 250 ms), which
posts to a webhook served by this test. Everything listens on 127.0.0.1 (Alertmanager gossip off).

Compared: the webhook's arrival time with the last exporter poll that still showed
gpushare_simulation_oom_kills_total at 0 (the OOM came after it), on one clock (Unix time).
Runs in about 30 s (most of it simulated time: 26 virtual minutes at 60x).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from exporter.backend.sim import SimBackend
from exporter.foresight import Foresight
from exporter.foresight.basis import workload_of
from exporter.foresight.workload import workload_label
from exporter.sim.scenario import load_scenario
from exporter.units import parse_duration
from tests.conftest import REPO, SCENARIOS, require_binary
from tests.promstack import Exporter, Prometheus, StackError, _Process, free_port, start_exporters, stop_all

SPEED = 60.0  # virtual seconds per real second
INTERVAL = 0.125  # real seconds between exporter polls: 7.5 virtual s, the spike lasts 30
SCRAPE = "500ms"  # Prometheus' scrape and evaluation interval: 30 virtual s
JOBS_AT = 720.0  # virtual seconds (12 s real) before the jobs start: over two 5 s Prometheus ticks
CONTENTION = {"GpuMemoryContentionPredicted", "MigMemoryContentionPredicted"}


def scaled_rule_files(target: Path, speed: float) -> list[Path]:
    """Copies of alerts/*.yml in ``target`` with every `for:` divided by ``speed`` (in milliseconds)."""
    copies = []
    for source in sorted((REPO / "alerts").glob("*.yml")):
        document = yaml.safe_load(source.read_text())
        for group in document["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = f"{max(1, round(parse_duration(rule['for']) * 1000 / speed))}ms"
        copy = target / source.name
        copy.write_text(yaml.safe_dump(document, sort_keys=False, width=1000))
        copies.append(copy)
    return copies


def delayed_scenario(name: str, target: Path, delay: float) -> Path:
    """A copy of a shipped scenario in ``target`` whose jobs all start ``delay`` seconds later (and that lasts as
    much longer); everything else, the GPU's UUID included, is unchanged."""
    document = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())  # resolves the <<: *job merges
    for process in document["processes"]:
        process["start"] = f"{parse_duration(process.get('start', 0)) + delay:g}s"
    document["duration"] = f"{parse_duration(document['duration']) + delay:g}s"
    copy = target / f"{name}.yaml"
    copy.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


def learned_profiles_json() -> str:
    """The export of a Foresight that watched the solo Wan scenario to its end, polled every 5 virtual s."""
    foresight = Foresight()
    backend = SimBackend(SCENARIOS / "wan22-h100-mps-solo.yaml")
    backend.open()
    try:
        for step in range(0, 600 // 5 + 1):
            backend.step_to(step * 5.0)
            foresight.observe(backend.poll())
    finally:
        backend.close()
    return foresight.export_json()


class Webhook:
    """An Alertmanager webhook receiver on 127.0.0.1: keeps (Unix arrival time, alert) for every alert posted."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict]] = []
        lock, received = threading.Lock(), self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                arrived = time.time()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    received.extend((arrived, alert) for alert in body.get("alerts", []))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, names: set[str], instance: str) -> list[tuple[float, dict]]:
        """Firing alerts received so far with one of these names for this scrape target, oldest first."""
        return sorted(((t, a) for t, a in list(self.received) if a["labels"].get("alertname") in names
                       and a["labels"].get("instance") == instance and a["status"] == "firing"), key=lambda x: x[0])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Alertmanager(_Process):
    """Debian's Alertmanager on a free loopback port, clustering off, routing everything to ``webhook_url``."""

    name = "alertmanager"

    def __init__(self, webhook_url: str, timeout: float = 30.0) -> None:
        super().__init__()
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        config = {
            "route": {"receiver": "test", "group_by": ["..."], "group_wait": "250ms", "group_interval": "250ms",
                      "repeat_interval": "1h"},
            "receivers": [{"name": "test", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}],
        }
        (self.dir / "alertmanager.yml").write_text(yaml.safe_dump(config))
        argv = [require_binary("prometheus-alertmanager"), f"--config.file={self.dir / 'alertmanager.yml'}",
                f"--storage.path={self.dir / 'data'}", f"--web.listen-address={self.target}",
                "--cluster.listen-address=", "--log.level=warn"]
        try:
            self._spawn(argv)
            self._wait_ready(f"http://{self.target}/-/ready", timeout)
        except BaseException:
            self.stop()
            raise


class AlertingPrometheus(Prometheus):
    """promstack's Prometheus (same queries) plus an Alertmanager, with targets read from a file.

    File-based discovery lets Prometheus be up before the exporters start, so their simulated
    clocks do not run unscraped while it starts.
    """

    def __init__(self, rule_files: list[Path], alertmanager: str, timeout: float = 30.0) -> None:
        _Process.__init__(self)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets_file = self.dir / "targets.json"
        self.set_targets([])
        config = {
            "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE, "scrape_timeout": SCRAPE},
            "rule_files": [str(p) for p in rule_files],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
            "scrape_configs": [{"job_name": "gpushare",
                                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}]}],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [require_binary("prometheus"), f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn"]
        try:
            self._spawn(argv)
            self._wait_ready(self.url + "/-/ready", timeout)
        except BaseException:
            self.stop()
            raise

    def set_targets(self, targets: list[str]) -> None:
        """Replace the scrape targets (atomically, so discovery never reads half a file)."""
        partial = self.targets_file.with_suffix(".tmp")
        partial.write_text(json.dumps([{"targets": targets}]))
        partial.replace(self.targets_file)


class PollWatch(threading.Thread):
    """Reads an exporter's /metrics every 50 ms; keeps each poll's Unix time -> (virtual time, OOM kills)."""

    def __init__(self, exporter: Exporter) -> None:
        super().__init__(daemon=True)
        self.exporter, self.stopped, self._lock, self._polls = exporter, threading.Event(), threading.Lock(), {}
        self.start()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            try:
                text = self.exporter.metrics()
            except (StackError, OSError):
                continue  # at shutdown
            values: dict[str, float] = {}  # family -> sum over its samples
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    values[name.split("{")[0]] = values.get(name.split("{")[0], 0.0) + float(value)
            wall = values.get("gpushare_exporter_last_poll_timestamp_seconds")
            if wall is not None:
                with self._lock:
                    self._polls[wall] = (values.get("gpushare_simulation_time_seconds", 0.0),
                                         values.get("gpushare_simulation_oom_kills_total", 0.0))

    @property
    def polls(self) -> list[tuple[float, tuple[float, float]]]:
        """(Unix time, (virtual time, OOM kills)) of every poll seen, oldest first."""
        with self._lock:
            return sorted(self._polls.items())

    def virtual_now(self) -> float:
        return max((v for _, (v, _) in self.polls), default=0.0)

    def oom_bracket(self) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """((Unix, virtual) of the last poll with no OOM kill, (Unix, virtual) of the first with one), or None."""
        polls = self.polls
        first = next((i for i, (_, (_, kills)) in enumerate(polls) if kills >= 1), None)
        if not first:
            return None
        (w0, (v0, _)), (w1, (v1, _)) = polls[first - 1], polls[first]
        return (w0, v0), (w1, v1)

    def virtual_at(self, unix: float) -> float:
        """Virtual time at a Unix time: the simulated clock runs SPEED x real time from the exporter's start."""
        origin = min(wall - virtual / SPEED for wall, (virtual, _) in self.polls if virtual > 0)
        return (unix - origin) * SPEED


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The stack above, run until the together exporter counted an OOM kill and the staggered scenario ended."""
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("alerting")
    (tmp / "rules").mkdir()
    export = tmp / "profiles.json"
    export.write_text(learned_profiles_json())
    scenarios = {}
    for name in ("together", "staggered"):
        (tmp / name).mkdir()
        done = subprocess.run([sys.executable, "-m", "exporter", "profiles", "import", "--state-dir",
                               str(tmp / name), str(export)], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith("imported 1 of 1"), done.stdout + done.stderr
        scenarios[name] = delayed_scenario(f"wan22-h100-mps-{name}", tmp, JOBS_AT)
    webhook = Webhook()
    stack: list = []
    watches: dict[str, PollWatch] = {}
    try:
        stack.append(Alertmanager(webhook.url))
        prom = AlertingPrometheus(scaled_rule_files(tmp / "rules", SPEED), stack[0].target)
        stack.append(prom)
        started = start_exporters([(scenario, {"speed": SPEED, "interval": INTERVAL,
                                               "extra_args": ["--state-dir", str(tmp / name)]})
                                   for name, scenario in scenarios.items()])
        exporters = dict(zip(scenarios, started))
        stack.extend(started)
        prom.set_targets([e.target for e in exporters.values()])
        watches.update((name, PollWatch(e)) for name, e in exporters.items())
        prom.wait_for(f'count(up{{job="gpushare"}} == 1) == {len(exporters)}', timeout=JOBS_AT / SPEED)
        scraped_at = min(watch.virtual_now() for watch in watches.values())
        if scraped_at >= JOBS_AT:
            raise StackError(f"Prometheus first scraped at virtual t={scraped_at:.0f}s, after the jobs started")
        # Until the staggered scenario ends: 150 virtual s (2.5 real s) after its last job, more than the
        # shortened `for` (0.5 s) + scrape + evaluation + group_wait.
        ends = load_scenario(scenarios["staggered"]).duration
        deadline = time.monotonic() + 120
        while watches["together"].oom_bracket() is None or watches["staggered"].virtual_now() < ends:
            if time.monotonic() > deadline:
                raise StackError(f"run incomplete after 120 s: {[w.virtual_now() for w in watches.values()]}")
            time.sleep(0.1)
        for watch in watches.values():
            watch.stopped.set()  # the record ends here; Prometheus and the exporters stay up for the queries
        yield {"webhook": webhook, "prom": prom, "exporters": exporters, "watches": watches,
               "profiles": json.loads(export.read_text())["profiles"]}
    finally:
        for watch in watches.values():
            watch.stopped.set()
        stop_all(reversed(stack))
        webhook.close()


def first_negative_headroom(run, name: str) -> float | None:
    """Virtual time of the first scrape with negative GPU headroom for this exporter, or None."""
    watch, target = run["watches"][name], run["exporters"][name].target
    series = run["prom"].query_range(f'gpushare_gpu_memory_headroom_bytes{{instance="{target}"}}',
                                     watch.polls[0][0], watch.polls[-1][0])
    times = [float(t) for s in series for t, v in s["values"] if float(v) < 0]
    return watch.virtual_at(min(times)) if times else None


@pytest.mark.e2e
def test_contention_alert_reaches_the_webhook_before_the_oom(run):
    """The colliding Wan jobs page before the simulated OOM kill, naming the GPU, the workload and the three jobs."""
    together, watch = run["exporters"]["together"], run["watches"]["together"]
    alerts = run["webhook"].alerts({"GpuMemoryContentionPredicted"}, together.target)
    assert alerts, f"no contention alert delivered; webhook got {[a['labels'] for _, a in run['webhook'].received]}"
    arrived, alert = alerts[0]
    (last_clean, first_killed) = watch.oom_bracket()
    lead_real = last_clean[0] - arrived
    lead_virtual = last_clean[1] - watch.virtual_at(arrived)
    predicted = first_negative_headroom(run, "together")
    print(f"\njobs started together at virtual t={JOBS_AT:g}s; after them (virtual s): headroom < 0 scraped at "
          f"{predicted - JOBS_AT:.0f}, alert at the webhook at {watch.virtual_at(arrived) - JOBS_AT:.0f}, OOM kill "
          f"in ({last_clean[1] - JOBS_AT:.0f}, {first_killed[1] - JOBS_AT:.0f}]; lead time >= {lead_real:.1f} s real "
          f"= {lead_virtual:.0f} s virtual at --speed {SPEED:g}\n{alert['annotations']['description']}")
    assert lead_real > 0, "the alert came after the OOM kill"
    # The jobs follow a learned profile and overflow by far: the paging tier comes before the OOM too.
    critical = [arrived for arrived, a in alerts if a["labels"].get("severity") == "critical"]
    assert critical and critical[0] < last_clean[0], "no critical (paging) contention alert before the OOM kill"
    (gpu_info,) = run["prom"].query(f'gpushare_gpu_info{{instance="{together.target}"}}')
    assert alert["labels"]["gpu"] == "0" and alert["labels"]["uuid"] == gpu_info["metric"]["uuid"]
    (profile,) = run["profiles"]
    description = alert["annotations"]["description"]
    assert workload_label(workload_of(profile["key"])) in description  # the workload, without the device size
    # Outside Kubernetes each job is named by its pid, after the forecast basis when the exporter gives one.
    assert all(re.search(rf"\((?:\w+, )?pid {pid}\)", description) for pid in (4101, 4102, 4103)), description
    assert "(pid )" not in description and "pod /" not in description
    assert alert["annotations"]["summary"].startswith(f"GPU 0 on {together.target}: predicted OOM")
    action = alert["annotations"]["action"]
    assert "apart" in action and "learned memory curves" in action  # the stagger advice, since a spacing fits
    assert "does not make them fit" in action  # a pinned limit per client is not offered as the remedy


@pytest.mark.e2e
def test_staggered_jobs_deliver_no_contention_alert(run):
    """Started 60 s apart the same jobs never page, while the same stack paged for the together run and the
    learned profile was in use for them."""
    staggered, together = run["exporters"]["staggered"], run["exporters"]["together"]
    watch = run["watches"]["staggered"]
    print(f"\nstaggered: first negative headroom at virtual t={first_negative_headroom(run, 'staggered')}; "
          f"alerts delivered: {sorted({a['labels']['alertname'] for _, a in run['webhook'].received})}")
    assert run["webhook"].alerts(CONTENTION, staggered.target) == []
    assert run["webhook"].alerts(CONTENTION, together.target), "the pipeline delivered nothing at all"
    assert max(kills for _, (_, kills) in watch.polls) == 0
    # Expected peak above use at some scrape (33 GiB learned while at 22 GiB): the profile was applied.
    span = int(watch.polls[-1][0] - watch.polls[0][0]) + 5
    gap = run["prom"].query(
        f'max_over_time((gpushare_process_memory_expected_peak_bytes{{instance="{staggered.target}"}}'
        f" - ignoring(workload) gpushare_process_memory_used_bytes)[{span}s:1s])")
    assert gap and max(float(s["value"][1]) for s in gap) > 0
