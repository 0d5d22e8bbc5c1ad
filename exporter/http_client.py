"""GET from secured endpoints (an exporter behind a web config, a Prometheus behind a proxy).

``fetch(url, options)`` does one HTTPS (or HTTP) GET with, as :class:`ClientOptions` asks:
a CA file to trust, a client certificate and key (mTLS), basic auth with the password read from
a file, or a bearer token read from a file. Every failure is a :class:`UserError` of one line
naming the flag (``--from https://node-a:18474: ...``) and what to do about it; a password or
token never appears in a message.

Secrets are read from files, never taken as flag values: a flag value is visible to every
user of the host in the process's command line. A URL's ``user:password@`` is honoured, but
the flags are the way to go.

The flags (``add_client_flags``, ``client_options``) and ``ClientOptions`` live in
exporter.client_flags, which loads no network module; they are importable from here as well.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit, unquote

from exporter.client_flags import DEFAULT_TIMEOUT, ClientOptions, add_client_flags, check_options, client_options
from exporter.errors import UserError

__all__ = ["DEFAULT_TIMEOUT", "MAX_BODY_BYTES", "ClientOptions", "add_client_flags", "check_options", "client_options",
           "fetch", "ssl_context"]

MAX_BODY_BYTES = 256 << 20  # a snapshot of a large node is a few MB; Prometheus answers are bounded too


def _read_secret(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise UserError(f"{flag} {path}: cannot read: {reason}") from None
    if not value:
        raise UserError(f"{flag} {path}: the file is empty")
    if "\n" in value or "\r" in value:
        raise UserError(f"{flag} {path}: must hold a single line")
    return value


def ssl_context(options: ClientOptions) -> ssl.SSLContext:
    """The client SSLContext: the CA to trust, the client certificate; UserError naming a bad file."""
    name = options.flag
    try:
        ctx = ssl.create_default_context(cafile=options.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"{name}-ca-file {options.ca_file}: cannot load CA certificates: {_reason(exc)}") from None
    if options.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if options.cert_file:
        try:
            ctx.load_cert_chain(options.cert_file, options.key_file, password=_no_password)
        except (OSError, ssl.SSLError) as exc:
            raise UserError(f"{name}-cert-file {options.cert_file} / {name}-key-file {options.key_file}: cannot load "
                            f"the client certificate and key: {_reason(exc)}") from None
    return ctx


def _no_password() -> bytes:
    raise ssl.SSLError("the key is encrypted; give an unencrypted key file")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return exc.verify_message or "certificate verify failed"
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and isinstance(reason, str) and reason:
        return reason.replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


def _split_credentials(url: str) -> tuple[str, str | None]:
    """(URL without user:password@, the Authorization value they make or None)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    token = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return urlunsplit(parts._replace(netloc=netloc)), "Basic " + base64.b64encode(token.encode()).decode()


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to the same scheme, host and port: credentials never go elsewhere."""

    def __init__(self, origin: tuple[str, str | None, int | None], flag: str, url: str) -> None:
        self.origin, self.flag, self.url = origin, flag, url

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = urlsplit(newurl)
        if (target.scheme, target.hostname, target.port) != self.origin:
            raise UserError(f"{self.flag} {self.url}: redirected to {target.scheme}://{target.netloc}; not followed "
                            "(give that URL instead)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(url: str, options: ClientOptions | None = None, *, accept: str | None = None,
          max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The body of GET ``url``; UserError (one line naming ``options.flag`` and the URL) on any failure."""
    options = options or ClientOptions()
    check_options(options)
    flag = options.flag
    shown = _split_credentials(url)[0]
    where = f"{flag} {shown}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{where}: expected an http:// or https:// URL")
    target, url_auth = _split_credentials(url)
    headers = {"User-Agent": "gpushare-exporter"}
    if accept:
        headers["Accept"] = accept
    if options.bearer_token_file:
        headers["Authorization"] = "Bearer " + _read_secret(options.bearer_token_file, f"{flag}-bearer-token-file")
    elif options.username:
        password = _read_secret(options.password_file, f"{flag}-password-file") if options.password_file else ""
        token = base64.b64encode(f"{options.username}:{password}".encode()).decode()
        headers["Authorization"] = "Basic " + token
    elif url_auth:
        headers["Authorization"] = url_auth
    handlers = [_SameOriginRedirects((parts.scheme, parts.hostname, parts.port), flag, shown)]
    if parts.scheme == "https":
        handlers.append(urllib.request.HTTPSHandler(context=ssl_context(options)))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(target, headers=headers)
    try:
        with opener.open(request, timeout=options.timeout) as response:
            body = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        detail = _api_error(exc)
        raise UserError(f"{where}: answered HTTP {exc.code} {exc.reason}{detail}{_hint(exc.code, flag)}") from None
    except urllib.error.URLError as exc:
        raise UserError(f"{where}: {_url_error(exc.reason, flag, parts.scheme)}") from None
    except (ssl.SSLError, ConnectionError, socket.timeout, TimeoutError, OSError) as exc:
        raise UserError(f"{where}: {_url_error(exc, flag, parts.scheme)}") from None
    if len(body) > max_bytes:
        raise UserError(f"{where}: answer larger than {max_bytes >> 20} MiB")
    return body


def _api_error(exc: urllib.error.HTTPError) -> str:
    """': <message>' from a Prometheus-style JSON error body ({"error": ...}), else ''."""
    try:
        body = exc.read(65536)
        message = json.loads(body.decode("utf-8")).get("error")
    except (OSError, ValueError, AttributeError, RecursionError):
        return ""
    return f": {' '.join(str(message).split())[:200]}" if message else ""


def _hint(code: int, flag: str) -> str:
    if code == 401:
        return f" (credentials missing or wrong: {flag}-username with {flag}-password-file, or {flag}-bearer-token-file)"
    if code == 403:
        return f" (not allowed: check the client certificate, {flag}-cert-file)"
    return ""


def _url_error(reason: object, flag: str, scheme: str) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"the server's TLS certificate is not trusted: {_reason(reason)} "
                f"(give its CA with {flag}-ca-file)")
    if isinstance(reason, ssl.SSLError):
        text = _reason(reason)
        if "certificate" in text or "alert" in text or "handshake" in text:
            return (f"TLS handshake failed: {text} (the server may want a client certificate: "
                    f"{flag}-cert-file and {flag}-key-file)")
        if "wrong version" in text or "record" in text:
            return f"TLS failed: {text} (is it an http:// endpoint?)"
        return f"TLS failed: {text}"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "no answer in time"
    if isinstance(reason, ConnectionResetError) and scheme == "http":
        return "connection closed without an HTTP answer (if the server speaks TLS, use https://)"
    if isinstance(reason, ConnectionResetError):
        return (f"connection reset during the request (a TLS server refusing the client certificate does this: "
                f"{flag}-cert-file)")
    if isinstance(reason, OSError):
        return f"cannot connect: {reason.strerror or reason}"
    return f"cannot connect: {' '.join(str(reason).split())}"
