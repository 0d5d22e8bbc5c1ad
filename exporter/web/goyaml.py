"""YAML read the way Go's gopkg.in/yaml.v2 ``UnmarshalStrict`` reads it into typed fields.

The web config file is shared with Go tools (``promtool check web-config``, every exporter built
on prometheus/exporter-toolkit), so a file must mean the same here as there. The differences
from PyYAML's ``safe_load`` that matter:

- only the first document of a stream is read; the rest is ignored;
- a string field takes any scalar as its source text (``cert_file: 123`` is the path "123");
- a bool field takes only unquoted YAML 1.1 booleans, including ``y``/``n``;
- null (``~``, ``null``, empty) leaves a field at its zero value;
- unknown fields and keys repeated in one mapping are errors; ``<<`` merges mappings.

Decoders raise :class:`GoYamlError` with the dotted path of the field and its line.
"""

from __future__ import annotations

from typing import Any, Callable

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from exporter.inputs import SafeInputLoader

GO_TRUE = frozenset({"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
GO_FALSE = frozenset({"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
MAX_DEPTH = 64  # far deeper than any valid file (3 levels); Go rejects deeper ones as type errors


class GoYamlError(ValueError):
    """A decoding problem at ``path`` (dotted field path), on ``line`` (1-based) when known."""

    def __init__(self, path: str, problem: str, node: Node | None = None) -> None:
        self.path = path
        self.problem = problem
        self.line = node.start_mark.line + 1 if node is not None and node.start_mark is not None else None
        where = f"line {self.line}: " if self.line else ""
        super().__init__(f"{where}{path + ': ' if path else ''}{problem}")


class _DepthLimitedLoader(SafeInputLoader):
    """The inputs' SafeLoader (depth and alias-expansion limits), failing as a GoYamlError."""

    max_depth = MAX_DEPTH

    def too_deep(self) -> None:
        raise GoYamlError("", f"nested more than {MAX_DEPTH} levels deep", _mark_node(self))

    def compose_scalar_node(self, anchor):  # noqa: D401 - PyYAML hook
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        node.written_tag = event.tag  # PyYAML resolves a bare '!' to null; Go reads it as a tagged string
        return node


def _mark_node(loader: yaml.SafeLoader) -> Node:
    event = loader.peek_event()
    return ScalarNode("", "", event.start_mark, event.end_mark)


def compose_first_document(data: bytes) -> Node | None:
    """The node tree of the first YAML document in ``data`` (None when there is none).

    ``data`` is bytes so that PyYAML detects a UTF-8/UTF-16 byte order mark as Go does;
    invalid UTF-8 raises yaml.reader.ReaderError. Raises yaml.YAMLError or GoYamlError.
    """
    loader = _DepthLimitedLoader(data)
    try:
        if not loader.check_node():
            return None
        return loader.get_node()
    finally:
        loader.dispose()


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """'line L, column C: problem' for a PyYAML error, on one line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc).splitlines()[0]
    if isinstance(exc, yaml.reader.ReaderError):
        return f"byte {exc.position}: not valid {exc.encoding} text ({exc.reason})"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return " ".join(f"{where}{problem}".split())


# -- node kinds ------------------------------------------------------------------------


def is_null(node: Node | None) -> bool:
    """True for an absent value, ``~``, ``null`` (unquoted), ``!!null`` or an empty scalar."""
    if node is None:
        return True
    written = getattr(node, "written_tag", None)
    return isinstance(node, ScalarNode) and node.tag == _NULL_TAG and written in (None, _NULL_TAG)


def _written(node: Node) -> str | None:
    """The tag written in the file ('!!str', '!foo'), None when there was none."""
    return getattr(node, "written_tag", None)


def kind(node: Node) -> str:
    """How an error names what was found: 'a mapping', 'a list', "the string 'x'"."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    text = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    return f"the scalar {text!r}"


def pairs(node: MappingNode, path: str) -> list[tuple[Node, Node, bool]]:
    """(key, value, merged) in document order, ``<<`` merges expanded in place (merged=True)."""
    out: list[tuple[Node, Node, bool]] = []
    for key, value in node.value:
        if isinstance(key, ScalarNode) and key.tag == _MERGE_TAG:
            sources = value.value if isinstance(value, SequenceNode) else [value]
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise GoYamlError(path, f"'<<' must merge a mapping, got {kind(source)}", source)
                out.extend((k, v, True) for k, v, _ in pairs(source, path))
        else:
            out.append((key, value, False))
    return out


# -- typed decoders: each takes (node, path) and returns a Python value ------------------

Decoder = Callable[[Node, str], Any]


def string(node: Node, path: str) -> str:
    """A string field: any scalar's source text; null is ''."""
    if is_null(node):
        return ""
    if not isinstance(node, ScalarNode):
        raise GoYamlError(path, f"expected a string, got {kind(node)}", node)
    return node.value


def boolean(node: Node, path: str) -> bool | None:
    """A bool field: unquoted YAML 1.1 booleans only; None for null (keep the default)."""
    if is_null(node):
        return None
    if isinstance(node, ScalarNode) and node.style is None and _written(node) in (None, _BOOL_TAG):
        if node.value in GO_TRUE:
            return True
        if node.value in GO_FALSE:
            return False
    raise GoYamlError(path, f"expected true or false (unquoted), got {kind(node)}", node)


def integer(node: Node, path: str) -> int | None:
    """An int field: an unquoted whole number; None for null."""
    if is_null(node):
        return None
    if isinstance(node, ScalarNode) and node.style is None and _written(node) in (None, _INT_TAG):
        try:
            return int(node.value.replace("_", ""), 0)
        except ValueError:
            pass
    raise GoYamlError(path, f"expected a whole number, got {kind(node)}", node)


def list_of(element: Decoder) -> Decoder:
    """A list field; null is an empty list; null elements are skipped (Go leaves them zero)."""

    def decode(node: Node, path: str) -> list:
        if is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            raise GoYamlError(path, f"expected a list, got {kind(node)}", node)
        return [element(item, f"{path}[{i}]") for i, item in enumerate(node.value) if not is_null(item)]

    return decode


def string_map(node: Node, path: str) -> dict[str, str]:
    """A map of string to string; a key repeated in one mapping is an error."""
    if is_null(node):
        return {}
    if not isinstance(node, MappingNode):
        raise GoYamlError(path, f"expected a mapping, got {kind(node)}", node)
    out: dict[str, str] = {}
    explicit: set[str] = set()
    for key_node, value_node, merged in pairs(node, path):
        key = string(key_node, f"{path} key")
        if not merged:
            if key in explicit:
                raise GoYamlError(f"{path}.{key}", "key repeated in the mapping", key_node)
            explicit.add(key)
        out[key] = string(value_node, f"{path}.{key}")
    return out


def struct(fields: dict[str, Decoder]) -> Decoder:
    """A struct: a mapping whose keys must be among ``fields``; null gives {} (all defaults)."""

    def decode(node: Node, path: str) -> dict[str, Any]:
        if is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            raise GoYamlError(path, f"expected a mapping, got {kind(node)}", node)
        out: dict[str, Any] = {}
        explicit: set[str] = set()
        for key_node, value_node, merged in pairs(node, path):
            key = string(key_node, f"{path} key" if path else "key")
            where = f"{path}.{key}" if path else key
            if key not in fields:
                known = ", ".join(fields)
                raise GoYamlError(where, f"unknown field (known: {known})", key_node)
            if not merged:
                if key in explicit:
                    raise GoYamlError(where, "field given twice", key_node)
                explicit.add(key)
            out[key] = fields[key](value_node, where)
        return out

    return decode
