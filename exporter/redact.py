"""Secrets out of command lines, wherever the exporter shows one (docs/security.md).

A GPU process's command line reaches the snapshot JSON (/api/v1/snapshot, ``exporter
snapshot``), the ``workload`` label (through the workload key), logs and ``exporter
recommend``. It is redacted once, where the backend reads it, and again wherever a workload key
is derived (a snapshot file written by an older exporter may still hold secrets). Replaced by
``***``:

- the value of a flag whose name looks secret: ``--api-key=X``, ``--password X``, ``-token=X``;
- the value of a ``NAME=value`` word whose name looks secret: ``HF_TOKEN=X``, ``DB_PASSWORD=X``,
  and of such a parameter inside a word: ``?token=X&``, ``;password=X``;
- the user information of a URL: ``https://user:pw@host`` -> ``https://***@host``;
- the credentials after ``Bearer`` or ``Authorization: Basic``;
- every match of the extra patterns from the config file (``redact_patterns``); a pattern with
  groups has only its groups replaced.

A name looks secret when one of its words (split at ``-``, ``_``, ``.`` and camelCase) is, or
ends with, key, token, password, passwd, secret or credential(s), or is pwd, pass, auth or
passphrase. ``--max-tokens`` and ``--tokenizer`` are not secret; ``--monkey`` is (false
positives only hide a harmless value).
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

from exporter.errors import UserError

MARK = "***"
_SUFFIXES = ("key", "token", "password", "passwd", "secret", "secrets", "credential", "credentials")
_WORDS = frozenset({"pwd", "pass", "auth", "passphrase", "creds"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s@?#]+)@")
_WHOLE_ASSIGNMENT = re.compile(r"^(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.+)$", re.DOTALL)
_EMBEDDED = re.compile(r"(?P<lead>[?&;,])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>[^&;,\s#]+)")
_AUTH_HEADER = re.compile(r"(?i)(?P<lead>\bbearer\s+|\bauthorization:\s*basic\s+)(?P<value>[^\s'\"]+)")


@functools.lru_cache(maxsize=1024)
def looks_secret(name: str) -> bool:
    """True when a flag or variable name (dashes allowed) names a secret."""
    for word in _WORD_SPLIT.split(name.strip("-")):
        word = word.lower()
        if word and (word in _WORDS or word.endswith(_SUFFIXES)):
            return True
    return False


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", token)


def compile_patterns(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """The extra patterns, compiled; ValueError naming the first bad one."""
    compiled = []
    for i, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"[{i}]: invalid regular expression {pattern!r}: {exc}") from None
    return tuple(compiled)


class Redactor:
    """Redacts command lines with the built-in rules plus ``extra`` regular expressions."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.extra = compile_patterns(extra)
        self.redact = functools.lru_cache(maxsize=4096)(self._redact)  # each command line is seen many times

    def _redact(self, cmdline: str) -> str:
        if not cmdline:
            return cmdline
        text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MARK}@", cmdline)
        text = _AUTH_HEADER.sub(lambda m: f"{m.group('lead')}{MARK}", text)
        text = self._tokens(text)
        for pattern in self.extra:
            text = _apply_extra(pattern, text)
        return text

    @staticmethod
    def _tokens(text: str) -> str:
        secret_next = False  # the previous token was a secret flag without '='

        def one(match: re.Match[str]) -> str:
            nonlocal secret_next
            token = match.group(0)
            if secret_next and not _is_flag(token):
                secret_next = False
                return MARK
            secret_next = False
            whole = _WHOLE_ASSIGNMENT.match(token)
            if whole is not None and looks_secret(whole.group("name")):
                return f"{whole.group('name')}={MARK}"
            if _is_flag(token) and "=" not in token and looks_secret(token):
                secret_next = True
                return token
            return _EMBEDDED.sub(
                lambda m: f"{m.group('lead')}{m.group('name')}={MARK}" if looks_secret(m.group("name")) else m.group(0),
                token)

        return re.sub(r"\S+", one, text)


def _apply_extra(pattern: re.Pattern[str], text: str) -> str:
    if pattern.groups == 0:
        return pattern.sub(MARK, text)

    def groups_only(match: re.Match[str]) -> str:
        out, position = [], match.start()
        for group in range(1, pattern.groups + 1):
            start, end = match.span(group)
            if start < 0 or start < position:
                continue
            out.append(text[position:start] + MARK)
            position = end
        out.append(text[position:match.end()])
        return "".join(out)

    return pattern.sub(groups_only, text)


_current = Redactor()


def configure(extra_patterns: Iterable[str] = ()) -> None:
    """Use the built-in rules plus ``extra_patterns`` from now on (process-wide)."""
    global _current
    try:
        _current = Redactor(extra_patterns)
    except ValueError as exc:
        raise UserError(f"redact_patterns{exc}") from None


def redact_cmdline(cmdline: str) -> str:
    """``cmdline`` with its secrets replaced by ``***`` (see the module docstring)."""
    return _current.redact(cmdline)
