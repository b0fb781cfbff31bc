"""Property-based: whatever a model, user or tool writes, a reader returns a Trajectory or raises FormatError.

Random conversations in each of the three formats reuse call ids from a small
pool, put error flags of random types on results, and put non-finite, huge and
deeply nested values in arguments and results; random garbage of any shape is
fed too. Nothing but FormatError may escape, a reused call id is never
accepted, a flag that is not a bool is never guessed, and a result the input
marks as failed is never read as a success.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.errors import FormatError
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.limits import INT_MAX, INT_MIN, MAX_DEPTH
from policyguard.trajectory.messages import Trajectory

FORMATS = ("openai_chat", "openai_responses", "anthropic")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

IDS = st.sampled_from(["call_1", "call_2", "call_3", "call_4"])  # a small pool: reuse is frequent
NAMES = st.sampled_from(["get_reservation_details", "cancel_reservation", "update_reservation_baggages"])

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def deep(draw: st.DrawFn) -> str:
    """JSON text nested up to far beyond the depth limit (and beyond Python's recursion limit)."""
    depth = draw(st.sampled_from([1, MAX_DEPTH - 1, MAX_DEPTH + 1, 500, 5000]))
    return '{"x": ' + "[" * depth + "]" * depth + "}"


ARGUMENT_TEXT = st.one_of(
    st.builds(lambda value: json.dumps({"reservation_id": "NO6JO3", "value": value}), JSON_VALUES),
    st.builds(json.dumps, JSON_VALUES),
    deep(),
    st.sampled_from(['{"n": 1e999}', '{"n": -Infinity}', '{"n": NaN}', '{"n": 18446744073709551617}', "{", ""]),
    st.text(max_size=10),
)
RESULT_TEXT = st.one_of(
    st.builds(json.dumps, JSON_VALUES),
    st.sampled_from(["Error: Reservation T1QOBS not found", "  Error: boom", "ok", ""]),
    deep(),
    st.text(max_size=10),
)
FLAGS = st.one_of(st.just("absent"), st.none(), st.booleans(), st.sampled_from(["false", "true", 0, 1, 0.0, [], {}]))


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A format-neutral script: ("user", text), ("calls", [(id, name, raw_args)]), ("result", (id, text, flag))."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        kind = draw(st.sampled_from(["user", "calls", "result", "result"]))
        if kind == "user":
            steps.append(("user", draw(st.text(max_size=10))))
        elif kind == "calls":
            calls = draw(st.lists(st.tuples(IDS, NAMES, ARGUMENT_TEXT), min_size=1, max_size=3))
            steps.append(("calls", calls))
        else:
            steps.append(("result", (draw(IDS), draw(RESULT_TEXT), draw(FLAGS))))
    return steps


def _flags(flag: Any) -> dict[str, Any]:
    return {} if flag == "absent" else {"is_error": flag}


def render(fmt: str, steps: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, body in steps:
        if kind == "user":
            out.append({"role": "user", "content": body})
        elif kind == "calls" and fmt == "openai_chat":
            tool_calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in body]
            out.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        elif kind == "calls" and fmt == "openai_responses":
            out += [{"type": "function_call", "call_id": i, "name": n, "arguments": a} for i, n, a in body]
        elif kind == "calls":
            blocks = []
            for i, n, a in body:
                try:
                    arguments = json.loads(a) if a else {}
                except (ValueError, RecursionError):
                    arguments = a  # not an object: the reader must refuse it
                blocks.append({"type": "tool_use", "id": i, "name": n, "input": arguments})
            out.append({"role": "assistant", "content": blocks})
        else:
            call_id, text, flag = body
            if fmt == "openai_chat":
                out.append({"role": "tool", "tool_call_id": call_id, "content": text, **_flags(flag)})
            elif fmt == "openai_responses":
                out.append({"type": "function_call_output", "call_id": call_id, "output": text, **_flags(flag)})
            else:
                block = {"type": "tool_result", "tool_use_id": call_id, "content": text, **_flags(flag)}
                out.append({"role": "user", "content": [block]})
    return out


def _arguments_within_limits(text: str) -> bool:
    if text == "":
        return True
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and _within(value, 0)


def _within(value: Any, depth: int) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return INT_MIN <= value <= INT_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_within(v, depth + 1) for v in value.values())
    return all(_within(v, depth + 1) for v in value)


def _read(fmt: str, messages: Any) -> Trajectory | None:
    try:
        return to_trajectory(messages, format=fmt)  # type: ignore[arg-type]
    except FormatError:
        return None


