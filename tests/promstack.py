"""A real Prometheus (and real exporters) for end-to-end tests.

Starts Debian's ``prometheus`` binary on a free loopback port, with a temporary data
directory and a generated config that scrapes the given targets every second and, optionally,
evaluates rule files every second. Queries go through the HTTP API, as Grafana's would.

    from tests.promstack import Prometheus, start_exporter

    with start_exporter(SCENARIOS / "wan22-h100-mps-together.yaml", speed=30) as wan, \\
            Prometheus({"gpushare": [wan.target]}, rule_files=sorted(ALERTS.glob("*.yml"))) as prom:
        prom.wait_for("gpushare_gpu_info")          # first scrape landed
        prom.query("gpushare_gpu_memory_used_bytes")  # [{"metric": {...}, "value": [t, "1.2e10"]}, ...]

``Prometheus`` and ``Exporter`` stop their process and remove their files on ``stop()`` or
at the end of a ``with`` block; a process that dies early or never gets ready raises
:class:`StackError` with the tail of its log. Nothing here skips a test: fixtures decide that
(see ``tests.conftest.require_binary``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

REPO = Path(__file__).resolve().parent.parent


class StackError(RuntimeError):
    """A process of the stack failed to start, died, or a query was refused."""


class QueryError(StackError):
    """Prometheus answered a query with an error (bad PromQL, execution error)."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _log_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


