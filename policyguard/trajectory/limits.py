"""Documented limits on what the guard reads, enforced cheaply and failing closed.

Anything a model, a user or a compromised tool can write is bounded here:

* call arguments: at most :data:`MAX_DEPTH` levels of nesting and
  :data:`MAX_NODES` values; numbers must be finite, and integers must fit in
  64 bits (the CEL engine turns larger ones into floats, where ``y + 1 <= y``
  can hold);
* tool results read as facts: at most :data:`MAX_RESULT_CHARS` characters,
  the same depth limit, no ``NaN``/``Infinity`` (Python's ``json`` accepts
  them; JSON does not) and no key named twice in one object.

A call that breaks a limit is blocked; a result that breaks one is not a fact
(so a check that needs it blocks, naming why).
"""

from __future__ import annotations

import math
from typing import Any

from . import strictjson

MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_RESULT_CHARS = 1_000_000
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1


class LimitError(ValueError):
    """A value breaks one of the documented limits; the message says which and where."""


def _reject_constant(name: str) -> Any:
    raise LimitError(f"{name} is not a JSON number")


def loads_json(text: str, *, max_chars: int = MAX_RESULT_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``text`` as strict JSON within the limits; raises :class:`LimitError` or ``ValueError``."""
    if len(text) > max_chars:
        raise LimitError(f"{len(text):,} characters is over the limit of {max_chars:,}")
    try:
        value = strictjson.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise LimitError(f"nested deeper than {max_depth} levels") from exc
    problem = value_problem(value, max_depth=max_depth, max_nodes=None)
    if problem is not None:
        raise LimitError(problem)
    return value


def value_problem(value: Any, *, max_depth: int = MAX_DEPTH, max_nodes: int | None = MAX_NODES) -> str | None:
    """Why ``value`` (plain JSON data) breaks a limit, or None. Iterative: deep input cannot crash it.

    Each value's place is kept as a link to its parent's (``(parent, key, is_index)``), and written out as a
    path (``a.b[0]``) only for the value named in the answer: most values pass.
    """
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    nodes = 0
    while stack:
        item, depth, where = stack.pop()
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            return f"more than {max_nodes:,} values"
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels at {_short(_path(where)) or 'the top'}"
        kind = type(item)
        if kind is str or item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                return f"{_path(where) or 'the value'} is an integer outside the 64-bit range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{_path(where) or 'the value'} is {item!r}, not a finite number"
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{_path(where) or 'the value'} has a non-string key {key!r}"
                stack.append((child, depth + 1, (where, key, False)))
        elif isinstance(item, list | tuple):
            for index, child in enumerate(item):
                stack.append((child, depth + 1, (where, index, True)))
        else:
            return f"{_path(where) or 'the value'} is a {type(item).__name__}, not JSON data"
    return None


def _path(where: Any) -> str:
    """The path of a place :func:`value_problem` linked to its parent: ``""`` for the top, ``a.b[0]`` below."""
    steps: list[tuple[Any, bool]] = []
    while where is not None:
        where, key, is_index = where
        steps.append((key, is_index))
    path = ""
    for key, is_index in reversed(steps):
        path = f"{path}[{key}]" if is_index else (f"{path}.{key}" if path else key)
    return path


def _short(path: str) -> str:
    return path if len(path) <= 60 else path[:57] + "..."


def call_problem(arguments: Any) -> str | None:
    """Why a call's arguments cannot be checked (``"argument 'amount' is nan, ..."``), or None."""
    if not isinstance(arguments, dict):
        return f"arguments must be an object, got {type(arguments).__name__}"
    problem = value_problem(arguments)
    return None if problem is None else f"argument {problem}"


def checked_copy(arguments: Any) -> tuple[dict[str, Any], None] | tuple[None, str]:
    """A private copy of a call's arguments as plain JSON data, or :func:`call_problem`'s reason they break a limit.

    One pass where the executor used three (check, ``copy.deepcopy``, check
    again). The copy holds only plain ``dict``, ``list``, ``str``, ``int``,
    ``float``, ``bool`` and ``None`` (a tuple becomes a list, a dict subclass a
    dict), so nothing the caller keeps a reference to, and no custom copy hook,
    can change what runs after the grant was checked.
    """
    copy = _plain_copy(arguments) if isinstance(arguments, dict) else None
    if copy is not None:
        return copy, None
    return None, call_problem(arguments) or "arguments are not plain JSON data"


def _plain_copy(root: dict[str, Any]) -> dict[str, Any] | None:
    """The copy, or None at the first value :func:`value_problem` would refuse (it then names it)."""
    out: dict[str, Any] = {}
    stack: list[tuple[Any, Any, int]] = [(root, out, 0)]
    nodes = 1
    while stack:
        source, target, depth = stack.pop()
        if depth > MAX_DEPTH or (source and depth == MAX_DEPTH):
            return None
        if not source:
            continue
        nodes += len(source)
        if nodes > MAX_NODES:
            return None
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in pairs:
            if isinstance(source, dict) and type(key) is not str:
                return None
            kind = type(value)
            if kind is str or kind is bool or value is None:
                copied: Any = value
            elif kind is int:
                if not INT_MIN <= value <= INT_MAX:
                    return None
                copied = value
            elif kind is float:
                if not math.isfinite(value):
                    return None
                copied = value
            elif isinstance(value, dict):
                copied = {}
                stack.append((value, copied, depth + 1))
            elif isinstance(value, list | tuple):
                copied = [None] * len(value)
                stack.append((value, copied, depth + 1))
            elif isinstance(value, str):
                copied = str.__str__(value)
            elif isinstance(value, bool | int | float):
                if value_problem(value) is not None:
                    return None
                copied = value
            else:
                return None
            target[key] = copied
    return out
