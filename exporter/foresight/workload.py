"""Workload identity: which runs of a process count as "the same job" for learning.

A workload key is derived per process, first match wins:

1. the configured rule list (``workload_rules`` in the config file), in order;
2. an explicit ``GPUSHARE_WORKLOAD`` environment variable;
3. Kubernetes identity from downward-API variables (``POD_NAMESPACE``, ``POD_NAME``,
   optional ``CONTAINER_NAME``): ``k8s:<namespace>/<owner>/<container>`` where the owner
   is the pod name without the suffixes its controller generated;
4. the command line with secrets redacted (exporter.redact) and volatile parts removed
   (seeds, ports, prompts, output paths, run ids, timestamps, UUIDs), so that two runs of
   one job with a different seed or output file share a key;
5. the executable name, else ``unknown``.

Keys may be long; :func:`workload_label` turns one into a short, stable label value.
"""

from __future__ import annotations

from functools import lru_cache
import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from exporter.errors import UserError
from exporter.foresight.label import key_digest, shorten
from exporter.redact import redact_cmdline

# Flag names (split on "_") whose value changes from run to run of the same job.
VOLATILE_FLAG_WORDS = frozenset(
    {
        "seed", "port", "output", "outputs", "out", "outdir", "outfile", "save", "prompt", "prompts",
        "rank", "log", "logdir", "logs", "tmp", "tmpdir", "timestamp", "uuid", "id", "pid",
        "addr", "nonce", "date", "o",
    }
)
# Whole tokens that are volatile wherever they appear.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"\b[0-9a-fA-F]{12,}\b")
_DATE = re.compile(r"\d{4}-?\d{2}-?\d{2}([T_ -]?\d{2}[:\-]?\d{2}([:\-]?\d{2})?)?")
_EPOCH = re.compile(r"\b1[5-9]\d{8}(\.\d+)?\b")  # Unix seconds 2017..2033
_LONG_NUMBER = re.compile(r"\d{4,}")
_TMP_PATH = re.compile(r"^(/tmp/|/var/tmp/|/dev/shm/)")
# Kubernetes generated name suffixes: ReplicaSet pod-template-hash + pod suffix, Job/DaemonSet
# pod suffix, StatefulSet ordinal. The alphabet is the one Kubernetes uses for random names.
_K8S_RAND = "[bcdfghjklmnpqrstvwxz2456789]"
_K8S_SUFFIXES = (
    re.compile(rf"^(?P<owner>.+)-[0-9a-f]{{6,10}}-{_K8S_RAND}{{5}}$"),  # Deployment
    re.compile(rf"^(?P<owner>.+)-{_K8S_RAND}{{5}}$"),  # Job, DaemonSet, bare ReplicaSet
    re.compile(r"^(?P<owner>.+)-\d+$"),  # StatefulSet ordinal
)
MAX_LABEL_LENGTH = 48
MAX_KEY_LENGTH = 512  # keys are stored; a longer one is cut and made unique with a hash
RULE_FIELDS = ("cmdline", "name", "key")


def _is_volatile_flag(flag: str) -> bool:
    """True when a flag name (without dashes) names a per-run value such as a seed or output."""
    words = re.split(r"[_\-.]", flag.lower())
    return any(word in VOLATILE_FLAG_WORDS for word in words) or flag.lower() in VOLATILE_FLAG_WORDS


def _scrub_token(token: str) -> str:
    """A token with embedded UUIDs, long hex ids, dates and epoch times replaced by '*'.

    In paths, runs of 4 or more digits (ports, job numbers: ``kernel-9005.json``) go too.
    """
    if _TMP_PATH.match(token):
        return "*"
    token = _UUID.sub("*", token)
    token = _HEX.sub("*", token)
    token = _DATE.sub("*", token)
    token = _EPOCH.sub("*", token)
    if "/" in token:
        token = _LONG_NUMBER.sub("*", token)
    return token


