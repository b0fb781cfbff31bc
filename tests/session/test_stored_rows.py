"""A SQL store reads each event back from its row: the body this package wrote, with the row's number and time.

What a row says is read as a whole or refused: its ``seq`` and ``at`` are the
columns', whatever the body claims, and a body that is not a JSON object is an
error naming the session and the event, never an event made up of part of it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from policyguard.enforcement.store import SQLiteStore
from policyguard.session import NewEvent, SessionError


def _store(tmp_path: Path) -> tuple[SQLiteStore, Path]:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(str(path), clock=lambda: 1_000.5)
    store.append_events("s", [NewEvent(kind="user", content="hello", place=(1, 0)),
                              NewEvent(kind="call", call_id="c1", tool="get_order", arguments={"id": "O1"})])  # fmt: skip
    return store, path


def _set_body(path: Path, seq: int, body: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE session_events SET body = ? WHERE session_id = 's' AND seq = ?", (body, seq))


def test_events_read_back_as_they_were_appended(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    first, second = store.session_events("s")
    assert (first.seq, first.at, first.kind, first.content, first.place) == (1, 1_000.5, "user", "hello", (1, 0))
    assert (second.seq, second.kind, second.call_id, second.arguments) == (2, "call", "c1", {"id": "O1"})
    assert [event.seq for event in store.session_events("s", after=1)] == [2]


def test_the_rows_number_and_time_win_over_what_the_body_says(tmp_path: Path) -> None:
    store, path = _store(tmp_path)
    _set_body(path, 1, json.dumps({"kind": "user", "content": "hello", "seq": 99, "at": 5.0}))
    first = store.session_events("s")[0]
    assert (first.seq, first.at) == (1, 1_000.5)


@pytest.mark.parametrize("body", ["[1]", "1", '"text"', "{}", "", "null", '{"kind": "user"'])
def test_a_body_that_is_not_a_json_object_is_refused_naming_the_event(tmp_path: Path, body: str) -> None:
    store, path = _store(tmp_path)
    _set_body(path, 2, body)
    with pytest.raises(SessionError, match=r"session 's': the stored event 2 is not a JSON object"):
        store.session_events("s")


@pytest.mark.parametrize(
    "body",
    [
        '{"kind": "user"}, {"kind": "call"}',
        '{"kind": "user"} {"kind": "call"}',
        '{"kind": "nonsense"}',
        '{"kind": "user", "x": 1}',
    ],
)
def test_a_body_that_is_not_one_valid_event_is_refused(tmp_path: Path, body: str) -> None:
    store, path = _store(tmp_path)
    _set_body(path, 2, body)
    with pytest.raises(ValidationError):
        store.session_events("s")


@pytest.mark.parametrize(("column", "value"), [("seq", "two"), ("at", "noon"), ("at", 10**400)])
def test_a_row_whose_number_or_time_is_not_one_is_refused_naming_the_event(
    tmp_path: Path, column: str, value: object
) -> None:
    store, path = _store(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE session_events SET {column} = ? WHERE session_id = 's' AND seq = 2", (str(value),))
    with pytest.raises(SessionError, match=r"session 's': the stored event .* (has no valid number and time|is not)"):
        store.session_events("s")
