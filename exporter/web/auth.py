"""HTTP basic auth against the bcrypt hashes of a web config's ``basic_auth_users``.

A bcrypt check costs tens of milliseconds, so:

- verdicts are cached, keyed by an HMAC (random per-process key) of user, hash and password,
  so the cache holds no password and a scraper with the right credentials pays one bcrypt
  check, then a dictionary lookup per scrape;
- checks run in one worker thread (bcrypt releases the GIL), never on the event loop, and at
  most MAX_PENDING_CHECKS wait: beyond that a request is answered 429 at once, so a password
  guesser cannot queue unbounded work;
- an unknown user is checked against a dummy hash of the same cost as the real ones, and the
  verdict is computed the same way, so timing does not tell which users exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import Counter, OrderedDict
from typing import Mapping

CACHE_SIZE = 256
MAX_PENDING_CHECKS = 8
BCRYPT_MAX_PASSWORD = 72  # bcrypt uses at most 72 bytes of a password (Go truncates the same way)
SLOW_COST = 14  # above this one check takes over a second: worth a warning


def go_bcrypt_cost(hashed: bytes) -> int:
    """The cost of a bcrypt hash as Go's golang.org/x/crypto/bcrypt.Cost reads it.

    This is the check ``promtool check web-config`` applies to every user's hash; it is
    looser than a full parse (it checks the length, the '$' prefix, the version byte and the
    two cost digits). ValueError with Go's reason when it fails.
    """
    if len(hashed) < 59:
        raise ValueError("hashedSecret too short to be a bcrypted password")
    if hashed[0:1] != b"$":
        raise ValueError(f"bcrypt hashes must start with '$', but hashedSecret started with {hashed[0:1]!r}")
    if hashed[1] > ord("2"):
        raise ValueError(f"bcrypt algorithm version {hashed[1:2]!r} requested is newer than current version '2'")
    rest = hashed[4:] if hashed[2:3] != b"$" else hashed[3:]
    digits = rest[0:2].decode("latin-1")
    try:
        cost = _go_atoi(digits)
    except ValueError:
        raise ValueError(f"bcrypt cost {digits!r} is not a number") from None
    if not 4 <= cost <= 31:
        raise ValueError(f"bcrypt cost {cost} is outside the allowed range (4,31)")
    return cost


def _go_atoi(text: str) -> int:
    """strconv.Atoi: optional sign, ASCII digits only."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    return int(text)


def parse_basic(header: str) -> tuple[bytes, bytes] | None:
    """(user, password) of an ``Authorization: Basic`` header, as Go's Request.BasicAuth reads it."""
    if len(header) < 6 or header[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


class BcryptMissing(RuntimeError):
    """basic_auth_users were configured on an install without the bcrypt package."""


def _bcrypt():
    # Imported here, not at the top: `serve` without basic_auth_users must start (and start fast) on an
    # install that lacks bcrypt, as a lent H100's image did (docs/performance.md, "On a real H100").
    try:
        import bcrypt
    except ImportError:
        raise BcryptMissing("basic_auth_users need the bcrypt package, which is not installed "
                            "(pip install bcrypt)") from None
    return bcrypt


class BasicAuth:
    """The users of one config; ``cached`` is the fast path, ``check`` the bcrypt one (thread-safe).
    BcryptMissing when the bcrypt package is not installed."""

    def __init__(self, users: Mapping[str, str]) -> None:
        bcrypt = self._bcrypt = _bcrypt()
        self._users = {name.encode("utf-8", "surrogateescape"): hashed.encode("utf-8", "surrogateescape")
                       for name, hashed in users.items()}
        self._key = os.urandom(32)
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        costs = Counter(_cost_or_none(h) for h in self._users.values())
        costs.pop(None, None)
        self.cost = min(costs.most_common(1)[0][0] if costs else 10, SLOW_COST + 1)
        self._dummy = bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(rounds=self.cost))

    def __repr__(self) -> str:
        return f"BasicAuth({len(self._users)} users)"

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    @property
    def user_count(self) -> int:
        return len(self._users)

    @property
    def slow_users(self) -> int:
        """Users whose hash cost makes one check take over a second."""
        return sum(1 for h in self._users.values() if (_cost_or_none(h) or 0) > SLOW_COST)

    def _cache_key(self, user: bytes, password: bytes) -> bytes:
        hashed = self._users.get(user, b"")
        message = b"\0".join((user, hashed, password))
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def cached(self, user: bytes, password: bytes) -> bool | None:
        """The remembered verdict for these credentials, or None when a bcrypt check is needed."""
        key = self._cache_key(user, password)
        verdict = self._cache.get(key)
        if verdict is not None:
            try:
                self._cache.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
        return verdict

    def check(self, user: bytes, password: bytes) -> bool:
        """Run bcrypt (slow: call it off the event loop) and remember the verdict."""
        known = user in self._users
        hashed = self._users.get(user, self._dummy)
        try:
            matches = self._bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD], hashed)
        except ValueError:  # a hash Go's cost check lets through but that is not valid bcrypt
            matches = False
        verdict = hmac.compare_digest(b"\1" if matches and known else b"\0", b"\1")
        key = self._cache_key(user, password)
        self._cache[key] = verdict
        while len(self._cache) > CACHE_SIZE:
            try:
                self._cache.popitem(last=False)
            except KeyError:
                break
        return verdict


def _cost_or_none(hashed: bytes) -> int | None:
    try:
        return go_bcrypt_cost(hashed)
    except ValueError:
        return None