def normalize_cmdline(cmdline: str) -> str:
    """The command line with volatile parts removed; "" for an empty command line.

    The executable keeps only its basename (``/opt/venv/bin/python3`` -> ``python3``);
    ``--flag value`` and ``--flag=value`` pairs whose flag names a seed, port, prompt,
    output, log or run id are dropped whole (a separate value runs up to the next flag, as
    quoting is lost when /proc argv is joined by spaces); other tokens keep their text with
    UUIDs, hex ids, dates and epoch timestamps replaced by ``*``.
    """
    cmdline = redact_cmdline(cmdline)  # a key is a label value: never a secret
    try:
        tokens = shlex.split(cmdline)
    except ValueError:  # unbalanced quotes: /proc cmdlines are NUL-split, quotes are literal
        tokens = cmdline.split()
    if not tokens:
        return ""
    out = [tokens[0].rsplit("/", 1)[-1]]
    skipping = False  # inside the value of a volatile flag
    for token in tokens[1:]:
        if _is_flag(token):
            flag, eq, _value = token.lstrip("-").partition("=")
            skipping = _is_volatile_flag(flag) and not eq
            if _is_volatile_flag(flag):
                continue
        elif skipping:
            # /proc/<pid>/cmdline joined by spaces loses quoting, so a prompt is several
            # tokens: everything up to the next flag belongs to the volatile value.
            continue
        out.append(_scrub_token(token))
    return " ".join(out)


def _looks_numeric(token: str) -> bool:
    """True for tokens such as -1 or -0.5 that are values, not flags."""
    return re.fullmatch(r"-\d+(\.\d+)?", token) is not None


def _is_flag(token: str) -> bool:
    """True for an option token (starts with '-' and is not a negative number)."""
    return token.startswith("-") and len(token) > 1 and not _looks_numeric(token)


def kubernetes_owner(pod_name: str) -> str:
    """The controller name a pod name was generated from (``web-7d9f8b6c4-x2k9p`` -> ``web``)."""
    for pattern in _K8S_SUFFIXES:
        match = pattern.match(pod_name)
        if match:
            return match.group("owner")
    return pod_name


@dataclass(frozen=True)
class WorkloadRule:
    """One configured override: when ``pattern`` matches ``field``, the key is ``key`` expanded.

    ``field`` is ``cmdline`` (the raw command line), ``name`` (the executable name) or ``key``
    (the key the built-in derivation produced). ``key`` may use ``\\1`` / ``\\g<name>`` groups.
    """

    pattern: re.Pattern[str]
    key: str
    field: str = "cmdline"

    def apply(self, cmdline: str, name: str, derived: str) -> str | None:
        """The key this rule assigns, or None when it does not match."""
        text = {"cmdline": cmdline, "name": name, "key": derived}[self.field]
        match = self.pattern.search(text)
        if match is None:
            return None
        return match.expand(self.key).strip() or None


