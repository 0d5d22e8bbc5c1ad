"""Reading input files so that every bad byte becomes one line naming the file and the place.

Whatever a file holds (not UTF-8, a YAML or JSON syntax error, nesting thousands of levels
deep, aliases that expand to billions of values, a number with thousands of digits, gigabytes),
the reader raises :class:`~exporter.errors.UserError` with ``<file>: <place>: <problem>``, never
another exception: commands turn it into ``exporter: error: ...`` and exit status 2.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from exporter.errors import UserError

MAX_INPUT_BYTES = 64 << 20  # the largest input (a day of JSON-lines snapshots) is far smaller
MAX_DEPTH = 100  # nesting levels; real files use under 10
MAX_EXPANDED_NODES = 1_000_000  # values after aliases are followed (a "billion laughs" file has 10^9)


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of ``path`` ('-' is not special); UserError for a missing, huge or non-UTF-8 file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UserError(f"{path}: larger than {MAX_INPUT_BYTES >> 20} MiB; not a {what}")
    return decode_utf8(data, path)


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` as text (a UTF-8 byte order mark is dropped); UserError naming the line of a bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserError(f"{source}: line {line}, column {column}: not UTF-8 text "
                        f"(byte 0x{data[exc.start]:02x})") from None


class SafeInputLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing nesting deeper than ``max_depth`` and alias bombs."""

    max_depth = MAX_DEPTH

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                self.too_deep()
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def too_deep(self) -> None:
        """Raise the error of a document nested deeper than ``max_depth`` (before the stack runs out)."""
        mark = self.peek_event().start_mark
        raise yaml.composer.ComposerError(None, None, f"nested more than {self.max_depth} levels deep", mark)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand to more than MAX_EXPANDED_NODES values."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a recursive alias counts once (PyYAML builds a cyclic object)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        total = min(total, MAX_EXPANDED_NODES + 1)
        sizes[id(node)] = total
        return total

    if size(root) > MAX_EXPANDED_NODES:
        raise yaml.composer.ComposerError(None, None, f"aliases expand to more than {MAX_EXPANDED_NODES:,} values",
                                          root.start_mark)


def parse_yaml(text: str, source: str, loader: type[yaml.SafeLoader] = SafeInputLoader) -> Any:
    """One YAML document; UserError ``<source>: line L, column C: <problem>`` when it is not valid."""
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise UserError(f"{source}: not valid YAML{yaml_problem(exc)}") from None
    except RecursionError:
        raise UserError(f"{source}: not valid YAML: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise UserError(f"{source}: not valid YAML: {value_problem(exc)}") from None


class _CNodes(yaml.cyaml.CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """libyaml composes the nodes as well (C), under the loader's Python constructors and resolver.

    Used only after a scan of the events (:func:`_event_shape`) has shown that no node sits deeper
    than the loader's ``max_depth``: libyaml's composer recurses on the C stack (a document nested
    100,000 levels deep crashes the interpreter), the pure loader refuses such a document first.
    The alias check of SafeInputLoader runs on the composed nodes unless the scan saw no alias and
    few enough nodes that it cannot fail."""

    check_expansion = True

    def __init__(self, stream) -> None:
        yaml.cyaml.CParser.__init__(self, stream)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def get_single_node(self):
        node = yaml.cyaml.CParser.get_single_node(self)
        if node is not None and self.check_expansion:
            _check_expansion(node)
        return node


def _event_shape(text: str) -> tuple[int, int, bool]:
    """(deepest node, nodes, whether an alias occurs) of ``text``, from libyaml's events (its
    parser keeps its own stack: no recursion however deep the document)."""
    parser = yaml.cyaml.CParser(text)
    starts, ends = (yaml.SequenceStartEvent, yaml.MappingStartEvent), (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    depth = deepest = nodes = 0
    alias = False
    try:
        while (event := parser.get_event()) is not None:
            kind = type(event)
            if kind in starts:
                depth += 1
                nodes += 1
                deepest = max(deepest, depth)
            elif kind in ends:
                depth -= 1
            elif kind is yaml.ScalarEvent or kind is yaml.AliasEvent:
                nodes += 1
                deepest = max(deepest, depth + 1)
                alias = alias or kind is yaml.AliasEvent
    finally:
        parser.dispose()
    return deepest, nodes, alias


_NODES: dict[tuple[type, bool], type] = {}


def load_fast(text: str, loader: type[SafeInputLoader]) -> Any:
    """``yaml.load(text, Loader=loader)``, read by libyaml when PyYAML has it. Any failure is
    reported by the pure-Python loader, so that errors read exactly as they always have (and a
    text libyaml refuses but PyYAML reads is still read).

    A document no deeper than the loader's ``max_depth`` is composed by libyaml too (_CNodes,
    2x cheaper: the shipped 140 kB scenario 0.12 -> 0.07 s); a deeper one goes to the pure loader,
    which refuses it. Only loaders that add constructors (not methods) to SafeInputLoader qualify:
    the C composer calls no Python composer method."""
    if not getattr(yaml, "__with_libyaml__", False):
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    try:
        yaml.reader.Reader(text)  # the pure Reader's check for non-printable characters, as the pure loader does
        deepest, nodes, alias = _event_shape(text)
        if deepest > loader.max_depth:
            raise ValueError("too deep for libyaml's composer")
        expansion = alias or nodes > MAX_EXPANDED_NODES
        fast = _NODES.get((loader, expansion))
        if fast is None:
            fast = _NODES[(loader, expansion)] = type(f"CNodes{loader.__name__}", (_CNodes,), {
                "check_expansion": expansion, "yaml_constructors": loader.yaml_constructors,
                "yaml_multi_constructors": loader.yaml_multi_constructors,
                "yaml_implicit_resolvers": loader.yaml_implicit_resolvers,
                "yaml_path_resolvers": loader.yaml_path_resolvers})
        return yaml.load(text, Loader=fast)  # noqa: S506 - SafeConstructor with the loader's constructors
    except Exception:  # noqa: BLE001 - the pure loader raises the error the callers know
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass


def yaml_problem(exc: yaml.YAMLError) -> str:
    """' at line L, column C: problem' of a PyYAML error, on one line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {' '.join(str(problem).split())}"


def load_yaml_file(path: str, what: str) -> Any:
    """read_text + parse_yaml."""
    return parse_yaml(read_text(path, what), path)


def parse_json(text: str, source: str) -> Any:
    """One JSON document; UserError ``<source>: line L, column C: <problem>`` when it is not valid."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise UserError(f"{source}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise UserError(f"{source}: not valid JSON: {value_problem(exc)}") from None


def value_problem(exc: ValueError) -> str:
    """A parser's ValueError in words (Python's integer-size guard names a Python setting)."""
    text = " ".join(str(exc).split())
    if "int_max_str_digits" in text or "integer string conversion" in text:
        return "a number with thousands of digits"
    return text
