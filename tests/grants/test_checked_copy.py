"""The executor's private copy of the arguments: the same refusals as call_problem, and a copy nothing can reach."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.trajectory.canonical import canonical_json
from policyguard.trajectory.limits import MAX_DEPTH, MAX_NODES, call_problem, checked_copy

if TYPE_CHECKING:
    from conftest import Rig

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.dictionaries(st.integers(0, 3), children, min_size=1, max_size=2),
    ),
    max_leaves=30,
)


def _nested(depth: int, leaf: Any) -> dict[str, Any]:
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), VALUES, max_size=5))
def test_refuses_exactly_what_call_problem_refuses_with_the_same_reason(arguments: dict[str, Any]) -> None:
    copy, problem = checked_copy(arguments)
    assert problem == call_problem(arguments)
    if problem is None:
        assert copy is not None and canonical_json(copy) == canonical_json(arguments)


DEPTHS = [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1]


def test_the_depth_limit_is_call_problems_for_full_and_empty_leaves() -> None:
    for depth in DEPTHS:
        for leaf in (1, {}, [], "x"):
            arguments = _nested(depth, leaf)
            assert checked_copy(arguments)[1] == call_problem(arguments), (depth, leaf)
    assert checked_copy(_nested(MAX_DEPTH + 1, 1))[1] is not None


def test_the_node_limit_is_call_problems() -> None:
    at_limit = {"a": list(range(MAX_NODES - 2))}
    over = {"a": list(range(MAX_NODES))}
    assert checked_copy(at_limit)[1] is None and call_problem(at_limit) is None
    assert checked_copy(over)[1] == call_problem(over) and call_problem(over) is not None


def test_very_deep_input_is_refused_without_recursion() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    copy, problem = checked_copy({"a": deep})
    assert copy is None and problem is not None and "deeper than" in problem


def test_the_copy_shares_nothing_with_the_caller() -> None:
    inner = {"items": [1, 2]}
    arguments = {"order": inner, "tags": ("a", "b")}
    copy, _ = checked_copy(arguments)
    assert copy is not None
    inner["items"].append(3)
    arguments["order"] = {"swapped": True}
    assert copy == {"order": {"items": [1, 2]}, "tags": ["a", "b"]}


def test_subclasses_with_their_own_behaviour_become_plain_values() -> None:
    class Sneaky(dict):  # type: ignore[type-arg]
        def __deepcopy__(self, memo: object) -> dict[str, Any]:
            return {"amount": 1_000_000}

    class Text(str):
        pass

    copy, problem = checked_copy({"order": Sneaky(amount=5), "id": Text("O1")})
    assert problem is None and copy == {"order": {"amount": 5}, "id": "O1"}
    assert type(copy["order"]) is dict and type(copy["id"]) is str


def test_non_json_values_and_non_objects_are_refused() -> None:
    assert checked_copy({"when": object()})[1] == call_problem({"when": object()})
    assert checked_copy([1, 2])[1] == "arguments must be an object, got list"
    assert checked_copy({"x": math.inf})[1] == "argument x is inf, not a finite number"


def test_arguments_with_no_utf8_encoding_are_refused_by_the_executor_not_raised(rig: Rig) -> None:
    """A lone surrogate (JSON allows "\\ud800") has no canonical hash: refused before any grant is spent."""
    from policyguard.trajectory.messages import ToolCall

    call = ToolCall(
        id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 5, "idempotency_key": "\ud800"}
    )
    result = rig.executor.execute(call, "x.y.z", principal="alice", resource="O1")
    assert not result.executed and result.reason == "bad_arguments" and "canonical" in (result.error or "")
    assert rig.refund.calls == [] and rig.store.entries() == []
