"""Every HTTP request `recommend` makes (--from, --prometheus) goes through :func:`get`.

One place on purpose: TLS options, basic auth and bearer tokens for the exporter and for
Prometheus are wired in here, once, and every input gets them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from exporter.errors import UserError

DEFAULT_TIMEOUT_SECONDS = 60.0
USER_AGENT = "gpushare-exporter-recommend"


def check_url(url: str, flag: str, example: str) -> str:
    """``url`` without a trailing slash; UserError naming ``flag`` unless it is http(s)://host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"{flag} {url}: expected an http(s) URL such as {example}")
    return url.rstrip("/")


def get(url: str, params: dict | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS,
        place: str | None = None) -> bytes:
    """The body of GET ``url``?``params``; UserError (one line, naming ``place``) on any failure.

    An HTTP error status is an error; its body is read for a Prometheus-style
    ``{"error": ...}`` message so the user sees why a query was refused.
    """
    place = place or url
    target = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    request = urllib.request.Request(target, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        detail = _error_detail(exc)
        raise UserError(f"{place}: HTTP {exc.code} {detail or exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UserError(f"{place}: cannot reach {url}: {reason}") from None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read()
    except OSError:
        return ""
    try:
        message = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        return ""
    return " ".join(str(message).split())[:300]
