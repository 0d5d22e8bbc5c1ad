"""Short label values for long workload keys that still say which job it is.

A label is read by people (alerts list the workloads, dashboards show them), so cutting a long
key at a fixed prefix is the wrong cut: ``python3 embed_server.py --model BAAI/bge-large-en-v1.5
...`` kept only ``... --model BAAI/bg``, losing the one thing that told two servers apart.
Here a long key keeps its program (the script, module or subcommand), the values of the flags
that name what it runs (model, task, config, checkpoint) and its device size (``@80GiB``),
eliding the rest with ``…``; a Kubernetes key keeps namespace, owner and container, each cut in
its middle if need be. A ``~`` and 8 hex digits of the key's SHA-1 follow, so two keys that
differ only in what was elided still get different labels. Pure and deterministic: labels are
recomputed from stored keys (exporter.recommend maps them back).
"""

from __future__ import annotations

import hashlib
import re

ELLIPSIS = "…"
HASH_LENGTH = 8
# Flags whose value names what the job runs; earlier entries are kept first when space is short.
NAMING_FLAGS = ("model", "model-name", "model_name", "model_name_or_path", "model-name-or-path", "model-path",
                "model_path", "served-model-name", "task", "config", "config-file", "ckpt_dir", "ckpt-dir",
                "checkpoint")
_INTERPRETER = re.compile(r"(python|pypy)[\d.]*|torchrun|deepspeed|accelerate|uv|bash|sh|node")
_SCRIPT = re.compile(r"[^\s=]+\.(py|sh|js|jl|ipynb)")
_HF_ID = re.compile(r"[\w.-]+/[\w.-]+")  # org/name, as model hubs spell models
_DEVICE_SIZE = re.compile(r"(.*?)(@\d+GiB)", re.S)


def key_digest(key: str) -> str:
    """HASH_LENGTH hex digits of the key's SHA-1: what keeps shortened keys and labels apart."""
    return hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]


def shorten(key: str, limit: int) -> str:
    """``key`` if it is at most ``limit`` characters of single-spaced text, else a readable
    ``<informative part>~<8 hex of sha1(key)>`` of at most ``limit`` characters."""
    cleaned = " ".join(key.split())
    if len(cleaned) <= limit and cleaned == key:
        return key
    digest = key_digest(key)
    budget = limit - HASH_LENGTH - 1
    match = _DEVICE_SIZE.fullmatch(cleaned)
    body, size = (match.group(1), match.group(2)) if match else (cleaned, "")
    room = budget - len(size)
    if room < 8:  # no room worth keeping the size for
        body, size, room = cleaned, "", budget
    if body.startswith("k8s:"):
        text = "k8s:" + "/".join(_fit_parts(body[4:].split("/"), room - 4))
    else:
        text = _command(body, room)
    return f"{text[:room]}{size}~{digest}"


def _command(body: str, room: int) -> str:
    """A command line cut to ``room`` characters, keeping program and naming values."""
    if len(body) <= room:
        return body
    tokens = body.split(" ")
    exe, program, values = _parts(tokens)
    if not values:
        return _elide_end(body, room)
    head = [exe, program] if program else [exe]
    # Ever shorter renderings, first that fits wins: drop the interpreter in front of a script,
    # reduce model paths to their last component, keep fewer values, then cut inside the pieces.
    attempts = [(head, values)]
    if program and _INTERPRETER.fullmatch(exe):
        head = [program]
        attempts.append((head, values))
    values = [v.rsplit("/", 1)[-1] or v for v in values]
    attempts.append((head, values))
    head = [_basename(piece) for piece in head]
    attempts.append((head, values))
    attempts += [(head, values[:n]) for n in range(len(values) - 1, 0, -1)]
    for head_pieces, kept in attempts:
        text = _render(head_pieces, kept)
        if len(text) <= room:
            return text
    pieces = _fit_parts(head + values[:1], room, sep=" ")  # " " joins cost what the rendering costs
    return _render(pieces[:-1], pieces[-1:])


def _basename(piece: str) -> str:
    """The last component of a path (``a/b/train.py`` -> ``train.py``) or of a dotted module name."""
    piece = piece.rsplit("/", 1)[-1] or piece
    if "." in piece and not _SCRIPT.fullmatch(piece):
        piece = piece.rsplit(".", 1)[-1] or piece
    return piece


def _render(head: list[str], values: list[str]) -> str:
    return f"{' '.join(head)}{ELLIPSIS}{' '.join(values)}"


def _parts(tokens: list[str]) -> tuple[str, str, list[str]]:
    """(executable, program, naming values) of a command line's tokens."""
    exe, program, named, positional = tokens[0], "", {}, ""
    python = bool(re.fullmatch(r"(python|pypy)[\d.]*", exe))
    for i, token in enumerate(tokens[1:], start=1):
        previous = tokens[i - 1]
        flag, eq, value = token.lstrip("-").partition("=")
        if previous == "-m" and python and not program:
            program = token
        elif token.startswith("-") and flag in NAMING_FLAGS + ("m",) and eq and value:
            named.setdefault(flag, value)
        elif previous.startswith("-") and previous.lstrip("-") in NAMING_FLAGS + ("m",) and not token.startswith("-"):
            if not (previous == "-m" and python):
                named.setdefault(previous.lstrip("-"), token)
        elif not program and _SCRIPT.fullmatch(token):
            program = token
        elif not token.startswith("-") and not previous.startswith("-"):
            if i == 1 and not program:
                program = token  # a subcommand: vllm serve, accelerate launch
            elif not positional and _HF_ID.fullmatch(token):
                positional = token
    order = {flag: n for n, flag in enumerate(("m",) + NAMING_FLAGS)}
    values = [named[flag] for flag in sorted(named, key=order.__getitem__)]
    if positional and positional not in values:
        values.insert(0, positional)
    return exe, program, values


def _fit_parts(parts: list[str], room: int, sep: str = "/") -> list[str]:
    """``parts`` whose join with ``sep`` fits ``room``: every part longer than the largest common
    length that fits is cut in its middle, so no one part (a namespace, say) is cut to nothing."""
    seps = len(sep) * (len(parts) - 1)
    cap = max(len(part) for part in parts)
    while cap > 3 and sum(min(len(part), cap) for part in parts) + seps > room:
        cap -= 1
    return [_elide_middle(part, cap) for part in parts]


def _elide_middle(text: str, size: int) -> str:
    """``text`` cut to ``size`` characters by replacing its middle with an ellipsis."""
    if len(text) <= size:
        return text
    front = size // 2
    back = size - 1 - front
    return text[:front] + ELLIPSIS + (text[-back:] if back else "")


def _elide_end(text: str, size: int) -> str:
    """``text`` cut to ``size`` characters at the end, the cut marked with an ellipsis."""
    return text if len(text) <= size else text[: size - 1] + ELLIPSIS
