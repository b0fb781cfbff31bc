"""``strictjson.loads`` reuses one decoder for a plain string; it answers exactly as ``json.loads`` with the hook.

Whatever the text (valid JSON, a duplicate key, a byte order mark, garbage,
``NaN``), the value or the exception's type and message are those of
``json.loads(text, object_pairs_hook=unique_keys)``, the reader it replaces.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.trajectory.strictjson import loads, unique_keys

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)
TEXTS = st.one_of(
    st.builds(json.dumps, JSON_VALUES),
    st.builds(
        lambda prefix, text: prefix + text,
        st.sampled_from(["", "\ufeff", " ", "{", '{"a": 1, "a": ']),
        st.builds(json.dumps, JSON_VALUES),
    ),
    st.sampled_from(['{"a": 1, "a": 2}', '{"a": {"b": 1, "b": 1}}', "NaN", "-Infinity", "1e999", "", "{} x", "[1,"]),
    st.text(max_size=12),
)


def _outcome(read: Any, text: Any) -> tuple[str, str]:
    try:
        return "value", repr(read(text))
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.sampled_from([str, bytes]))
def test_loads_answers_as_json_loads_with_the_hook(text: str, kind: type) -> None:
    value: Any = text if kind is str else text.encode("utf-8", "surrogatepass")
    expected = _outcome(lambda t: json.loads(t, object_pairs_hook=unique_keys), value)
    assert _outcome(loads, value) == expected
