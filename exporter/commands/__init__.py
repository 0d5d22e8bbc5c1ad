"""Subcommands of the ``exporter`` CLI, and what they share: setting flags, backend choice.

Each command module provides ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``; :mod:`exporter.cli` lists the modules.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Iterable

from exporter.config import DEFAULT_PORT, Settings, flag_type, load_settings
from exporter.errors import NoGpuError, UserError

if TYPE_CHECKING:  # the backends are imported when one is made: `exporter --help` never loads them
    from exporter.poller import Backend

log = logging.getLogger(__name__)

# A scenario shipped in the package (exporter.shipped): what to try on a machine without a GPU.
EXAMPLE_SCENARIO = "wan22-h100-mps-together"

_FLAG_HELP: dict[str, tuple[str, str]] = {
    "listen": ("HOST:PORT", f"address to serve HTTP on; ':PORT' = every interface (default :{DEFAULT_PORT})"),
    "interval": ("SECONDS", "time between polls of the GPUs (default 1)"),
    "backend": ("{auto,nvml,dcgm}", "how to read the GPUs: dcgm adds pipe activity on every GPU and MIG instance; "
                "auto = dcgm when DCGM's bindings load and a host engine answers, else nvml (default auto)"),
    "simulate": ("SCENARIO", "read simulated GPUs from this scenario file, or a shipped scenario by name "
                 "(e.g. wan22-h100-mps-together), instead of the driver"),
    "speed": ("X", "simulated seconds per real second with --simulate (default 1)"),
    "log_level": ("{debug,info,warning,error}", "log verbosity (default info)"),
    "log_format": ("{text,json}", "log lines as plain text or JSON objects (default text)"),
    "procfs": ("PATH", "where the host's /proc is mounted, for process names and MPS limits (default /proc)"),
    "gpu_timeout": ("SECONDS", "give up on a GPU whose reads take longer than this; it reports up=0 (default 2)"),
    "state_dir": ("DIR", "keep learned workload memory profiles here (SQLite) across restarts (default: memory only)"),
    "dcgm_address": ("HOST[:PORT]|PATH", "read DCGM from a running nv-hostengine (TCP, default port 5555, or a unix "
                     "socket path) instead of an embedded host engine"),
    "dcgm_bindings": ("DIR", "directory of DCGM's Python bindings (default: DCGM 4.x and 3.x install paths)"),
    "dcgm_update_interval": ("SECONDS", "how often DCGM samples the fields this exporter watches (default: "
                             "--interval with the embedded host engine; with --dcgm-address --interval but at "
                             "least 5, so a shared nv-hostengine is not made to sample every second for every "
                             "client; docs/backends.md)"),
    "web_config_file": ("FILE", "web config (exporter-toolkit format): TLS, client certificates, basic auth, "
                                "headers; reloaded on SIGHUP or change (docs/security.md)"),
    "web_max_connections": ("N", "most HTTP connections open at once (default 256)"),
    "web_read_timeout": ("SECONDS", "time a client has to finish sending a request or a TLS handshake (default 10)"),
    "web_idle_timeout": ("SECONDS", "close keep-alive connections idle this long (default 120)"),
    "process_series": ("{pid,pod,workload}", "per-process series: one per pid, per pod container (non-Kubernetes "
                       "processes: per pid), or per workload replica slot (default pod)"),
    "kubernetes_api": ("{auto,off,URL}", "name pods from this API server (auto: the in-cluster one when running "
                       "in a pod; needs --node-name or $NODE_NAME)"),
    "pod_resources_socket": ("{auto,off,PATH}", "the kubelet's pod-resources socket, for pods and their GPU/MIG "
                             "devices (auto: /var/lib/kubelet/pod-resources/kubelet.sock when present)"),
    "node_name": ("NAME", "the Kubernetes node this exporter runs on (default $NODE_NAME)"),
    "compat_listen": ("HOST:PORT", "also serve NVIDIA dcgm-exporter's /metrics (names, labels, units) on this "
                      "address, e.g. :9400 (docs/dcgm-exporter.md; default off)"),
}
# Flags spelled as Prometheus and its exporters spell them; the config key stays key_with_underscores.
_FLAG_NAMES = {
    "web_config_file": "--web.config.file",
    "web_max_connections": "--web.max-connections",
    "web_read_timeout": "--web.read-timeout",
    "web_idle_timeout": "--web.idle-timeout",
}


def flag_name(key: str) -> str:
    """The command-line flag of setting ``key`` (``--gpu-timeout``, ``--web.config.file``)."""
    return _FLAG_NAMES.get(key, "--" + key.replace("_", "-"))


def add_setting_flags(parser: argparse.ArgumentParser, keys: Iterable[str]) -> None:
    """--config plus one flag per setting; unset flags stay absent so the config file can supply them."""
    parser.add_argument(
        "--config", metavar="FILE", help="YAML file with the same settings (keys: long flag names with _)"
    )
    for key in keys:
        metavar, text = _FLAG_HELP[key]
        parser.add_argument(
            flag_name(key),
            dest=key,
            type=flag_type(key),
            default=argparse.SUPPRESS,
            metavar=metavar,
            help=text,
        )


def explicit_settings(args: argparse.Namespace) -> set[str]:
    """Settings the user gave (flags or the config file), as opposed to built-in defaults."""
    given = {key for key in _FLAG_HELP if hasattr(args, key)}
    config = getattr(args, "config", None)
    if config is not None:
        from exporter.config import read_config_file

        given |= set(read_config_file(config))
    return given


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Merge defaults, --config and the flags given on the command line."""
    overrides = {key: getattr(args, key) for key in _FLAG_HELP if hasattr(args, key)}
    return load_settings(getattr(args, "config", None), overrides)


