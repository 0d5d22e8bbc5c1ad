"""Settings: defaults, YAML config file, flag precedence, one-line errors naming file and key."""

from __future__ import annotations

import os
import re

import pytest

from exporter.config import DEFAULT_PORT, Settings, load_settings, parse_listen
from exporter.errors import UserError


def write(tmp_path, text: str, name: str = "exporter.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults_without_config():
    """With no file and no flags the built-in defaults apply, listening on every interface."""
    settings = load_settings(None, {})
    assert settings == Settings()
    assert settings.listen_address == ("", DEFAULT_PORT)


def test_config_file_values_are_used(tmp_path):
    """Keys are long flag names with underscores; values are validated and converted."""
    path = write(tmp_path, "interval: 2.5\nlog_level: DEBUG\nlisten: 127.0.0.1:9999\nbackend: nvml\n")
    settings = load_settings(path, {})
    assert (settings.interval, settings.log_level, settings.listen, settings.backend) == (
        2.5, "debug", "127.0.0.1:9999", "nvml"
    )


def test_flags_override_config(tmp_path):
    """A flag given on the command line wins over the same key in the file."""
    path = write(tmp_path, "interval: 2.5\nspeed: 10\n")
    settings = load_settings(path, {"interval": 7.0})
    assert settings.interval == 7.0 and settings.speed == 10.0


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    """simulate: scenario.yaml in /etc/x/exporter.yaml means /etc/x/scenario.yaml, wherever we run."""
    sub = tmp_path / "conf"
    sub.mkdir()
    path = write(sub, "simulate: scenario.yaml\nprocfs: /host/proc\n")
    settings = load_settings(path, {})
    assert settings.simulate == os.path.join(str(sub), "scenario.yaml")
    assert settings.procfs == "/host/proc"


def test_unknown_key_names_file_and_key_with_suggestion(tmp_path):
    """A hyphenated key is rejected with the file, the key and the underscore spelling to use."""
    path = write(tmp_path, "log-level: debug\n")
    with pytest.raises(UserError) as err:
        load_settings(path, {})
    message = str(err.value)
    assert message.startswith(f"{path}: log-level: unknown setting") and "log_level" in message


def test_unknown_key_without_close_match_lists_known(tmp_path):
    """A key unlike any setting gets the list of known ones."""
    path = write(tmp_path, "colour: blue\n")
    with pytest.raises(UserError, match=r"colour: unknown setting \(known: listen, interval"):
        load_settings(path, {})


@pytest.mark.parametrize(
    "text, key",
    [
        ("interval: 0\n", "interval"),
        ("interval: -3\n", "interval"),
        ("interval: yes\n", "interval"),
        ("interval: fast\n", "interval"),
        ("speed: .inf\n", "speed"),
        ("backend: cuda\n", "backend"),
        ("log_format: xml\n", "log_format"),
        ("listen: 9100\n", "listen"),
        ("listen: 'host:70000'\n", "listen"),
        ("gpu_timeout: null\n", "gpu_timeout"),
        ("simulate: ''\n", "simulate"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, text, key):
    """Each bad value is a one-line UserError that starts with 'file: key:'."""
    path = write(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_settings(path, {})
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: ") and "\n" not in message


def test_invalid_yaml_names_line(tmp_path):
    """Broken YAML reports the file and the line of the problem."""
    path = write(tmp_path, "interval: 5\nlisten: [unclosed\n")
    with pytest.raises(UserError, match=r"not valid YAML at line \d+"):
        load_settings(path, {})


def test_top_level_must_be_mapping(tmp_path):
    """A YAML list at the top level is rejected."""
    path = write(tmp_path, "- interval\n")
    with pytest.raises(UserError, match="expected a mapping of settings at the top level, got list"):
        load_settings(path, {})


def test_empty_file_means_defaults(tmp_path):
    """An empty config file changes nothing."""
    assert load_settings(write(tmp_path, ""), {}) == Settings()


def test_missing_file(tmp_path):
    """A config path that does not exist is a UserError naming it."""
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match=r"nope.yaml: cannot read config file"):
        load_settings(missing, {})


def test_parse_listen_forms():
    """HOST:PORT, :PORT, bracketed IPv6 and port 0 are accepted."""
    assert parse_listen(":9") == ("", 9)
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8080") == ("::1", 8080)


@pytest.mark.parametrize("bad", ["foo", "1.2.3.4:99999", "::1:80", "host:", "host:-1"])
def test_parse_listen_rejects(bad):
    """Missing port, port out of range and unbracketed IPv6 are refused."""
    with pytest.raises(ValueError):
        parse_listen(bad)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1", "tcp://127.0.0.1:5555"),
    ("dcgm.gpu-operator.svc:5555", "tcp://dcgm.gpu-operator.svc:5555"),
    ("tcp://10.0.0.7:6000", "tcp://10.0.0.7:6000"),
    ("[::1]:5555", "tcp://[::1]:5555"),
    ("[fd00::7]", "tcp://[fd00::7]:5555"),
    ("/tmp/nv-hostengine", "unix:///tmp/nv-hostengine"),
    ("unix:///run/dcgm.sock", "unix:///run/dcgm.sock"),
])
def test_dcgm_address_forms(text, expected):
    """nv-hostengine addresses: host, host:port (5555 by default), IPv6 in brackets, tcp://, a socket path."""
    from exporter.config import parse_dcgm_address

    assert parse_dcgm_address(text) == expected


@pytest.mark.parametrize("bad", ["", "a:b:c", "host:0", "host:99999", "unix://relative", "vsock://3", "ho st"])
def test_dcgm_address_rejects(bad):
    from exporter.config import parse_dcgm_address

    with pytest.raises(ValueError):
        parse_dcgm_address(bad)


def test_dcgm_settings_from_the_config_file(tmp_path):
    """dcgm_address is normalised; dcgm_bindings resolves against the file; a bad address names file and key."""
    config = tmp_path / "c.yaml"
    config.write_text("backend: dcgm\ndcgm_address: 10.1.2.3\ndcgm_bindings: dcgm/python3\n")
    settings = load_settings(str(config), {})
    assert settings.dcgm_address == "tcp://10.1.2.3:5555"
    assert settings.dcgm_bindings == str(tmp_path / "dcgm" / "python3")
    config.write_text("dcgm_address: 'a:b:c'\n")
    with pytest.raises(UserError, match=rf"^{re.escape(str(config))}: dcgm_address: write IPv6 addresses in brackets"):
        load_settings(str(config), {})
