"""``to_trajectory`` turns its input into plain data once and reads that; nothing it answers may change.

Two rules make that safe, and both are checked on generated input:

- ``plain`` gives, type for type, what its written rules give (:func:`plain_rules`
  below: exact dicts and dict subclasses and mappings become dicts, lists and
  tuples become lists, objects with ``model_dump`` are dumped without ``None``
  fields, ``str``/``int``/``float`` and their subclasses are kept, anything else
  is kept as it is), and plain data goes through it unchanged, so reading it a
  second time could only ever copy it;
- ``to_trajectory`` answers exactly what the public, SDK-tolerant building
  blocks answer when each is given the raw input as it is: ``detect_format``,
  then ``openai_chat.read_message`` item by item with the call-id bookkeeping of
  ``check_message``, or ``openai_responses.read`` / ``anthropic.read``. The same
  trajectory, or the same exception type and message.

The raw input mixes SDK-like pydantic objects (fields set to ``None`` are
dropped by ``model_dump``), dict subclasses, mappings, tuples and ``str``/``int``
subclasses at every level, with call ids from a small pool (reuse is frequent),
arguments that are ``NaN``, ``Infinity``, huge integers, duplicate keys or
nested too deeply, unknown roles and item types, error flags of the wrong type,
and extra keys nested far past Python's recursion limit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from policyguard.errors import FormatError
from policyguard.trajectory.formats import anthropic, detect_format, openai_chat, openai_responses, to_trajectory
from policyguard.trajectory.formats.common import CallIds, plain
from policyguard.trajectory.messages import Trajectory

from .test_formats_properties import JSON_VALUES, SCALARS  # the same JSON-like values, NaN and 2**70 included

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- the kinds of objects SDKs and callers hand over --------------------------------------------


class SDKObject(BaseModel):
    """Stands in for an SDK object (``ChatCompletionMessage``, ``ToolUseBlock``...): ``model_dump`` gives its fields."""

    model_config = ConfigDict(extra="allow")


class Record(dict):  # type: ignore[type-arg]
    """A dict subclass, as some frameworks keep messages."""


class View(Mapping[str, Any]):
    """A mapping that is not a dict."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class Items(list):  # type: ignore[type-arg]
    """A list subclass."""


class Text(str):
    """A str subclass (kept as it is by plain)."""


class Count(int):
    """An int subclass (kept as it is by plain)."""


class Level(IntEnum):
    LOW = 1


class Dumps:
    """Not pydantic, but has ``model_dump``, returning a tuple."""

    def model_dump(self, exclude_none: bool = False) -> Any:
        return ("dumped", None, {"k": (1, 2)})


class NotCallable:
    """Has a ``model_dump`` attribute that is not callable: kept as it is."""

    model_dump = 5


def plain_rules(value: Any) -> Any:
    """``plain`` as its rules are written, one isinstance test after another (the reference)."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, dict):
        return {key: plain_rules(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_rules(item) for item in value]
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return plain_rules(value.model_dump(exclude_none=True))
    if isinstance(value, Mapping):
        return {key: plain_rules(item) for key, item in value.items()}
    return value


def same(a: Any, b: Any) -> bool:
    """Equal type for type (``1``, ``1.0``, ``True`` and ``Text("x")``, ``"x"`` differ); NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a is b or a == b


class Deep(list):  # type: ignore[type-arg]
    """Lists nested ``depth`` deep (a list subclass outside, so generation leaves it as it is)."""

    def __init__(self, depth: int) -> None:
        value: list[Any] = []
        for _ in range(depth - 1):
            value = [value]
        super().__init__([value])


# --- generated input -------------------------------------------------------------------------------