def no_gpu_message(exc: NoGpuError, command: str) -> str:
    """The backend's one line, plus the --simulate command to try when it does not already say so."""
    text = " ".join(str(exc).split()) or "no NVIDIA GPU driver found on this host"
    if "--simulate" not in text:
        text += f"; to try the exporter without a GPU run: exporter {command} --simulate {EXAMPLE_SCENARIO}"
    return text


def dcgm_options(settings: Settings, interval: float | None = None):
    """Where to find DCGM (bindings, host engine) and how often to have it sample."""
    from exporter.backend.choose import DcgmOptions
    from exporter.backend.dcgm_bindings import search_dirs

    address = None
    if settings.dcgm_address is not None:
        from exporter.backend.dcgm_session import DcgmAddress  # the DCGM backend loads only where DCGM is named

        kind, _, target = settings.dcgm_address.partition("://")
        address = DcgmAddress(kind, target)
    if settings.dcgm_bindings is not None and not os.path.isdir(settings.dcgm_bindings):
        raise UserError(f"--dcgm-bindings {settings.dcgm_bindings}: not a directory")
    return DcgmOptions(bindings_dirs=search_dirs(settings.dcgm_bindings), address=address,
                       interval=settings.interval if interval is None else interval,
                       update_interval=settings.dcgm_update_interval)


def make_backend(settings: Settings) -> Backend:
    """The backend the settings ask for, constructed but not opened (--backend auto decides at open)."""
    options = dcgm_options(settings)
    if settings.backend == "nvml" and (settings.dcgm_address or settings.dcgm_bindings):
        log.warning("--dcgm-address and --dcgm-bindings are ignored with --backend nvml")
    from exporter import redact

    redact.configure(settings.redact_patterns)  # before the backend reads a command line
    if settings.simulate is not None:
        from exporter.backend.sim import backend_from_settings  # the one door into the simulator

        return backend_from_settings(settings, options)
    if not os.path.isdir(settings.procfs):
        raise UserError(f"procfs {settings.procfs}: not a directory")
    from exporter.backend.choose import ChosenBackend
    from exporter.backend.nvml import NvmlBackend
    from exporter.backend.procinfo import ProcFs
    from exporter.identity import Identifier
    from exporter.k8s.setup import build_resolver

    pods = build_resolver(ProcFs(settings.procfs), settings.kubernetes_api, settings.pod_resources_socket,
                          settings.node_name)
    nvml = NvmlBackend(procfs_root=settings.procfs, gpu_timeout=settings.gpu_timeout,
                       identifier=Identifier(settings.workload_rules, pods=pods))
    return ChosenBackend(settings.backend, nvml, options)

