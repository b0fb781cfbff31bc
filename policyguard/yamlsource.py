"""YAML loading that remembers where each value came from.

Errors in user files must name the file, line and field, so the loader keeps a
map from each value's path (``("tools", "cancel", "requirements", 0, "id")``)
to its 1-based line, and rejects duplicate keys instead of silently keeping the
last one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ChecklistError

PathKey = tuple[str | int, ...]


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


def load_yaml_text(text: str, file: str = "<string>") -> LocatedYaml:
    """Parse one YAML document, keeping line numbers; a syntax error names its line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ChecklistError(f"invalid YAML: {exc.problem or exc}", file=file, line=line) from exc
    except yaml.YAMLError as exc:
        raise ChecklistError(f"invalid YAML: {exc}", file=file) from exc
    lines: dict[PathKey, int] = {}
    if node is not None:
        _walk(node, (), lines, file)
    return LocatedYaml(data, lines, file)


def load_yaml_file(path: str | Path) -> LocatedYaml:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ChecklistError(f"cannot read file: {exc.strerror}", file=str(path)) from exc
    return load_yaml_text(text, file=str(path))
