"""Settings for ``exporter serve``/``snapshot``: defaults, YAML config file, flags.

Precedence: built-in defaults < config file < command-line flags. The config file
uses the long flag names with ``_`` for ``-`` (``log_level: debug``). Every bad value,
from a flag or from the file, becomes a one-line :class:`UserError` naming the file
and key (or the flag) and the problem.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping

from exporter.errors import UserError
from exporter.foresight.workload import parse_rules
from exporter.inputs import load_yaml_file
from exporter.shipped import shipped_scenarios

# Outside 9100-9999 on purpose: that range of Prometheus's default-port-allocations
# wiki is fully allocated (see docs/configuration.md for the reasoning).
DEFAULT_PORT = 18474

BACKENDS = ("auto", "nvml", "dcgm")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
PROCESS_SERIES = ("pid", "pod", "workload")  # see docs/metrics.md, "Process series and cardinality"


@dataclass(frozen=True)
class Settings:
    """Validated settings; units are seconds (interval, gpu_timeout) and a factor (speed)."""

    listen: str = f":{DEFAULT_PORT}"
    interval: float = 1.0
    backend: str = "auto"
    simulate: str | None = None
    speed: float = 1.0
    log_level: str = "info"
    log_format: str = "text"
    procfs: str = "/proc"
    gpu_timeout: float = 2.0
    state_dir: str | None = None  # learned workload profiles (SQLite); None = in memory only
    workload_rules: tuple = ()  # foresight.workload.WorkloadRule; config file only
    dcgm_address: str | None = None  # nv-hostengine, "tcp://host:port" or "unix:///path"; None = embedded
    dcgm_bindings: str | None = None  # directory of DCGM's Python bindings; None = DCGM's install paths
    dcgm_update_interval: float | None = None  # DCGM's sampling period for our watches; None: derived
    web_config_file: str | None = None  # exporter-toolkit web config (TLS, basic auth); docs/security.md
    web_max_connections: int = 256
    web_read_timeout: float = 10.0  # seconds a client has to send a complete request (and TLS handshake)
    web_idle_timeout: float = 120.0  # seconds a keep-alive connection may sit idle
    redact_patterns: tuple = ()  # extra regular expressions for command-line redaction; config file only
    process_series: str = "pod"  # one series per pid, per pod container, or per workload replica
    kubernetes_api: str = "auto"  # auto (in-cluster when in a pod) | off | URL of the API server
    pod_resources_socket: str = "auto"  # auto (the kubelet's, when present) | off | socket path
    node_name: str | None = None  # whose pods to watch; None = $NODE_NAME
    compat_listen: str | None = None  # second listener serving dcgm-exporter's /metrics; None = off

    @property
    def listen_address(self) -> tuple[str, int]:
        """(host, port); host "" means every interface."""
        return parse_listen(self.listen)


# -- value parsers: raise ValueError with a message that does not name the place -------


def parse_listen(value: Any) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' (every interface) or '[IPv6]:PORT' to (host, port)."""
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"expected HOST:PORT (e.g. :{DEFAULT_PORT} or 127.0.0.1:{DEFAULT_PORT}), got {value!r}")
    host, _, port_text = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write IPv6 addresses in brackets, e.g. [::1]:{DEFAULT_PORT}; got {value!r}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {port_text!r}")
    return host, int(port_text)


def _listen(value: Any) -> str:
    parse_listen(value)
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):  # YAML "yes" is a bool, and bool is an int subclass
        raise ValueError(f"expected {what}, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected {what}, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"expected {what}, got {value!r}")
    return number


MAX_SECONDS = 86400.0  # a day: longer intervals or timeouts are typos, and overflow timer APIs


def _seconds(value: Any) -> float:
    seconds = _number(value, "a positive number of seconds")
    if seconds > MAX_SECONDS:
        raise ValueError(f"expected at most {MAX_SECONDS:g} seconds (a day), got {value!r}")
    return seconds


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a whole number from 1 to 100000, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"expected a whole number from 1 to 100000, got {value!r}") from None
    if not 1 <= number <= 100000:
        raise ValueError(f"expected a whole number from 1 to 100000, got {value!r}")
    return number


def _speed(value: Any) -> float:
    speed = _number(value, "a positive speed factor (1 = real time)")
    if speed > 1e6:
        raise ValueError(f"expected a speed factor of at most 1000000, got {value!r}")
    return speed


def _patterns(raw: Any) -> tuple[str, ...]:
    from exporter.redact import compile_patterns  # validates the regular expressions

    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise ValueError("expected a list of regular expressions (strings)")
    compile_patterns(raw)
    return tuple(raw)


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = value.lower() if isinstance(value, str) else value
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text

    return parse


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a path, got {value!r}")
    return value


DCGM_PORT = 5555  # nv-hostengine's default port


