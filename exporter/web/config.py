"""The web config file (``--web.config.file``) in prometheus/exporter-toolkit's format.

Top-level keys: ``tls_server_config``, ``http_server_config``, ``basic_auth_users`` and
``rate_limit`` (docs/security.md). A file is accepted or refused by the rules of
``promtool check web-config`` (exporter-toolkit ``web.Validate``), in its order: strict YAML
(unknown or repeated keys refused) and the response-header rules, then each user's bcrypt
hash, then the TLS settings, whose certificate and key files are read and must form a pair.
Keys added to exporter-toolkit after the promtool of Debian 12 (2.42, toolkit 0.8) are
accepted as the current toolkit (0.17) accepts them: inline ``cert``/``key``/``client_ca``,
``client_allowed_sans`` and ``rate_limit``.

:func:`load_web_config` returns a :class:`WebConfig` with the SSLContext built, or raises
:class:`WebConfigError` whose message is one line naming the file and the field.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter.errors import UserError
from exporter.web import goyaml
from exporter.web.auth import BasicAuth, BcryptMissing, go_bcrypt_cost
from exporter.web.tls import (
    CLIENT_AUTH_TYPES,
    GO_CIPHERS,
    GO_CURVES,
    GO_VERSIONS,
    TlsError,
    TlsSettings,
    build_context,
)

MAX_FILE_BYTES = 4 << 20  # a web config is a few hundred bytes; refuse to read a huge file
# Headers a web config may set, and the values allowed where the header is an enumeration.
ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}


class WebConfigError(UserError):
    """A web config file that cannot be used: one line naming the file and the field."""


def _enum(names, what: str):
    def decode(node, path: str) -> str | None:
        if goyaml.is_null(node):
            return None  # Go leaves the field at its zero value: the default applies
        text = goyaml.string(node, path)
        if text not in names:
            raise goyaml.GoYamlError(path, f"unknown {what} {text!r} (known: {', '.join(names)})", node)
        return text

    return decode


def _duration(node, path: str) -> float:
    """A Go duration ('1s', '1m30s', '250ms') or a whole number of nanoseconds, in seconds."""
    if goyaml.is_null(node):
        return 0.0
    text = goyaml.string(node, path).strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text) / 1e9
    seconds = parse_go_duration(text)
    if seconds is None:
        raise goyaml.GoYamlError(path, f"not a duration: {text!r} (e.g. 1s, 500ms, 1m)", node)
    return seconds


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float | None:
    """Seconds of a Go time.ParseDuration string, or None when it is not one."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-") if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    position, total = 0, 0.0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    return sign * total if body else None


_TLS = goyaml.struct({
    "cert": goyaml.string,
    "key": goyaml.string,
    "client_ca": goyaml.string,
    "cert_file": goyaml.string,
    "key_file": goyaml.string,
    "client_auth_type": goyaml.string,
    "client_ca_file": goyaml.string,
    "cipher_suites": goyaml.list_of(_enum(GO_CIPHERS, "cipher suite")),
    "curve_preferences": goyaml.list_of(_enum(GO_CURVES, "curve")),
    "min_version": _enum(GO_VERSIONS, "TLS version"),
    "max_version": _enum(GO_VERSIONS, "TLS version"),
    "prefer_server_cipher_suites": goyaml.boolean,
    "client_allowed_sans": goyaml.list_of(goyaml.string),
})
_HTTP = goyaml.struct({"http2": goyaml.boolean, "headers": goyaml.string_map})
_RATE = goyaml.struct({"interval": _duration, "burst": goyaml.integer})
_TOP = goyaml.struct({
    "tls_server_config": _TLS,
    "http_server_config": _HTTP,
    "basic_auth_users": goyaml.string_map,
    "rate_limit": _RATE,
})


@dataclass(frozen=True)
class WebConfig:
    """A validated web config. ``ssl_context`` is None without TLS; ``notes`` are log lines
    about settings that behave differently here than in Go (see exporter.web.tls)."""

    path: str
    tls: TlsSettings | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    headers: tuple[tuple[str, str], ...] = ()
    http2: bool = True
    auth: BasicAuth | None = field(default=None, compare=False)
    rate_interval: float = 0.0  # seconds per token; 0 = no rate limit
    rate_burst: int = 0
    notes: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never the users' hashes or an inline key
        return f"WebConfig({self.path!r}, tls={self.tls is not None}, users={self.auth!r})"

    @property
    def files(self) -> tuple[str, ...]:
        """Every file whose change means a reload: the config itself and its TLS files."""
        return (self.path,) + (self.tls.files if self.tls else ())


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise WebConfigError(f"{path}: is a directory, not a web config file") from None
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read web config file: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise WebConfigError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; not a web config file")
    return data


def _decode(path: str, data: bytes) -> dict[str, Any]:
    try:
        node = goyaml.compose_first_document(data)
        return _TOP(node, "") if node is not None else {}
    except goyaml.GoYamlError as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: not valid YAML: {goyaml.yaml_error_line(exc)}") from None


