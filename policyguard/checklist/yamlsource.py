"""YAML loading that remembers where each value came from, within documented limits.

Errors in user files must name the file, line and field, so the loader keeps a
map from each value's path (``("tools", "cancel", "requirements", 0, "id")``)
to its 1-based line, and rejects duplicate keys instead of silently keeping the
last one.

A YAML file is input a person (or a generator) wrote, so reading one is bounded
before anything is built from it. One streaming pass over the parser's events
(no recursion, no values built) refuses, naming the file and the line:

* a text longer than :data:`MAX_YAML_CHARS` characters (a file is not read past it);
* collections nested deeper than :data:`MAX_YAML_DEPTH` levels;
* more than :data:`MAX_YAML_ALIASES` aliases (``*name``);
* a document whose aliases would expand to more than :data:`MAX_YAML_NODES`
  values (a "billion laughs" document is a few hundred bytes that expand to
  10**9 values: it is refused at the alias that crosses the limit);
* an alias used inside the collection it names (a recursive document).

Booleans follow YAML 1.2: only ``true`` and ``false`` (any of ``true``,
``True``, ``TRUE``) are booleans. YAML 1.1's ``yes``/``no``/``on``/``off``
stay strings, so ``mutating: off`` is a string the checklist schema refuses,
not a silent ``false``. As in YAML 1.2, ``1e6`` is a number (YAML 1.1 wants
``1.0e+6`` and reads ``1e6`` as a string).

libyaml (``yaml.CSafeLoader``) parses when it is installed and the pure-Python
loader otherwise; both give the same values and the same line numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from policyguard.errors import ChecklistError

PathKey = tuple[str | int, ...]

MAX_YAML_CHARS = 1_000_000
MAX_YAML_DEPTH = 64
MAX_YAML_ALIASES = 1_000
MAX_YAML_NODES = 100_000

_BOOL_TAG = "tag:yaml.org,2002:bool"
_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_FLOAT_TAG = "tag:yaml.org,2002:float"
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$")


def _yaml12_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """PyYAML's implicit resolvers, with YAML 1.2's booleans (true/false) and exponent floats (1e6)."""
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {
        first: [(tag, regexp) for tag, regexp in entries if tag != _BOOL_TAG]
        for first, entries in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }
    for first in "tTfF":
        resolvers.setdefault(first, []).insert(0, (_BOOL_TAG, _YAML12_BOOL))
    for first in "-+0123456789":
        resolvers.setdefault(first, []).append((_FLOAT_TAG, _EXPONENT_FLOAT))
    return resolvers


class _PySafeLoader(yaml.SafeLoader):
    yaml_implicit_resolvers = _yaml12_resolvers()


if getattr(yaml, "__with_libyaml__", False):

    class _CSafeLoader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        yaml_implicit_resolvers = _yaml12_resolvers()

    _Loader: Any = _CSafeLoader
else:  # pragma: no cover - libyaml is optional
    _Loader = _PySafeLoader


class LocatedYaml:
    """A parsed YAML document plus the line of every value in it."""

    def __init__(self, data: Any, lines: dict[PathKey, int], file: str) -> None:
        self.data = data
        self.lines = lines
        self.file = file

    def line_of(self, path: PathKey) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)

    def error(self, message: str, path: PathKey) -> ChecklistError:
        field = ".".join(str(p) for p in path) or None
        return ChecklistError(message, file=self.file, line=self.line_of(path), field=field)


class _Open:
    """A collection being read: its anchor, how many values and levels it expands to so far."""

    __slots__ = ("anchor", "size", "depth")

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.size = 1
        self.depth = 1


def _check_limits(text: str, file: str, loader: Any) -> None:
    """One pass over the events: depth, alias count and expanded size, failing at the offending line."""
    if len(text) > MAX_YAML_CHARS:
        raise ChecklistError(f"file too large: {len(text):,} characters (limit {MAX_YAML_CHARS:,})", file=file)
    expands: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels) it stands for
    open_: list[_Open] = []
    aliases = 0
    total = 0
    for event in yaml.parse(text, Loader=loader):
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        size, depth = 1, 0
        if isinstance(event, yaml.CollectionStartEvent):
            open_.append(_Open(event.anchor))
        elif isinstance(event, yaml.CollectionEndEvent):
            done = open_.pop()
            if done.anchor is not None:
                expands[done.anchor] = (done.size, done.depth)
            size, depth = done.size, done.depth
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise ChecklistError(f"too many aliases: more than {MAX_YAML_ALIASES:,} (limit)", file=file, line=line)
            if any(entry.anchor == event.anchor for entry in open_):
                message = f"recursive alias *{event.anchor}: it is used inside the collection it names"
                raise ChecklistError(message, file=file, line=line)
            size, depth = expands.get(event.anchor or "", (1, 0))  # an undefined alias is the composer's error
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                expands[event.anchor] = (1, 0)
        else:
            continue  # stream and document markers
        if not isinstance(event, yaml.CollectionEndEvent):
            total += size
        if len(open_) + depth > MAX_YAML_DEPTH:
            raise ChecklistError(f"nested too deeply: more than {MAX_YAML_DEPTH} levels", file=file, line=line)
        if total > MAX_YAML_NODES:
            if isinstance(event, yaml.AliasEvent):
                message = (
                    f"too many aliases: *{event.anchor} takes the document past {MAX_YAML_NODES:,} values "
                    "once expanded (limit); write the shared part out or share less"
                )
            else:
                message = f"too many values: more than {MAX_YAML_NODES:,} (limit)"
            raise ChecklistError(message, file=file, line=line)
        if open_ and not isinstance(event, yaml.CollectionStartEvent):
            open_[-1].size += size
            open_[-1].depth = max(open_[-1].depth, depth + 1)


def _walk(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], file: str) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise ChecklistError(
                    f"duplicate key {key!r}",
                    file=file,
                    line=key_node.start_mark.line + 1,
                    field=".".join(str(p) for p in (*path, key)),
                )
            seen.add(key)
            _walk(value_node, (*path, key), lines, file)
            lines[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, file)


def load_yaml_text(text: str, file: str = "<string>", *, loader: Any = None) -> LocatedYaml:
    """Parse one YAML document within the limits, keeping line numbers; an error names its line.

    ``loader`` picks the PyYAML loader class (tests compare libyaml with pure
    Python); by default libyaml when installed. A syntax error found by libyaml
    is described in the pure-Python parser's words, so messages do not depend
    on whether libyaml is installed.
    """
    loader_cls = loader if loader is not None else _Loader
    try:
        return _load(text, file, loader_cls)
    except yaml.YAMLError as exc:
        error = exc
        if loader_cls is not _PySafeLoader and loader is None:
            try:
                _load(text, file, _PySafeLoader)
            except yaml.YAMLError as python_exc:
                error = python_exc
        raise _syntax_error(error, file) from exc


def _load(text: str, file: str, loader_cls: Any) -> LocatedYaml:
    _check_limits(text, file, loader_cls)
    parser = loader_cls(text)
    try:
        node = parser.get_single_node()
        lines: dict[PathKey, int] = {}
        if node is not None:
            _walk(node, (), lines, file)  # before constructing: merge keys (<<) rewrite the nodes
        data = parser.construct_document(node) if node is not None else None
    finally:
        parser.dispose()
    return LocatedYaml(data, lines, file)


def _syntax_error(exc: yaml.YAMLError, file: str) -> ChecklistError:
    if not isinstance(exc, yaml.MarkedYAMLError):
        return ChecklistError(f"invalid YAML: {exc}", file=file)
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    message = exc.problem or str(exc)
    if exc.context and exc.context_mark is not None and exc.problem_mark is not None:
        message = f"{exc.context} at line {exc.context_mark.line + 1}: {message}"
    return ChecklistError(f"invalid YAML: {message}", file=file, line=line)


def load_yaml_file(path: str | Path) -> LocatedYaml:
    """Read and parse a YAML file; a file over the size limit is refused without reading it all."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(4 * MAX_YAML_CHARS + 1)  # UTF-8 takes at most 4 bytes a character
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ChecklistError(f"cannot read file: {exc.strerror}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ChecklistError(f"cannot read file: not UTF-8 ({exc.reason} at byte {exc.start})", file=str(path)) from exc
    if len(raw) > 4 * MAX_YAML_CHARS:
        raise ChecklistError(f"file too large: over {MAX_YAML_CHARS:,} characters (limit)", file=str(path))
    return load_yaml_text(text, file=str(path))