def _pairs_unambiguously(steps: list[tuple[str, Any]]) -> bool:
    """The pairing rule written out: a result answers the newest unanswered call of its id; an id may be
    used again only once its call was answered, and a call is answered at most once."""
    open_ids: set[str] = set()
    answered: set[str] = set()
    for kind, body in steps:
        if kind == "calls":
            for call_id, _, _ in body:
                if call_id in open_ids:
                    return False
                open_ids.add(call_id)
                answered.discard(call_id)
        elif kind == "result":
            if body[0] in answered:
                return False
            open_ids.discard(body[0])
            answered.add(body[0])
    return True


@SETTINGS
@given(fmt=st.sampled_from(FORMATS), steps=conversations())
def test_random_conversations_are_read_faithfully_or_refused(fmt: str, steps: list[tuple[str, Any]]) -> None:
    trajectory = _read(fmt, render(fmt, steps))
    flags = [body[2] for kind, body in steps if kind == "result"]
    arguments = [a for kind, body in steps if kind == "calls" for _, _, a in body]
    if trajectory is None:
        return
    assert _pairs_unambiguously(steps), "an ambiguous call id (reused while unanswered, or answered twice) was accepted"
    assert all(flag in ("absent", None, True, False) for flag in flags), "an error flag was guessed"
    assert all(_arguments_within_limits(a) for a in arguments), "arguments outside the limits were accepted"
    results = [m for m in trajectory.messages if m.role == "tool"]
    for (call_id, text, flag), message in zip((b for k, b in steps if k == "result"), results, strict=True):
        assert message.tool_call_id == call_id
        if flag is True or text.lstrip().startswith("Error:"):
            assert message.is_error, "a failed result was read as a success"
        elif fmt != "anthropic" or flag in ("absent", None, False):
            assert not message.is_error


@SETTINGS
@given(fmt=st.sampled_from((*FORMATS, "auto")), garbage=st.one_of(JSON_VALUES, st.lists(JSON_VALUES, max_size=4)))
def test_garbage_of_any_shape_is_a_trajectory_or_a_format_error(fmt: str, garbage: Any) -> None:
    result = _read(fmt, garbage)
    assert result is None or isinstance(result, Trajectory)


MESSAGE_SHAPES = st.fixed_dictionaries(
    {},
    optional={
        "role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system", "developer"]), JSON_VALUES),
        "type": st.one_of(
            st.sampled_from(["message", "function_call", "function_call_output", "reasoning"]), JSON_VALUES
        ),
        "content": st.one_of(JSON_VALUES, st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "input_text"])}, optional={"text": JSON_VALUES, "id": JSON_VALUES, "name": JSON_VALUES, "input": JSON_VALUES, "tool_use_id": JSON_VALUES, "is_error": JSON_VALUES, "content": JSON_VALUES}), max_size=3)),
        "tool_calls": JSON_VALUES,
        "tool_call_id": JSON_VALUES,
        "call_id": JSON_VALUES,
        "name": JSON_VALUES,
        "arguments": JSON_VALUES,
        "output": JSON_VALUES,
        "is_error": JSON_VALUES,
        "status": JSON_VALUES,
    },
)  # fmt: skip


UNHASHABLE = st.sampled_from([["user"], {"role": "user"}, [], {}])


@SETTINGS
@given(
    fmt=st.sampled_from((*FORMATS, "auto")),
    role=st.one_of(st.sampled_from(["user", "assistant"]), UNHASHABLE),
    part_type=st.one_of(st.sampled_from(["text", "tool_use", "tool_result"]), UNHASHABLE),
    item_type=st.one_of(st.just("absent"), st.sampled_from(["message", "reasoning"]), UNHASHABLE),
)
def test_unhashable_roles_and_types_are_a_format_error(fmt: str, role: Any, part_type: Any, item_type: Any) -> None:
    """A list or object where a role or type name belongs once raised TypeError from a dict lookup."""
    item: dict[str, Any] = {"role": role, "content": [{"type": part_type, "text": "x"}]}
    if item_type != "absent":
        item["type"] = item_type
    result = _read(fmt, [item])
    assert result is None or isinstance(result, Trajectory)


@SETTINGS
@given(fmt=st.sampled_from((*FORMATS, "auto")), messages=st.lists(MESSAGE_SHAPES, max_size=5))
def test_near_miss_message_shapes_are_a_trajectory_or_a_format_error(fmt: str, messages: list[Any]) -> None:
    result = _read(fmt, messages)
    assert result is None or isinstance(result, Trajectory)
