"""The limits check names the same problem, at the same place, as the walk it replaced.

:func:`policyguard.trajectory.limits.value_problem` links each value to its
parent and writes a path out only for the value it names; the reference below
(the first version, which wrote every value's path as it went) is the
specification. On generated values within and past every limit (depth, count,
64-bit integers, NaN and infinities, non-string keys, objects that are not JSON
data) both give the same answer, word for word.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.trajectory.limits import INT_MAX, INT_MIN, value_problem
from tests.grants.test_checked_copy import SCALARS as JSON_SCALARS  # None, bools, 70-bit ints, NaN and infinities, text


def reference(value: Any, *, max_depth: int, max_nodes: int | None) -> str | None:
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            return f"more than {max_nodes:,} values"
        if depth > max_depth:
            short = path if len(path) <= 60 else path[:57] + "..."
            return f"nested deeper than {max_depth} levels at {short or 'the top'}"
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


class Text(str):
    """A str subclass: still text."""


SCALARS = JSON_SCALARS | st.builds(Text, st.text(max_size=2)) | st.just(object()) | st.just(b"bytes")
KEYS = st.one_of(st.text(max_size=3), st.integers(0, 2), st.sampled_from(["a.b", "[0]", "x" * 70]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(KEYS, inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=1000, deadline=None)
@given(VALUES, st.integers(0, 6), st.one_of(st.none(), st.integers(1, 40)))
def test_the_limits_check_names_what_the_walk_that_wrote_every_path_named(
    value: Any, max_depth: int, max_nodes: int | None
) -> None:
    assert value_problem(value, max_depth=max_depth, max_nodes=max_nodes) == reference(
        value, max_depth=max_depth, max_nodes=max_nodes
    )


def test_a_deep_path_is_written_out_in_full_and_shortened_as_before() -> None:
    value: Any = 1
    for key in reversed(["alpha", "beta", 0, "gamma", 2, "delta" * 12]):
        value = [None, None, value] if isinstance(key, int) else {key: value}
    assert value_problem(value, max_depth=3, max_nodes=None) == reference(value, max_depth=3, max_nodes=None)
    assert value_problem(value, max_depth=3, max_nodes=None) == "nested deeper than 3 levels at alpha.beta[2].gamma"