def parse_rules(raw: Any, place: str = "config: foresight.workload_rules") -> tuple[WorkloadRule, ...]:
    """Validate a rule list from YAML; raise UserError naming the bad entry.

    Each entry is a mapping ``{match: <regex>, key: <template>, field: cmdline|name|key}``.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UserError(f"{place}: must be a list of rules, got {type(raw).__name__}")
    rules = []
    for i, entry in enumerate(raw):
        where = f"{place}[{i}]"
        if not isinstance(entry, Mapping):
            raise UserError(f"{where}: must be a mapping with 'match' and 'key'")
        unknown = set(entry) - {"match", "key", "field"}
        if unknown:
            raise UserError(f"{where}: unknown field '{sorted(unknown)[0]}' (expected match, key, field)")
        for required in ("match", "key"):
            if not isinstance(entry.get(required), str) or not entry[required]:
                raise UserError(f"{where}.{required}: required non-empty string")
        field = entry.get("field", "cmdline")
        if field not in RULE_FIELDS:
            raise UserError(f"{where}.field: must be one of {', '.join(RULE_FIELDS)}, got {field!r}")
        try:
            pattern = re.compile(entry["match"])
        except re.error as exc:
            raise UserError(f"{where}.match: invalid regular expression: {exc}") from None
        try:  # catch bad group references now rather than on the first matching process
            _check_template(pattern, entry["key"])
        except re.error as exc:
            raise UserError(f"{where}.key: invalid template: {exc}") from None
        rules.append(WorkloadRule(pattern, entry["key"], field))
    return tuple(rules)


def _check_template(pattern: re.Pattern[str], template: str) -> None:
    """Raise re.error when the template refers to a group the pattern does not define."""
    for ref in re.findall(r"\\(\d+)|\\g<(\w+)>", template):
        number, name = ref
        if number and int(number) > pattern.groups:
            raise re.error(f"group \\{number} does not exist in {pattern.pattern!r}")
        if name and not name.isdigit() and name not in pattern.groupindex:
            raise re.error(f"group <{name}> does not exist in {pattern.pattern!r}")
        if name and name.isdigit() and int(name) > pattern.groups:
            raise re.error(f"group <{name}> does not exist in {pattern.pattern!r}")


def workload_key(
    cmdline: str, name: str, environ: Mapping[str, str] | None = None, rules: Iterable[WorkloadRule] = (),
    pod: Any = None,
) -> str:
    """The workload key of one process (see the module docstring for the order).

    ``pod`` (an :class:`exporter.identity.PodRef`, or anything with ``namespace``, ``pod`` and
    ``container``) is the process's pod as resolved from its cgroup; without it the downward-API
    variables in ``environ`` name the pod.
    """
    environ = environ or {}
    cmdline = redact_cmdline(cmdline)  # rules see (and can copy into the key) no secret
    derived = _builtin_key(cmdline, name, environ, pod)
    for rule in rules:
        key = rule.apply(cmdline, name, derived)
        if key is not None:
            return _bounded(key, MAX_KEY_LENGTH)
    return _bounded(derived, MAX_KEY_LENGTH)


def _builtin_key(cmdline: str, name: str, environ: Mapping[str, str], pod: Any = None) -> str:
    """Key from the explicit variable, Kubernetes identity, command line or name, in that order."""
    explicit = environ.get("GPUSHARE_WORKLOAD", "").strip()
    if explicit:
        return explicit
    if pod is not None and pod.namespace and pod.pod:
        namespace, pod_name, container = pod.namespace, pod.pod, pod.container
    else:
        namespace, pod_name = environ.get("POD_NAMESPACE", "").strip(), environ.get("POD_NAME", "").strip()
        container = environ.get("CONTAINER_NAME", "").strip()
    if namespace and pod_name:
        key = f"k8s:{namespace}/{kubernetes_owner(pod_name)}"
        return f"{key}/{container}" if container else key
    normalized = normalize_cmdline(cmdline)
    if normalized:
        return normalized
    return name or "unknown"


@lru_cache(maxsize=4096)  # asked for every process every poll; keys repeat
def profile_key(key: str, capacity_bytes: int | None) -> str:
    """The key profiles are learned under: the workload key plus the size of its device.

    The same command often sizes itself to its device (a batch size, a memory fraction), so
    what it did in a 10 GB MIG instance says little about what it does on an 80 GB GPU:
    ``python3 serve.py@80GiB`` and ``python3 serve.py@10GiB`` are learned separately.
    """
    if not capacity_bytes:
        return key
    return f"{key}@{round(capacity_bytes / 2**30)}GiB"


@lru_cache(maxsize=4096)  # asked for every process every poll; keys repeat
def workload_label(key: str) -> str:
    """A short label value for a key: the key itself if short, else its informative part plus a hash.

    Long keys keep program, model/task/config values and device size, elided with ``…``, then
    ``~<8 hex of sha1(key)>`` (at most 48 characters; exporter.foresight.label), so two keys
    that differ only in what was elided still get different, stable labels.
    """
    return shorten(key, MAX_LABEL_LENGTH)


def _bounded(key: str, limit: int) -> str:
    """``key`` if it is at most ``limit`` characters of single-spaced text, else prefix~hash."""
    cleaned = " ".join(key.split())
    if len(cleaned) <= limit and cleaned == key:
        return key
    digest = key_digest(key)
    return f"{cleaned[: limit - len(digest) - 1]}~{digest}"
