"""``client_allowed_sans``: the client certificate must carry one of the listed subject
alternative names (DNS name, IP address, e-mail address or URI), compared exactly as
exporter-toolkit compares them (IP addresses in their canonical text form)."""

from __future__ import annotations

import ipaddress
from typing import Iterable

_KINDS = {"DNS": "dns", "IP Address": "ip", "email": "email", "URI": "uri"}


def _canonical_ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return text.strip()


def certificate_sans(peercert: dict | None) -> list[str]:
    """The SAN values of a verified peer certificate (SSLSocket.getpeercert() form)."""
    if not peercert:
        return []
    values = []
    for kind, value in peercert.get("subjectAltName", ()):
        if _KINDS.get(kind) == "ip":
            values.append(_canonical_ip(value))
        elif kind in _KINDS:
            values.append(value)
    return values


def san_allowed(peercert: dict | None, allowed: Iterable[str]) -> bool:
    """True when the (verified) client certificate has a SAN in ``allowed``; False without one."""
    wanted = {_canonical_ip(a) if _looks_ip(a) else a for a in allowed}
    return any(value in wanted for value in certificate_sans(peercert))


def _looks_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip())
        return True
    except ValueError:
        return False