def _join(directory: str, path: str) -> str:
    """Relative paths are relative to the config file's directory (exporter-toolkit's JoinDir)."""
    return path if not path or os.path.isabs(path) else os.path.normpath(os.path.join(directory, path))


def _tls_settings(raw: dict[str, Any], directory: str) -> TlsSettings | None:
    """The TLS settings, or None when the section does not turn TLS on (as in Go)."""
    enabled = any(raw.get(k) for k in ("cert_file", "cert", "key_file", "key", "client_ca_file", "client_ca",
                                       "client_auth_type"))
    if not enabled:
        return None
    if not raw.get("cert_file") and not raw.get("cert"):
        raise TlsError("cert_file", "missing one of cert or cert_file")
    if not raw.get("key_file") and not raw.get("key"):
        raise TlsError("key_file", "missing one of key or key_file")
    auth = raw.get("client_auth_type", "")
    if auth not in CLIENT_AUTH_TYPES:
        raise TlsError("client_auth_type", f"invalid ClientAuth {auth!r} (known: "
                                           f"{', '.join(k for k in CLIENT_AUTH_TYPES if k)})")
    if CLIENT_AUTH_TYPES[auth] == "NoClientCert" and (raw.get("client_ca_file") or raw.get("client_ca")):
        raise TlsError("client_ca_file", "a client CA is configured without a client_auth_type that asks for "
                                         "client certificates (e.g. RequireAndVerifyClientCert)")
    sans = raw.get("client_allowed_sans")
    return TlsSettings(
        cert_file=_join(directory, raw.get("cert_file", "")),
        key_file=_join(directory, raw.get("key_file", "")),
        cert="" if raw.get("cert_file") else raw.get("cert", ""),
        key="" if raw.get("key_file") else raw.get("key", ""),
        client_ca_file=_join(directory, raw.get("client_ca_file", "")),
        client_ca="" if raw.get("client_ca_file") else raw.get("client_ca", ""),
        client_auth_type=CLIENT_AUTH_TYPES[auth],
        cipher_suites=tuple(raw.get("cipher_suites", ())),
        curve_preferences=tuple(raw.get("curve_preferences", ())),
        min_version=raw.get("min_version") or "TLS12",
        max_version=raw.get("max_version") or "TLS13",
        prefer_server_cipher_suites=raw.get("prefer_server_cipher_suites") is not False,
        client_allowed_sans=tuple(sans) if "client_allowed_sans" in raw else None,
    )


def _check_headers(path: str, headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    for name, value in headers.items():
        allowed = ALLOWED_HEADERS.get(name)
        if allowed is None:
            raise WebConfigError(f"{path}: http_server_config.headers.{name}: this header can not be configured "
                                 f"(allowed: {', '.join(ALLOWED_HEADERS)})")
        if allowed and value not in allowed:
            raise WebConfigError(f"{path}: http_server_config.headers.{name}: expected one of "
                                 f"{', '.join(allowed)}, got {value!r}")
    # Go's net/http turns line breaks in a header value into spaces; so do we (aiohttp refuses them).
    return tuple(sorted((name, " ".join(value.splitlines())) for name, value in headers.items()))


def load_web_config(path: str) -> WebConfig:
    """Read and validate ``path``; WebConfigError (one line) when promtool would refuse it."""
    raw = _decode(path, _read(path))
    http = raw.get("http_server_config", {})
    headers = _check_headers(path, http.get("headers", {}))
    users = raw.get("basic_auth_users", {})
    for user, hashed in users.items():
        try:
            go_bcrypt_cost(hashed.encode("utf-8", "surrogateescape"))
        except ValueError as exc:
            raise WebConfigError(f"{path}: basic_auth_users.{user}: not a bcrypt hash: {exc}") from None
    directory = os.path.dirname(path)
    try:
        tls = _tls_settings(raw.get("tls_server_config", {}), directory)
        context, notes = build_context(tls) if tls is not None else (None, [])
    except TlsError as exc:
        raise WebConfigError(f"{path}: tls_server_config.{exc.field}: {exc}") from None
    rate = raw.get("rate_limit", {})
    interval, burst = max(0.0, rate.get("interval", 0.0)), max(0, rate.get("burst") or 0)  # Go: <= 0 = no limit
    try:
        auth = BasicAuth(users) if users else None
    except BcryptMissing as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    if auth is not None and auth.slow_users:
        notes.append(f"{auth.slow_users} user(s) have a bcrypt cost above 14: each first login takes seconds")
    if tls is None and users:
        notes.append("basic auth without TLS: passwords cross the network in clear text")
    return WebConfig(
        path=path, tls=tls, ssl_context=context, headers=headers,
        http2=http.get("http2") is not False, auth=auth,
        rate_interval=interval, rate_burst=burst, notes=tuple(notes),
    )
