"""Every HTTP request `recommend` makes (--from, --prometheus) goes through :func:`get`.

One place on purpose: TLS options, basic auth and bearer tokens for the exporter and for
Prometheus (``--from-ca-file``, ``--prometheus-bearer-token-file``, ...: exporter.http_client)
are wired in here, once, and every input gets them.
"""

from __future__ import annotations

import dataclasses
import urllib.parse

from exporter.errors import UserError
from exporter.http_client import ClientOptions, fetch

DEFAULT_TIMEOUT_SECONDS = 60.0
_OPTIONS: dict[str, ClientOptions] = {}  # flag -> its TLS / auth options (configure)


def check_url(url: str, flag: str, example: str) -> str:
    """``url`` without a trailing slash; UserError naming ``flag`` unless it is http(s)://host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"{flag} {url}: expected an http(s) URL such as {example}")
    return url.rstrip("/")


def configure(*options: ClientOptions) -> None:
    """Use these TLS / auth options for every request of their flag (``--from``, ``--prometheus``)."""
    for item in options:
        _OPTIONS[item.flag] = item


def get(url: str, params: dict | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS,
        place: str | None = None, accept: str | None = None) -> bytes:
    """The body of GET ``url``?``params``; UserError (one line, naming ``place``) on any failure.

    ``place`` starts with the flag the URL came from (``--from URL``, ``--prometheus URL: query``);
    that flag's TLS and auth options apply. An HTTP error status is an error, with Prometheus's
    ``{"error": ...}`` message when the body has one.
    """
    place = place or url
    flag = place.split(" ", 1)[0] if place.startswith("--") else "--url"
    options = dataclasses.replace(_OPTIONS.get(flag) or ClientOptions(flag=flag), timeout=timeout)
    target = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    try:
        return fetch(target, options, accept=accept)
    except UserError as exc:
        # fetch names "<flag> <url with its query string>: <problem>"; the place reads better.
        problem = str(exc).split(": ", 1)[-1]
        raise UserError(f"{place}: {problem}") from None