class _Process:
    """A child process whose output goes to a log file in its own temporary directory."""

    name = "process"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"gpushare-{self.name}-"))
        self.log = self.dir / "log.txt"
        self.proc: subprocess.Popen | None = None
        self._terminated = False

    def _spawn(self, argv: Sequence[str], cwd: Path | None = None) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(list(argv), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def _wait_ready(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise StackError(f"{self.name} exited early ({code}): {_log_tail(self.log)}")
            try:
                if _get(url, timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise StackError(f"{self.name} not ready at {url} after {timeout:g}s: {_log_tail(self.log)}")

    def logs(self) -> str:
        """Everything the process wrote so far (stdout and stderr)."""
        return _log_tail(self.log, 1 << 20)

    def terminate(self) -> None:
        """Send SIGTERM once (stop_all sends it to several processes before waiting for each)."""
        if self.proc is not None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s) and remove its directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class Exporter(_Process):
    """``exporter serve --simulate SCENARIO`` as a subprocess on a free loopback port.

    ``target`` is the ``host:port`` to scrape (Prometheus makes it the ``instance`` label),
    ``url`` the base URL. Ready once ``/health`` answers 200 (the first poll is done).
    """

    name = "exporter"

    def __init__(self, scenario: str | os.PathLike, *, speed: float = 30.0, interval: float = 0.5,
                 extra_args: Sequence[str] = (), timeout: float = 30.0, port: int | None = None,
                 wait: bool = True) -> None:
        super().__init__()
        self.scenario = Path(scenario)
        # A port chosen beforehand (free_port) lets Prometheus scrape the target before it listens.
        self.port = free_port() if port is None else port
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.target}"
        self.argv = [sys.executable, "-m", "exporter", "serve", "--simulate", str(self.scenario),
                     "--speed", f"{speed:g}", "--interval", f"{interval:g}", "--listen", self.target,
                     *extra_args]
        self.timeout = timeout
        try:
            self._spawn(self.argv, cwd=REPO)
            if wait:
                self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> None:
        """Wait until ``/health`` answers 200 (``wait=False`` started it without waiting)."""
        self._wait_ready(self.url + "/health", self.timeout)

    def metrics(self) -> str:
        """The current /metrics page."""
        status, body = _get(self.url + "/metrics")
        if status != 200:
            raise StackError(f"{self.url}/metrics answered {status}")
        return body.decode()


def start_exporter(scenario: str | os.PathLike, **kwargs: Any) -> Exporter:
    """Start an :class:`Exporter` (keyword arguments: speed, interval, extra_args, timeout, port)."""
    return Exporter(scenario, **kwargs)


def start_exporters(specs: Sequence[tuple[str | os.PathLike, Mapping[str, Any]]]) -> list[Exporter]:
    """Start one :class:`Exporter` per ``(scenario, keyword arguments)``, all at once, then wait until each is
    ready: their start-ups (imports, first poll) overlap instead of adding up. On any failure every one
    started is stopped."""
    exporters: list[Exporter] = []
    try:
        for scenario, kwargs in specs:
            exporters.append(Exporter(scenario, **kwargs, wait=False))
        for exporter in exporters:
            exporter.wait_ready()
    except BaseException:
        stop_all(exporters)
        raise
    return exporters


def stop_all(processes: Iterable[_Process]) -> None:
    """Stop processes together: SIGTERM to every one first, then wait for each (as :meth:`_Process.stop`)."""
    processes = list(processes)
    for process in processes:
        if process.proc is not None and process.proc.poll() is None:
            process.terminate()
    for process in processes:
        process.stop()


class Prometheus(_Process):
    """Debian's Prometheus scraping ``jobs`` (job name -> ``host:port`` targets) every ``scrape_interval``.

    ``rule_files`` are copied into the data directory and evaluated every ``scrape_interval``.
    ``scrape_configs`` are added as they are (e.g. the Operator's, from tests/operator_scrape.py);
    ``external_labels`` go to the global section, as an HA pair or a fleet's Prometheus sets them.
    Use as a context manager, or call :meth:`stop`.
    """

    name = "prometheus"

    def __init__(self, jobs: Mapping[str, Iterable[str]], *, rule_files: Iterable[str | os.PathLike] = (),
                 scrape_interval: str = "1s", binary: str = "prometheus", timeout: float = 30.0,
                 scrape_configs: Sequence[Mapping[str, Any]] = (),
                 external_labels: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = []
        for i, path in enumerate(rule_files):
            copy = self.dir / f"rules-{i}-{Path(path).name}"
            shutil.copyfile(path, copy)
            rules.append(str(copy))
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                       "scrape_timeout": scrape_interval},
            "rule_files": rules,
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                               for job, targets in jobs.items()] + [dict(c) for c in scrape_configs],
        }
        if external_labels:
            config["global"]["external_labels"] = dict(external_labels)
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.argv = [shutil.which(binary) or binary, f"--config.file={self.dir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                     "--log.level=warn"]
        try:
            self._spawn(self.argv)
            self._wait_ready(self.url + "/-/ready", timeout)
        except BaseException:
            self.stop()
            raise

    def _api(self, path: str, params: Mapping[str, Any]) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        status, body = _get(url, timeout=30)
        try:
            answer = json.loads(body)
        except ValueError:
            raise StackError(f"{path}: answer {status} is not JSON: {body[:200]!r}") from None
        if answer.get("status") != "success":
            raise QueryError(f"{params.get('query', path)}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str, time: float | None = None) -> list[dict]:
        """Instant query: the ``result`` list (vector samples; a scalar or string becomes one sample).

        Raises :class:`QueryError` when Prometheus rejects the query.
        """
        params = {"query": expr} if time is None else {"query": expr, "time": f"{time:.3f}"}
        data = self._api("query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict]:
        """Range query: one ``{"metric", "values"}`` per series. Raises :class:`QueryError` on errors."""
        return self._api("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})["result"]

    def series_names(self) -> set[str]:
        """Every metric name Prometheus holds (scraped, generated like ``up``, or recorded)."""
        return set(self._api("label/__name__/values", {}))

    def targets(self) -> list[dict]:
        """Active scrape targets with their ``health`` and ``lastError``."""
        return self._api("targets", {})["activeTargets"]

    def rules(self) -> list[dict]:
        """Loaded rule groups with their rules' health and state (``/api/v1/rules``)."""
        return self._api("rules", {})["groups"]

    def wait_for(self, expr: str, timeout: float = 30.0, poll: float = 0.1) -> list[dict]:
        """Query ``expr`` until it returns samples; the samples. Raises :class:`StackError` on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise StackError(f"no samples for {expr!r} after {timeout:g}s; targets: "
                                 f"{[(t['scrapeUrl'], t['health'], t['lastError']) for t in self.targets()]}")
            if self.proc is not None and self.proc.poll() is not None:
                raise StackError(f"prometheus died: {_log_tail(self.log)}")
            time.sleep(poll)
