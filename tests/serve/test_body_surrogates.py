"""A request body is refused for a lone surrogate exactly when walking all of it would find one.

``parse_json`` walks a parsed body for lone UTF-16 surrogates only when its
text has an escape that could make one (``\\uD800``-``\\uDFFF``): text decoded
from UTF-8 holds none, so a body without such an escape cannot. On generated
bodies mixing plain text, paired and lone surrogate escapes (in keys and
values), escaped backslashes before ``u`` and other escapes, the answer is
the one the full walk gives, value or refusal, word for word.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.serve.body import BadRequest, parse_json, surrogate_problem

PIECES = st.sampled_from(
    [
        "a",
        "é",
        "😀",
        "\\ud83d\\ude00",
        "\\ud800",
        "\\uDFFF",
        "\\udc00x",
        "\\\\ud800",
        "\\u0041",
        "\\ue000",
        "\\ud7ff",
        "\\n",
    ]
)
STRINGS = st.lists(PIECES, max_size=4).map(lambda parts: '"' + "".join(parts) + '"')
BODIES = st.recursive(
    STRINGS | st.sampled_from(["1", "null", "true"]),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]")
        | st.lists(st.tuples(STRINGS, inner), max_size=3).map(
            lambda pairs: "{" + ",".join(f"{key}:{value}" for key, value in dict(pairs).items()) + "}"
        )
    ),
    max_leaves=8,
)


def whole_walk(raw: bytes) -> Any:
    """What the body is refused for, or its value, walking every string for a lone surrogate."""
    try:
        value = parse_json(raw)
    except BadRequest as exc:
        return ("refused", exc.status, str(exc))
    problem = surrogate_problem(value)
    return ("refused", 400, f"the body breaks a limit: {problem}") if problem else json.dumps(value)


def answer(raw: bytes) -> Any:
    try:
        return json.dumps(parse_json(raw))
    except BadRequest as exc:
        return ("refused", exc.status, str(exc))


@settings(max_examples=500, deadline=None)
@given(BODIES)
def test_a_body_is_refused_for_a_lone_surrogate_exactly_when_the_whole_walk_finds_one(text: str) -> None:
    raw = text.encode("utf-8")
    assert answer(raw) == whole_walk(raw)


def test_a_lone_surrogate_in_a_key_or_behind_an_escaped_backslash_is_read_as_json_says() -> None:
    assert answer(b'{"\\ud800": 1}')[0] == "refused"
    assert answer(b'["\\\\ud800"]') == json.dumps(["\\ud800"])  # a backslash, then the letters: no surrogate
    assert answer(b'["\\ud83d\\ude00"]') == json.dumps(["\U0001f600"])  # a pair is one character
