"""exporter.inputs.load_fast (libyaml scanning and composing, issue 22) reads what the pure loader reads.

Same values for every shipped scenario (and the fast path really is taken for them), and, for the
documents the guards exist for (nesting at and past the limit, aliases, merge keys, duplicate keys, an
alias bomb), the same value or the same error as ``yaml.load(text, Loader=<the loader>)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter import inputs
from exporter.sim.scenario import _StrictLoader

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "examples" / "scenarios").glob("*.yaml"))
BOMB = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(7))


def outcome(load):
    try:
        return ("value", load())
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return (type(exc).__name__, str(exc))


@pytest.fixture
def composed_in_c(monkeypatch):
    """How many documents libyaml composed (the fast path, not the fallback to the pure loader)."""
    calls = []
    original = inputs._CNodes.get_single_node

    def counting(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(inputs._CNodes, "get_single_node", counting)
    return calls


@pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="PyYAML without libyaml")
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_read_the_same_through_libyaml(path, composed_in_c):
    text = path.read_text(encoding="utf-8")
    assert inputs.load_fast(text, _StrictLoader) == yaml.load(text, Loader=_StrictLoader)  # noqa: S506
    assert composed_in_c == [1]


@pytest.mark.parametrize("text", [
    "[" * 99 + "]" * 99,                       # 99 sequences: the innermost node at depth 99
    "[" * 100 + "]" * 100,                     # at the limit
    "[" * 101 + "]" * 101,                     # one past it: the pure loader's error
    "[" * 99 + "x" + "]" * 99,                 # a scalar at depth 100
    "[" * 100 + "x" + "]" * 100,               # a scalar at depth 101
    "x: " + "[" * 5000 + "]" * 5000,           # would overflow libyaml's recursive composer
    "base: &b {p: 1, q: 2}\nuse: {<<: *b, q: 3}\nlist: [*b, *b]\n",
    "a: 1\nb: 2\na: 3\n",                      # duplicate key
    "a: [1, 2\n",                              # syntax error
    "a: *nowhere\n",                           # undefined alias
    "a: \x07\n",                               # a non-printable character
    "",                                        # empty document
    "a: 1\n---\nb: 2\n",                       # two documents
    BOMB,                                      # aliases expanding to 10^8 values
])
def test_same_value_or_same_error_as_the_pure_loader(text):
    fast = outcome(lambda: inputs.load_fast(text, _StrictLoader))
    pure = outcome(lambda: yaml.load(text, Loader=_StrictLoader))  # noqa: S506
    assert fast == pure
