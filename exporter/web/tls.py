"""The ssl.SSLContext a web config's ``tls_server_config`` describes.

Names are Go's (crypto/tls), as exporter-toolkit accepts them; this module maps them to OpenSSL.
Where Python's ssl module cannot do what Go does, the nearest safe behaviour is chosen and
:func:`policy_notes` says so at start (docs/security.md lists the differences):

- a client certificate that is asked for is always verified (Go can ask for one and ignore
  it): RequestClientCert and RequireAnyClientCert verify against client_ca_file when one is
  given, and ask for no certificate when none is;
- curve_preferences: OpenSSL takes one group from Python, so the first one listed is used;
- http2: aiohttp speaks HTTP/1.1 only; the setting is accepted and has no effect.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
import warnings
from dataclasses import dataclass

# Go's tls.CipherSuites() (Go 1.19, as in promtool 2.42) -> OpenSSL name. TLS 1.3 suites are
# listed by Go but not configurable (in Go either): None.
GO_CIPHERS: dict[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}
GO_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# client_auth_type as written -> canonical name ("RequireClientCert" is the old alias).
CLIENT_AUTH_TYPES = {
    "": "NoClientCert",
    "NoClientCert": "NoClientCert",
    "RequestClientCert": "RequestClientCert",
    "RequireAnyClientCert": "RequireAnyClientCert",
    "RequireClientCert": "RequireAnyClientCert",
    "VerifyClientCertIfGiven": "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert": "RequireAndVerifyClientCert",
}
_CERT_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)


class TlsError(ValueError):
    """A TLS setting that cannot be used; ``field`` names it (e.g. key_file)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(problem)


@dataclass(frozen=True)
class TlsSettings:
    """tls_server_config after validation; paths absolute (relative ones resolved against the file)."""

    cert_file: str = ""
    key_file: str = ""
    cert: str = ""  # inline PEM
    key: str = ""  # inline PEM (a secret: never shown)
    client_ca_file: str = ""
    client_ca: str = ""  # inline PEM
    client_auth_type: str = "NoClientCert"  # canonical name
    cipher_suites: tuple[str, ...] = ()
    curve_preferences: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    prefer_server_cipher_suites: bool = True
    client_allowed_sans: tuple[str, ...] | None = None

    def __repr__(self) -> str:  # the inline key must never reach a log line
        return f"TlsSettings(cert_file={self.cert_file!r}, client_auth_type={self.client_auth_type!r})"

    @property
    def has_client_ca(self) -> bool:
        return bool(self.client_ca_file or self.client_ca)

    @property
    def files(self) -> tuple[str, ...]:
        """The files whose change means a reload."""
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


def _refuse_password() -> bytes:
    raise ssl.SSLError("the private key is encrypted; give an unencrypted key, as Go's crypto/tls needs")