VOCAB = {
    "role", "content", "type", "text", "name", "id", "tool_calls", "tool_call_id", "function", "arguments",
    "is_error", "refusal", "call_id", "output", "status", "input", "tool_use_id", "function_call", "extra",
}  # fmt: skip
DEPTHS = st.sampled_from([2, 60, 3000])  # 3000 is past Python's recursion limit: plain must refuse it
ODD = st.sampled_from([b"bytes", frozenset({1}), Level.LOW, Count(3), Text("t"), Dumps(), NotCallable(), 1.5, -0.0])
IDS = st.sampled_from(["call_1", "call_2", "call_3"])
NAMES = st.sampled_from(["get_reservation_details", "cancel_reservation"] * 4 + [""])
ARGUMENT_TEXT = st.one_of(
    st.builds(lambda value: json.dumps({"reservation_id": "NO6JO3", "value": value}), JSON_VALUES),
    st.builds(json.dumps, JSON_VALUES),
    st.sampled_from(
        [
            '{"n": NaN}',
            '{"n": -Infinity}',
            '{"n": 1e999}',
            '{"n": 18446744073709551617}',
            '{"a": 1, "a": 2}',
            '{"x": ' + "[" * 100 + "]" * 100 + "}",
            '{"x": ' + "[" * 5000 + "]" * 5000 + "}",
            "\ufeff{}",
            "{",
            "",
            "[1]",
        ]
    ),
)
ARGUMENT_DICT = st.dictionaries(st.text(max_size=4), JSON_VALUES | ODD, max_size=3)
FLAGS: st.SearchStrategy[Any] = st.sampled_from([None, True, False, "false", 0, 1, Count(1), [], "absent"])
TEXT = st.text(max_size=8) | st.sampled_from(["Error: not found", "  Error: boom"])


def _with(item: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return item if value == "absent" else {**item, key: value}


@st.composite
def extra(draw: st.DrawFn, item: dict[str, Any]) -> dict[str, Any]:
    """``item``, sometimes with an extra key nested ``DEPTHS`` deep (readers ignore it; plain walks it)."""
    if draw(st.integers(0, 14)) == 0:
        return {**item, "extra": Deep(draw(DEPTHS))}
    return item


@st.composite
def chat_item(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(
        st.sampled_from(["system", "developer", "user", "assistant", "assistant", "tool", "tool"] * 3 + ["robot"])
    )
    item: dict[str, Any] = {"role": role}
    parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": TEXT}), max_size=2)
    item["content"] = draw(st.none() | TEXT | parts | st.just(7)) if draw(st.integers(0, 9)) else draw(TEXT)
    if role == "assistant" or draw(st.integers(0, 9)) == 0:
        calls = []
        for call_id, name in draw(st.lists(st.tuples(IDS, NAMES), max_size=2)):
            arguments = draw(ARGUMENT_TEXT | ARGUMENT_DICT)
            call = {"id": call_id, "type": draw(st.sampled_from(["function", "function", "custom"]))}
            calls.append({**call, "function": {"name": name, "arguments": arguments}})
        item["tool_calls"] = calls
    if role == "tool" or draw(st.integers(0, 9)) == 0:
        item["tool_call_id"] = draw(IDS | st.just(""))
        item = _with(item, "is_error", draw(FLAGS))
    if draw(st.integers(0, 9)) == 0:
        item["name"] = draw(st.none() | st.text(max_size=3) | st.integers())
    return draw(extra(item))


@st.composite
def responses_item(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["message", "typed", "function_call", "function_call_output", "reasoning", "odd"]))
    if kind in ("message", "typed"):
        role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
        parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": TEXT}))
        item: dict[str, Any] = {"role": role, "content": draw(TEXT | parts)}
        if kind == "typed":
            item["type"] = "message"
    elif kind == "function_call":
        item = {"type": kind, "call_id": draw(IDS), "name": draw(NAMES), "arguments": draw(ARGUMENT_TEXT)}
    elif kind == "function_call_output":
        item = {"type": kind, "call_id": draw(IDS), "output": draw(TEXT | st.none())}
        item = _with(item, "status", draw(st.sampled_from(["absent", "completed", "incomplete", "failed", None])))
        item = _with(item, "is_error", draw(FLAGS))
    elif kind == "reasoning":
        item = {"type": "reasoning", "summary": []}
    else:
        return draw(st.sampled_from([{"type": "web_search_call"}, {"content": "no role"}, "text", 3]))
    return draw(extra(item))


@st.composite
def anthropic_item(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "system"]))
    blocks: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", "odd"]))):
        if kind == "text":
            blocks.append({"type": "text", "text": draw(TEXT)})
        elif kind == "tool_use":
            arguments = draw(ARGUMENT_DICT | st.sampled_from([[], "{}", {"n": math.nan}, {"n": 2**64}]))
            blocks.append({"type": "tool_use", "id": draw(IDS), "name": draw(NAMES), "input": arguments})
        elif kind == "tool_result":
            block = {"type": "tool_result", "tool_use_id": draw(IDS), "content": draw(TEXT | st.none())}
            blocks.append(_with(block, "is_error", draw(FLAGS)))
        else:
            blocks.append({"type": {"odd": "server_tool_use"}.get(kind, kind)})
    content: Any = draw(TEXT) if draw(st.integers(0, 4)) == 0 else blocks
    return draw(extra({"role": role, "content": content}))


