"""Documented limits on what the guard reads, enforced cheaply and failing closed.

Anything a model, a user or a compromised tool can write is bounded here:

* call arguments: at most :data:`MAX_DEPTH` levels of nesting and
  :data:`MAX_NODES` values; numbers must be finite, and integers must fit in
  64 bits (the CEL engine turns larger ones into floats, where ``y + 1 <= y``
  can hold);
* tool results read as facts: at most :data:`MAX_RESULT_CHARS` characters,
  the same depth limit, and no ``NaN``/``Infinity`` (Python's ``json`` accepts
  them; JSON does not).

A call that breaks a limit is blocked; a result that breaks one is not a fact
(so a check that needs it blocks, naming why).
"""

from __future__ import annotations

import json
import math
from typing import Any

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
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise LimitError(f"nested deeper than {max_depth} levels") from exc
    problem = value_problem(value, max_depth=max_depth, max_nodes=None)
    if problem is not None:
        raise LimitError(problem)
    return value


def value_problem(value: Any, *, max_depth: int = MAX_DEPTH, max_nodes: int | None = MAX_NODES) -> str | None:
    """Why ``value`` (plain JSON data) breaks a limit, or None. Iterative: deep input cannot crash it."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            return f"more than {max_nodes:,} values"
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels at {_short(path) or 'the top'}"
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                return f"{path or 'the value'} is an integer outside the 64-bit range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{path or 'the value'} is {item!r}, not a finite number"
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{path or 'the value'} has a non-string key {key!r}"
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list | tuple):
            for index, child in enumerate(item):
                stack.append((child, f"{path}[{index}]", depth + 1))
        else:
            return f"{path or 'the value'} is a {type(item).__name__}, not JSON data"
    return None


def _short(path: str) -> str:
    return path if len(path) <= 60 else path[:57] + "..."


def call_problem(arguments: Any) -> str | None:
    """Why a call's arguments cannot be checked (``"argument 'amount' is nan, ..."``), or None."""
    if not isinstance(arguments, dict):
        return f"arguments must be an object, got {type(arguments).__name__}"
    problem = value_problem(arguments)
    return None if problem is None else f"argument {problem}"