def _load_key_pair(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    """Cert and key into ``ctx``; TlsError naming the file or field that is wrong."""
    for field, path in (("cert_file", settings.cert_file), ("key_file", settings.key_file)):
        if path and not os.path.isfile(path):
            reason = "no such file" if not os.path.exists(path) else "not a regular file"
            raise TlsError(field, f"cannot read {path}: {reason}")
        if path and not os.access(path, os.R_OK):
            raise TlsError(field, f"cannot read {path}: permission denied")
    with tempfile.TemporaryDirectory(prefix="gpushare-tls-") as private:  # mode 0700
        cert_path = settings.cert_file or _write(private, "cert.pem", settings.cert)
        key_path = settings.key_file or _write(private, "key.pem", settings.key)
        try:
            ctx.load_cert_chain(cert_path, key_path, password=_refuse_password)
        except (ssl.SSLError, OSError) as exc:
            raise _pair_error(settings, cert_path, key_path, exc) from None


def _pair_error(settings: TlsSettings, cert_path: str, key_path: str, exc: BaseException) -> TlsError:
    """The most precise reason load_cert_chain failed (OpenSSL's own reason is terse)."""
    cert_field = "cert_file" if settings.cert_file else "cert"
    key_field = "key_file" if settings.key_file else "key"
    try:
        with open(cert_path, "rb") as handle:
            cert_data = handle.read()
        with open(key_path, "rb") as handle:
            key_data = handle.read()
    except OSError as read_error:
        return TlsError(cert_field, f"cannot read: {read_error.strerror or read_error}")
    if b"-----BEGIN CERTIFICATE-----" not in cert_data:
        return TlsError(cert_field, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    if not re.search(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----", key_data):
        return TlsError(key_field, "holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)")
    reason = _ssl_reason(exc)
    if "mismatch" in reason or "values" in reason:
        return TlsError(key_field, "the private key does not belong to the certificate")
    return TlsError(cert_field, f"cannot load the certificate and private key: {reason}")


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and reason and reason != "PEM_lib":
        return reason.replace("_", " ").lower()
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(exc))
    return " ".join(text.split()) or type(exc).__name__


def _load_client_cas(ctx: ssl.SSLContext, settings: TlsSettings) -> int:
    """Load the PEM certificates of the client CA; unparsable blocks are skipped, as Go does."""
    if settings.client_ca_file:
        try:
            with open(settings.client_ca_file, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise TlsError("client_ca_file", f"cannot read {settings.client_ca_file}: "
                                             f"{exc.strerror or exc}") from None
    else:
        data = settings.client_ca.encode("utf-8", "surrogateescape")
    loaded = 0
    for block in _CERT_BLOCK.findall(data):
        try:
            ctx.load_verify_locations(cadata=block.decode("ascii"))
            loaded += 1
        except (ssl.SSLError, ValueError, UnicodeDecodeError):
            continue
    return loaded


def verify_mode(settings: TlsSettings) -> ssl.VerifyMode:
    """How client certificates are asked for (see the module docstring for the non-Go cases)."""
    auth = settings.client_auth_type
    if auth in ("RequireAndVerifyClientCert",):
        return ssl.CERT_REQUIRED
    if auth == "VerifyClientCertIfGiven":
        return ssl.CERT_OPTIONAL
    if auth == "RequireAnyClientCert" and settings.has_client_ca:
        return ssl.CERT_REQUIRED
    if auth == "RequestClientCert" and settings.has_client_ca:
        return ssl.CERT_OPTIONAL
    return ssl.CERT_NONE


def build_context(settings: TlsSettings) -> tuple[ssl.SSLContext, list[str]]:
    """A server SSLContext for ``settings`` and the notes for the log (see policy_notes).

    TlsError when a file or setting cannot be used.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    _load_key_pair(ctx, settings)
    apply_policy(ctx, settings)
    notes = policy_notes(settings)
    if settings.has_client_ca:  # with a CA every client_auth_type verifies (NoClientCert is refused)
        if _load_client_cas(ctx, settings) == 0:
            notes.append("the client CA holds no usable certificate: every client certificate is refused")
    elif verify_mode(settings) != ssl.CERT_NONE:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go verifies against the system roots
    return ctx, notes


def apply_policy(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    """Versions, ciphers, curve, cipher order and client-certificate mode, set on ``ctx``.

    Separate from the key material because these are copied into each connection when it
    is accepted, so a reload must set them on the listening context itself.
    """
    with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated in Python; the config may still ask
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = GO_VERSIONS[settings.min_version]
        ctx.maximum_version = GO_VERSIONS[settings.max_version]
    if settings.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [GO_CIPHERS[name] for name in settings.cipher_suites if GO_CIPHERS[name]]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsError("cipher_suites", "none of these cipher suites is available in this OpenSSL") from None
    elif settings.cipher_suites and ctx.minimum_version < ssl.TLSVersion.TLSv1_3:
        # Only TLS 1.3 suites listed: Go then has no TLS 1.2 suite to offer either.
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if settings.curve_preferences:
        try:
            ctx.set_ecdh_curve(GO_CURVES[settings.curve_preferences[0]])
        except (ValueError, ssl.SSLError):
            raise TlsError("curve_preferences", f"{settings.curve_preferences[0]} is not available "
                                                "in this OpenSSL") from None
    ctx.verify_mode = verify_mode(settings)


def policy_notes(settings: TlsSettings) -> list[str]:
    """One line per setting that behaves differently from Go's exporter-toolkit (for the log)."""
    notes = []
    auth = settings.client_auth_type
    if auth in ("RequestClientCert", "RequireAnyClientCert"):
        if settings.has_client_ca:
            notes.append(f"client_auth_type {auth}: client certificates are verified against the client CA "
                         "(Python's ssl module cannot accept a certificate it does not verify)")
        else:
            notes.append(f"client_auth_type {auth} without a client CA authenticates nobody; no client "
                         "certificate is asked for (use RequireAndVerifyClientCert with client_ca_file)")
    if len(settings.curve_preferences) > 1:
        notes.append(f"curve_preferences: only the first, {settings.curve_preferences[0]}, is used")
    if GO_VERSIONS[settings.min_version] > GO_VERSIONS[settings.max_version]:
        notes.append(f"min_version {settings.min_version} is above max_version {settings.max_version}: "
                     "every TLS handshake will fail")
    return notes