@st.composite
def dressed(draw: st.DrawFn, value: Any, top: bool = False) -> Any:
    """``value`` with its dicts, lists and strings handed over the ways callers and SDKs do."""
    if isinstance(value, dict):
        inner = {key: draw(dressed(item)) for key, item in value.items()}
        ways = ["dict", "dict", "record", "view"] + (["sdk", "sdk"] if set(inner) <= VOCAB else [])
        way = draw(st.sampled_from(ways))
        if way == "sdk":
            return SDKObject(**inner)
        return {"dict": dict, "record": Record, "view": View}[way](inner)
    if isinstance(value, list) and not isinstance(value, Deep):
        inner_list = [draw(dressed(item)) for item in value]
        way = draw(st.sampled_from(["list", "list", "tuple"] + ([] if top else ["items"])))
        return {"list": list, "tuple": tuple, "items": Items}[way](inner_list)
    if isinstance(value, str) and draw(st.integers(0, 9)) == 0:
        return Text(value)
    return value


DIALECTS = {"openai_chat": chat_item(), "openai_responses": responses_item(), "anthropic": anthropic_item()}


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Any, str, Any]:
    """(raw message list, format argument, system argument)."""
    dialect = draw(st.sampled_from(sorted(DIALECTS)))
    raw = draw(dressed(draw(st.lists(DIALECTS[dialect], min_size=1, max_size=6)), top=True))
    fmt = draw(st.sampled_from(["auto", dialect, dialect, "openai_chat", "openai_responses", "anthropic"]))
    system = None
    if fmt == "anthropic" and draw(st.booleans()):
        system = draw(
            st.text(max_size=5) | st.builds(lambda t: [SDKObject(**{"type": "text", "text": t})], st.text(max_size=5))
        )
    return raw, fmt, system


# --- the reference: the public, SDK-tolerant functions, each given the raw input -------------------


def reference(raw: Any, fmt: str, system: Any) -> Trajectory:
    plain(raw)  # to_trajectory reads its whole input first: input nested too deeply fails before anything else
    plain(system)
    if fmt == "auto":
        fmt = detect_format(raw)
    if fmt == "openai_responses":
        return openai_responses.read(raw)
    if fmt == "anthropic":
        return anthropic.read(raw, system)
    ids = CallIds()
    messages = []
    for index, item in enumerate(raw):
        message = openai_chat.read_message(item, index)
        openai_chat.check_message(message, index, ids)
        messages.append(message)
    return Trajectory(messages=messages)


def outcome(read: Any) -> tuple[str, str]:
    try:
        return "trajectory", repr(read().model_dump())
    except FormatError as exc:
        return "FormatError", str(exc)


# --- the properties --------------------------------------------------------------------------------


@SETTINGS
@given(inputs())
def test_to_trajectory_answers_what_the_public_building_blocks_answer(case: tuple[Any, str, Any]) -> None:
    raw, fmt, system = case
    expected = outcome(lambda: reference(raw, fmt, system))
    assert outcome(lambda: to_trajectory(raw, fmt, system=system)) == expected  # type: ignore[arg-type]


PLAIN_TREES = st.recursive(
    SCALARS | ODD,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(sorted(VOCAB)), inner, max_size=3),
    max_leaves=15,
)


@SETTINGS
@given(st.data())
def test_plain_gives_what_its_rules_give_and_leaves_plain_data_as_it_is(data: st.DataObject) -> None:
    value = data.draw(dressed(data.draw(PLAIN_TREES)))
    result = plain(value)
    assert same(result, plain_rules(value))
    assert same(plain(result), result)


def test_plain_refuses_input_nested_past_the_recursion_limit_in_every_shape() -> None:
    for deep in (
        Deep(5000),
        {"a": Deep(5000)},
        SDKObject(**{"extra": Deep(5000)}),
        (Deep(5000),),
        Record(a=[Deep(5000)]),
    ):
        try:
            plain(deep)
        except FormatError as exc:
            assert str(exc) == "the input is nested too deeply to read"
        else:
            raise AssertionError("plain read input nested 5000 deep")
