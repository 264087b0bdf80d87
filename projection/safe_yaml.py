"""Bounded YAML/JSON reading for files users hand in (sweep files, model configs, profiles).

YAML anchors and aliases let a 673-byte file stand for hundreds of megabytes once expanded
("billion laughs"), and deep nesting makes the recursive composer raise ``RecursionError``.
:func:`compose_bounded` reads the node graph with PyYAML's safe loader and walks it with an
explicit stack, counting every node *as expanded* (an alias counts its whole subtree again),
so a file is refused, with the limit it broke, before anything builds or prints its expansion.

Limits (generous for real files: the largest development sweep file is ~85 KB, ~20k nodes):
:data:`MAX_BYTES` 16 MiB of text, :data:`MAX_NODES` 2,000,000 expanded nodes,
:data:`MAX_DEPTH` 64 levels of nesting, :data:`MAX_ALIASES` 10,000 alias uses.

Order of work: the size and a linear scan of flow-bracket depth are checked on the text first; the
node graph is then composed with libyaml's C parser when PyYAML has it (``CSafeLoader``, ~9x faster
than the pure-Python composer on nested text), walked within the limits, and only then constructed.
Refused as well, with the line: duplicate keys in one mapping (YAML says keys are unique; PyYAML
keeps the last silently), and YAML 1.1 numbers a person does not mean: ``0512`` (octal, 330),
``0o17``, ``1:30`` (base 60, 90).
"""

from __future__ import annotations

import json
import math
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_YAML11_SURPRISE = re.compile(r"[-+]?(?:0[0-7_]+|0o[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")
MAX_BYTES = 16 * 1024 * 1024
MAX_NODES = 2_000_000
MAX_DEPTH = 64
MAX_ALIASES = 10_000
UNTRUSTED: ContextVar[bool] = ContextVar("projtune_untrusted_call", default=False)
"""True while serving a remote (MCP) tool call: no user file (model config) is read."""


class YamlLimitError(ValueError):
    """A file beyond the reading limits (size, expanded nodes, depth, aliases); the message names the limit."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


def yaml_problem(err: yaml.YAMLError) -> tuple[int | None, str]:
    """(1-based line, what is wrong) of a YAML parse error: the parser's problem alone, never the file's text
    or its multi-line excerpt (``"mapping values are not allowed here"``, line 2)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or type(err).__name__
    return (mark.line + 1 if mark is not None else None), " ".join(str(problem).split())


def read_text_bounded(path: Path | str, max_bytes: int = MAX_BYTES) -> str:
    """The file's text, refusing files over ``max_bytes`` (checked before reading) and bytes that are not UTF-8
    (a binary file: the message names the offset, never the bytes)."""
    file = Path(path)
    size = file.stat().st_size
    if size > max_bytes:
        raise YamlLimitError(f"file is {size} bytes; at most {max_bytes} are read")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise YamlLimitError(f"not UTF-8 text (byte {err.start} cannot be decoded; a binary file?)") from err


def _check_graph(root: yaml.Node, max_nodes: int, max_depth: int, max_aliases: int) -> None:
    """Walk the node graph as if aliases were expanded; raise at the first limit passed."""
    seen_ids: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    nodes = aliases = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise YamlLimitError(f"more than {max_nodes} values once anchors/aliases are expanded "
                                 "(alias expansion limit)", node.start_mark.line + 1)
        if depth > max_depth:
            raise YamlLimitError(f"nested deeper than {max_depth} levels", node.start_mark.line + 1)
        count = seen_ids.get(id(node), 0) + 1
        seen_ids[id(node)] = count
        if count > 1 and isinstance(node, yaml.CollectionNode):
            aliases += 1
            if aliases > max_aliases:
                raise YamlLimitError(f"more than {max_aliases} alias uses", node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            if count == 1:
                _check_keys(node)
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.ScalarNode) and count == 1 and node.tag in (_INT_TAG, _FLOAT_TAG) \
                and not node.style and _YAML11_SURPRISE.fullmatch(node.value):
            raise YamlLimitError(f"'{node.value[:20]}' is a YAML 1.1 octal or base-60 number (it would load as "
                                 f"{_yaml11_value(node)}); write the decimal number, or quote it for text",
                                 node.start_mark.line + 1)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)