def parse_dcgm_address(value: Any) -> str:
    """nv-hostengine address -> "tcp://host:port" or "unix:///path".

    Accepted: HOST, HOST:PORT, [IPv6]:PORT, tcp://HOST[:PORT], unix:///PATH or an absolute
    socket PATH (nv-hostengine --domain-socket; default /tmp/nv-hostengine).
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected HOST[:PORT] or a unix socket path, got {value!r}")
    text = value.strip()
    if text.startswith("unix://") or text.startswith("/"):
        path = text[len("unix://"):] if text.startswith("unix://") else text
        if not path.startswith("/"):
            raise ValueError(f"a unix socket needs an absolute path (unix:///tmp/nv-hostengine), got {value!r}")
        return "unix://" + path
    if text.startswith("tcp://"):
        text = text[len("tcp://"):]
    if "://" in text:
        raise ValueError(f"expected tcp://HOST[:PORT] or unix:///PATH, got {value!r}")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else (None if not rest else "x")
        host = f"[{host}]"
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"write IPv6 addresses in brackets, e.g. [::1]:{DCGM_PORT}; got {value!r}")
    else:
        host, port_text = text, None
    if not host or host == "[]" or any(c.isspace() for c in host):
        raise ValueError(f"expected HOST[:PORT], got {value!r}")
    port = DCGM_PORT if port_text is None else port_text
    if not str(port).isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port must be a number from 1 to 65535, got {port_text!r}")
    return f"tcp://{host}:{int(port)}"


def _api_url(value: Any) -> str:
    text = value.strip() if isinstance(value, str) else value
    if text in ("auto", "off"):
        return text
    if not isinstance(text, str) or not text.startswith(("http://", "https://")) or len(text.split("//", 1)[1]) < 1:
        raise ValueError(f"expected auto, off or an http(s):// URL of the API server, got {value!r}")
    return text.rstrip("/")


def _socket(value: Any) -> str:
    if value in ("auto", "off"):
        return value
    if not isinstance(value, str) or not os.path.isabs(value):
        raise ValueError(f"expected auto, off or an absolute path of the kubelet's pod-resources socket, got {value!r}")
    return value


def _node_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ValueError(f"expected a node name, got {value!r}")
    return value.strip()


PARSERS: dict[str, Callable[[Any], Any]] = {
    "listen": _listen,
    "interval": _seconds,
    "backend": _choice(BACKENDS),
    "simulate": _path,
    "speed": _speed,
    "log_level": _choice(LOG_LEVELS),
    "log_format": _choice(LOG_FORMATS),
    "procfs": _path,
    "gpu_timeout": _seconds,
    "state_dir": _path,
    "workload_rules": lambda raw: parse_rules(raw, "workload_rules"),
    "dcgm_address": parse_dcgm_address,
    "dcgm_bindings": _path,
    "dcgm_update_interval": _seconds,
    "web_config_file": _path,
    "web_max_connections": _count,
    "web_read_timeout": _seconds,
    "web_idle_timeout": _seconds,
    "redact_patterns": _patterns,
    "process_series": _choice(PROCESS_SERIES),
    "kubernetes_api": _api_url,
    "pod_resources_socket": _socket,
    "node_name": _node_name,
    "compat_listen": _listen,
}
PATH_KEYS = ("simulate", "procfs", "state_dir", "dcgm_bindings", "web_config_file")
assert set(PARSERS) == {f.name for f in fields(Settings)}, "every setting needs a parser"


def flag_type(key: str) -> Callable[[str], Any]:
    """An argparse ``type=`` for setting ``key``; argparse prefixes the flag name to the message."""
    parser = PARSERS[key]

    def convert(text: str) -> Any:
        try:
            return parser(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = key  # argparse shows it in its fallback messages
    return convert


# -- config file ----------------------------------------------------------------------


def read_config_file(path: str) -> dict[str, Any]:
    """Parse and validate a YAML config file into {setting: value}; paths made relative to the file."""
    document = load_yaml_file(path, "config file")
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise UserError(f"{path}: expected a mapping of settings at the top level, got {type(document).__name__}")
    base = os.path.dirname(os.path.abspath(path))
    values: dict[str, Any] = {}
    for key, raw in document.items():
        if key not in PARSERS:
            raise UserError(f"{path}: {key}: {_unknown_key_hint(key)}")
        try:
            value = PARSERS[key](raw)
        except ValueError as exc:
            raise UserError(f"{path}: {key}: {exc}") from None
        except UserError as exc:  # already names the place inside the value
            raise UserError(f"{path}: {exc}") from None
        if key in PATH_KEYS and not os.path.isabs(value):
            joined = os.path.join(base, value)  # relative to the file, not to wherever exporter runs
            # A bare name that is no file next to the config names a shipped scenario (exporter.shipped).
            shipped_name = (key == "simulate" and os.sep not in value and not os.path.exists(joined)
                            and value.removesuffix(".yaml") in shipped_scenarios())
            value = value if shipped_name else joined
        values[key] = value
    return values


def _unknown_key_hint(key: object) -> str:
    known = ", ".join(PARSERS)
    if isinstance(key, str):
        close = difflib.get_close_matches(key.replace("-", "_"), PARSERS, n=1)
        if close:
            return f"unknown setting (did you mean {close[0]}?)"
    return f"unknown setting (known: {known})"


def load_settings(config_path: str | None, overrides: Mapping[str, Any]) -> Settings:
    """Defaults, then the config file (if any), then ``overrides`` (already-parsed flag values)."""
    settings = Settings()
    if config_path is not None:
        settings = replace(settings, **read_config_file(config_path))
    unknown = set(overrides) - set(PARSERS)
    if unknown:
        raise ValueError(f"not settings: {sorted(unknown)}")  # a programming error, not user input
    return replace(settings, **dict(overrides))
