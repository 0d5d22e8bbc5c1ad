"""--web.config.file: accepted and refused exactly as the real `promtool check web-config` does.

Every case (hand-written and hypothesis-generated) is written to a file and given both to
exporter.web.config.load_web_config and to promtool; the verdicts must agree. Refusals are one
line naming the file. Keys that exporter-toolkit added after the promtool installed here
(Debian 12's 2.42, toolkit 0.8: inline cert/key/client_ca, client_allowed_sans, rate_limit)
are tested on their own: accepted here as the current toolkit accepts them.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.errors import UserError
from exporter.web.config import WebConfigError, load_web_config
from exporter.web.tls import GO_CIPHERS
from webcerts import HASH, Pki

_counter = itertools.count()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def promtool_verdicts(promtool: str, paths: list[Path]) -> dict[str, bool]:
    """path -> True (SUCCESS) / False (FAILED), from one promtool run over every file."""
    result = subprocess.run([promtool, "check", "web-config", *map(str, paths)], capture_output=True, text=True,
                            timeout=60)
    verdicts = {}
    for line in (result.stdout + result.stderr).splitlines():
        for path in paths:
            if line.startswith(f"{path} SUCCESS"):
                verdicts[str(path)] = True
            elif line.startswith(f"{path} FAILED"):
                verdicts[str(path)] = False
    assert set(verdicts) == set(map(str, paths)), result.stdout + result.stderr
    return verdicts


def ours(path: Path) -> bool:
    try:
        load_web_config(str(path))
        return True
    except WebConfigError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        return False


def write(pki: Pki, content: str | bytes) -> Path:
    path = pki.dir / f"case-{next(_counter)}.yml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


TLS = "tls_server_config: {cert_file: server.crt, key_file: server.key"
CASES = [
    "", "{}", "~", "null", "[]", "foo", "\t{}", "'': 1", "x: 1", "!!binary YQ==",
    "{}\n---\nfoo: 1", "{}\n---\n[",
    TLS + "}", TLS + ", client_auth_type: RequireAndVerifyClientCert, client_ca_file: ca.crt}",
    TLS + ", client_ca_file: ca.crt}",  # a CA without a client auth policy
    TLS + ", client_auth_type: NoClientCert, client_ca_file: ca.crt}",
    TLS + ", client_auth_type: RequireClientCert}", TLS + ", client_auth_type: RequireAnyClientCert}",
    TLS + ", client_auth_type: RequestClientCert}", TLS + ", client_auth_type: VerifyClientCertIfGiven}",
    TLS + ", client_auth_type: RequireAndVerifyClientCert}", TLS + ", client_auth_type: Bogus}",
    TLS + ", client_auth_type: requireandverifyclientcert}", TLS + ", client_auth_type: null}",
    TLS + ", client_auth_type: RequireAndVerifyClientCert, client_ca_file: garbage.pem}",
    TLS + ", client_auth_type: RequireAndVerifyClientCert, client_ca_file: missing.pem}",
    TLS + ", min_version: TLS10, max_version: TLS11}", TLS + ", min_version: TLS14}", TLS + ", min_version: ''}",
    TLS + ", min_version: null}", TLS + ", min_version: 12}", TLS + ", max_version: TLS13, min_version: TLS13}",
    TLS + ", cipher_suites: [TLS_AES_128_GCM_SHA256]}", TLS + ", cipher_suites: TLS_AES_128_GCM_SHA256}",
    TLS + ", cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]}", TLS + ", cipher_suites: [null]}",
    TLS + f", cipher_suites: [{', '.join(GO_CIPHERS)}]}}",
    TLS + ", curve_preferences: [CurveP256, CurveP384, CurveP521, X25519]}", TLS + ", curve_preferences: [X448]}",
    TLS + ", prefer_server_cipher_suites: false}", TLS + ", prefer_server_cipher_suites: 'false'}",
    TLS + ", prefer_server_cipher_suites: n}", TLS + ", prefer_server_cipher_suites: 0}",
    TLS + ", unknown: 1}", TLS + ", cert_file: server.crt}",
    "tls_server_config: {cert_file: server.crt}", "tls_server_config: {key_file: server.key}",
    "tls_server_config: {client_auth_type: RequireClientCert}", "tls_server_config: {client_ca_file: ca.crt}",
    "tls_server_config: {cert_file: server.key, key_file: server.key}",
    "tls_server_config: {cert_file: server.crt, key_file: server.crt}",
    "tls_server_config: {cert_file: server.crt, key_file: mismatch.key}",
    "tls_server_config: {cert_file: missing.crt, key_file: server.key}",
    "tls_server_config: {cert_file: garbage.pem, key_file: server.key}",
    "tls_server_config: {cert_file: [a]}", "tls_server_config: {cert_file: 123}", "tls_server_config: foo",
    "tls_server_config:", "tls_server_config: null", "tls_server_config: {min_version: TLS12}",
    "tls_server_config:\n  <<: {cert_file: server.crt, key_file: server.key}",
    "x: &a {cert_file: server.crt, key_file: server.key}\ntls_server_config: *a",
    "http_server_config: {http2: false}", "http_server_config: {http2: y}", "http_server_config: {http2: 'true'}",
    "http_server_config: {http2: 1}", "http_server_config: {headers: null}",
    "http_server_config: {headers: {X-Frame-Options: deny, X-Content-Type-Options: nosniff}}",
    "http_server_config: {headers: {X-Frame-Options: DENY}}", "http_server_config: {headers: {X-Foo: bar}}",
    "http_server_config: {headers: {Strict-Transport-Security: max-age=31536000}}",
    "http_server_config: {headers: {Content-Security-Policy: \"default-src 'self'\", X-XSS-Protection: '1'}}",
    "http_server_config: {headers: {X-Frame-Options: null}}", "http_server_config: {headers: {x-frame-options: deny}}",
    "http_server_config: {headers: [a]}", "http_server_config: {foo: 1}",
    f"basic_auth_users: {{alice: '{HASH}'}}", f"basic_auth_users: {{1: '{HASH}'}}", "basic_auth_users: {a: notbcrypt}",
    "basic_auth_users: {a: null}", "basic_auth_users: null", "basic_auth_users: []",
    "basic_auth_users: {a: '$2y$03$" + "a" * 53 + "'}", "basic_auth_users: {a: '$2y$32$" + "a" * 53 + "'}",
    "basic_auth_users: {a: '$3a$10$" + "a" * 53 + "'}", "basic_auth_users: {a: '$1$10$" + "a" * 54 + "'}",
    "basic_auth_users: {a: 'x2y$10$" + "a" * 53 + "'}", "basic_auth_users: {a: '$2y$1x$" + "a" * 53 + "'}",
    "basic_auth_users: {a: '$2y$10$" + "a" * 51 + "'}",
    f"basic_auth_users: {{alice: '{HASH}'}}\nbasic_auth_users: {{bob: '{HASH}'}}",
    f"basic_auth_users:\n  a: '{HASH}'\n  a: '{HASH}'",
    "!", "! x", "!!str", "!!null", "!foo", "!foo {}", "tls_server_config: !foo {}", "tls_server_config: !!str",
    "tls_server_config: !!null", "http_server_config: {http2: !!bool true}", "http_server_config: {http2: !!str true}",
    b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00\n\x00", b"{}\xff\n", b"# \xff\n{}\n",
]


def test_every_case_gets_promtools_verdict(pki, promtool):
    """Each hand-written case is accepted or refused as promtool decides, with one line naming the file."""
    paths = [write(pki, case) for case in CASES]
    verdicts = promtool_verdicts(promtool, paths)
    mismatches = {Path(p).read_bytes(): v for p, v in verdicts.items() if ours(Path(p)) != v}
    assert mismatches == {}
    assert any(verdicts.values()) and not all(verdicts.values())  # the corpus has both kinds


_file = st.sampled_from(["server.crt", "server.key", "ca.crt", "garbage.pem", "missing.pem", "mismatch.key", "", 7])
_scalar = st.one_of(st.sampled_from(["", "yes", "true", "y", "null", "0", "TLS12"]), st.integers(-2, 20), st.none())
_tls = st.fixed_dictionaries({}, optional={
    "cert_file": _file, "key_file": _file, "client_ca_file": _file,
    "client_auth_type": st.sampled_from(["", "NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                                         "RequireClientCert", "VerifyClientCertIfGiven",
                                         "RequireAndVerifyClientCert", "Verify", None]),
    "min_version": st.sampled_from(["TLS10", "TLS11", "TLS12", "TLS13", "TLS14", "", None]),
    "max_version": st.sampled_from(["TLS12", "TLS13", "ssl3", None]),
    "cipher_suites": st.one_of(st.lists(st.sampled_from(list(GO_CIPHERS) + ["TLS_RSA_WITH_3DES_EDE_CBC_SHA", "x"]),
                                        max_size=3), st.sampled_from(["TLS_AES_128_GCM_SHA256", None])),
    "curve_preferences": st.lists(st.sampled_from(["CurveP256", "CurveP384", "CurveP521", "X25519", "X448"]),
                                  max_size=3),
    "prefer_server_cipher_suites": st.one_of(st.booleans(), _scalar),
    "junk": _scalar,
})
_headers = st.dictionaries(
    st.sampled_from(["X-Frame-Options", "X-Content-Type-Options", "Strict-Transport-Security", "X-XSS-Protection",
                     "Content-Security-Policy", "X-Powered-By", "x-frame-options"]),
    st.one_of(st.sampled_from(["deny", "sameorigin", "nosniff", "DENY", "max-age=1", ""]), st.none()), max_size=3)
_http = st.fixed_dictionaries({}, optional={"http2": st.one_of(st.booleans(), _scalar), "headers": _headers,
                                             "other": _scalar})
_hash = st.sampled_from([HASH, "notbcrypt", None, "$2y$03$" + "a" * 53, "$2b$04$" + "b" * 53, "$9y$10$" + "c" * 53,
                         "$2y$99$" + "d" * 53, "$2$05$" + "e" * 54])
_config = st.fixed_dictionaries({}, optional={
    "tls_server_config": st.one_of(_tls, _scalar),
    "http_server_config": st.one_of(_http, _scalar),
    "basic_auth_users": st.one_of(st.dictionaries(st.sampled_from(["alice", "bob", "1", ""]), _hash, max_size=2),
                                  _scalar),
    "extra_key": _scalar,
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.lists(_config, min_size=20, max_size=20))
def test_generated_configs_get_promtools_verdict(pki, promtool, config):
    """Generated files (valid and broken in every field) are judged as promtool judges them."""
    paths = [write(pki, yaml.safe_dump(c, default_flow_style=False)) for c in config]
    verdicts = promtool_verdicts(promtool, paths)
    for path in paths:
        assert ours(path) == verdicts[str(path)], path.read_text()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blobs=st.lists(st.binary(max_size=60), min_size=10, max_size=10))
def test_random_bytes_get_promtools_verdict(pki, promtool, blobs):
    """Random bytes: refused (or accepted) as promtool does; never anything but a one-line error."""
    paths = [write(pki, blob) for blob in blobs]
    verdicts = promtool_verdicts(promtool, paths)
    for path in paths:
        assert ours(path) == verdicts[str(path)], path.read_bytes()


def test_newer_toolkit_keys_are_accepted(pki):
    """Inline PEM, client_allowed_sans and rate_limit (exporter-toolkit 0.10-0.15) work here."""
    cert = Path(pki.path("server.crt")).read_text()
    key = Path(pki.path("server.key")).read_text()
    ca = Path(pki.path("ca.crt")).read_text()
    doc = {"tls_server_config": {"cert": cert, "key": key, "client_ca": ca,
                                 "client_auth_type": "RequireAndVerifyClientCert",
                                 "client_allowed_sans": ["client.example"]},
           "rate_limit": {"interval": "100ms", "burst": 5}}
    config = load_web_config(str(write(pki, yaml.safe_dump(doc))))
    assert config.tls.client_allowed_sans == ("client.example",)
    assert config.rate_interval == pytest.approx(0.1) and config.rate_burst == 5
    assert "BEGIN" not in repr(config) and "BEGIN" not in repr(config.tls)  # the inline key is never shown


def test_error_names_file_field_and_line(pki):
    """A refusal says which file, which field and which line."""
    path = write(pki, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS9\n")
    with pytest.raises(UserError) as caught:
        load_web_config(str(path))
    assert str(caught.value) == (f"{path}: line 4: tls_server_config.min_version: unknown TLS version 'TLS9' "
                                 "(known: TLS10, TLS11, TLS12, TLS13)")


def test_relative_paths_are_relative_to_the_file(pki, tmp_path, monkeypatch):
    """cert_file: server.crt means the file next to the config, wherever the exporter runs."""
    path = write(pki, TLS + "}")
    monkeypatch.chdir(tmp_path)
    assert load_web_config(str(path)).tls.cert_file == pki.path("server.crt")


def test_users_hashes_are_never_shown(pki):
    """The repr of a config (what a log line or traceback could show) holds no hash."""
    config = load_web_config(str(write(pki, f"basic_auth_users: {{alice: '{HASH}'}}")))
    assert HASH not in repr(config) and HASH[7:] not in repr(config.auth)


def test_deep_nesting_and_huge_files_are_one_line(pki):
    """Nesting thousands deep or a file of many megabytes is refused in one line, not a crash."""
    deep = write(pki, "basic_auth_users: " + "[" * 5000 + "]" * 5000)
    huge = write(pki, b"#" * (5 << 20))
    for path in (deep, huge):
        with pytest.raises(WebConfigError) as caught:
            load_web_config(str(path))
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_without_bcrypt_only_basic_auth_is_refused(pki, monkeypatch):
    """An install without bcrypt (a GPU image had none) still serves: only basic_auth_users need it, and
    asking for them there is one line naming the file and the missing package, not an import traceback."""
    monkeypatch.setitem(sys.modules, "bcrypt", None)  # `import bcrypt` now raises ImportError
    assert load_web_config(str(write(pki, TLS + "}"))).auth is None
    path = write(pki, f"basic_auth_users: {{alice: '{HASH}'}}")
    with pytest.raises(WebConfigError) as caught:
        load_web_config(str(path))
    assert str(caught.value) == (f"{path}: basic_auth_users need the bcrypt package, which is not installed "
                                 "(pip install bcrypt)")


def test_serve_starts_without_bcrypt(tmp_path):
    """`exporter serve`'s imports (the web config among them) do not need bcrypt."""
    code = ("import sys; sys.modules['bcrypt'] = None; import exporter.cli, exporter.server, exporter.web.config, "
            "exporter.web.checks; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "ok", done.stderr