def _check_keys(node: yaml.MappingNode) -> None:
    """Refuse a mapping that gives one scalar key twice (the later value would win silently)."""
    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
            if key.value in seen:
                raise YamlLimitError(f"duplicate key '{key.value[:40]}' (each key once per mapping)",
                                     key.start_mark.line + 1)
            seen.add(key.value)


def _yaml11_value(node: yaml.ScalarNode) -> Any:
    try:
        return yaml.SafeLoader("").construct_object(node)
    except Exception:   # noqa: BLE001 - only shown in the message
        return "something else"


def flow_depth(text: str, opening: str = "[{", closing: str = "]}") -> int:
    """The deepest nesting of brackets (YAML flow ``[``/``{`` by default) in ``text``: one linear pass, quotes not
    parsed (a bracket inside a string counts too, which only makes the bound stricter)."""
    depth = deepest = 0
    for char in text:
        if char in opening:
            depth += 1
            deepest = max(deepest, depth)
        elif char in closing:
            depth = max(0, depth - 1)
    return deepest


def compose_bounded(text: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH,
                    max_aliases: int = MAX_ALIASES) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of one YAML document, read with the safe loader within the limits.

    Raises:
        YamlLimitError: a limit was passed (the message says which).
        yaml.YAMLError: the text is not YAML.
    """
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"text is {len(text)} characters; at most {MAX_BYTES} are read")
    if flow_depth(text) > max_depth:
        raise YamlLimitError(f"nested deeper than {max_depth} levels (flow brackets)")
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except RecursionError as err:
            raise YamlLimitError(f"nested too deeply to read (limit {max_depth} levels)") from err
        if root is None:
            return None, None
        _check_graph(root, max_nodes, max_depth, max_aliases)
        try:
            data = loader.construct_document(root)
        except RecursionError as err:
            raise YamlLimitError(f"nested too deeply to read (limit {max_depth} levels)") from err
    finally:
        loader.dispose()
    return data, root


def load_bounded(text: str) -> Any:
    """The data of one YAML (or JSON, a YAML subset) document within the limits."""
    return compose_bounded(text)[0]


def load_catalog(text: str) -> Any:
    """One YAML document of a catalog file shipped with the package (trusted, small, so no limits): the safe
    loader with libyaml's C parser when PyYAML has it, the data ``yaml.safe_load`` gives.  A cold projection
    reads three catalog files (bands, evidence, framework profile): ~13 ms each with the pure-Python parser,
    ~2 ms with the C one (4 KB files, CPython 3.11)."""
    return yaml.load(text, Loader=_Loader)   # noqa: S506 - _Loader is CSafeLoader or SafeLoader


def load_json_bounded(text: str) -> Any:
    """Strict JSON (no NaN/Infinity) within the size and depth limits."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"text is {len(text)} characters; at most {MAX_BYTES} are read")

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(text, parse_constant=no_constant)
    except RecursionError as err:
        raise YamlLimitError(f"nested too deeply to read (limit {MAX_DEPTH} levels)") from err
    depth_check = [(data, 1)]
    while depth_check:
        value, depth = depth_check.pop()
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            depth_check.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            depth_check.extend((v, depth + 1) for v in value)
    return data


def non_finite_paths(value: Any, prefix: str = "", limit: int = 5) -> list[str]:
    """Dotted paths of float values that are NaN or infinite (at most ``limit``), iteratively."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(value, prefix)]
    while stack and len(found) < limit:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(f"{path or 'value'} = {item}")
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return found
