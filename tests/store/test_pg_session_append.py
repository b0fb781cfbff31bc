"""A PostgreSQL session append is one statement when the store knows the session's newest number.

``PostgresStore`` remembers the newest event number of each session it
appended to or read. Its next append numbers the events after it and sends them
in one call of ``policyguard_append_events``, which appends only if the session
still ends at that number, under the lock the full append takes. Whatever the
guess, the answer is the full append's: another replica appended meanwhile, the
session was evicted, expired or is full, a relative answer points nowhere. The
property test runs the same steps on two PostgreSQL replicas and on two SQLite
handles (the full append only) and compares every answer.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.enforcement.store import SQLiteStore
from policyguard.session import NewEvent, SessionEvicted, SessionFull

psycopg = pytest.importorskip("psycopg")

from policyguard.enforcement.pgstore import _MIGRATIONS, PostgresStore  # noqa: E402

DAY = 24 * 3600.0


def call(call_id: str) -> NewEvent:
    return NewEvent(kind="call", call_id=call_id, tool="get_account", arguments={"id": call_id}, judged="seen")


def result(call_id: str, answers: int) -> NewEvent:
    return NewEvent(kind="result", call_id=call_id, answers=answers, content='{"ok": "\\u0000 é"}')


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def full_appends(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sessions each full append (the multi-statement transaction) was run for, from now on."""
    seen: list[str] = []
    real = store._in_transaction

    def counted(work: Any, **options: Any) -> Any:
        seen.append("full")
        return real(work, **options)

    monkeypatch.setattr(store, "_in_transaction", counted)
    return seen


def test_an_append_after_the_stores_own_is_one_statement_and_reads_back_the_same(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url)
    try:
        full = full_appends(store, monkeypatch)
        first = store.append_events("s1", [call("c1")])
        second = store.append_events("s1", [call("c2"), result("c2", answers=-1)])
        assert full == ["full"]  # the first: a session new to this store
        assert [e.seq for e in first + second] == [1, 2, 3] and second[1].answers == 2
        assert store.session_events("s1") == first + second
        fresh = PostgresStore(pg_url)  # knows nothing: the full append reads the session's newest number
        try:
            assert [e.seq for e in fresh.append_events("s1", [call("c3")])] == [4]
        finally:
            fresh.close()
    finally:
        store.close()


def test_a_replica_appending_in_between_is_numbered_before_the_next_append(pg_url: str) -> None:
    one, other = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        one.append_events("s1", [call("c1")])
        other.append_events("s1", [call("c2"), call("c3")])  # `one` still thinks the session ends at 1
        added = one.append_events("s1", [call("c4"), result("c4", answers=-1)])
        assert [(e.seq, e.answers) for e in added] == [(4, 0), (5, 4)]
        assert [e.call_id for e in one.session_events("s1")] == ["c1", "c2", "c3", "c4", "c4"]
    finally:
        one.close()
        other.close()


def test_a_session_another_replica_evicted_is_said_to_be_evicted(pg_url: str) -> None:
    clock = Clock()
    one, other = PostgresStore(pg_url, clock=clock, max_sessions=1), PostgresStore(pg_url, clock=clock, max_sessions=1)
    try:
        one.append_events("old", [call("c1")])
        clock.now += 1
        other.append_events("new", [call("c2")])  # one session at most: the sweep evicts "old"
        with pytest.raises(SessionEvicted, match="'old' was evicted"):
            one.append_events("old", [call("c3")])
    finally:
        one.close()
        other.close()


def test_a_remembered_session_past_retention_is_evicted_not_appended_to(pg_url: str) -> None:
    clock = Clock()
    store = PostgresStore(pg_url, clock=clock, session_retention_s=DAY)
    try:
        store.append_events("s1", [call("c1")])
        clock.now += DAY + 1
        with pytest.raises(SessionEvicted):
            store.append_events("s1", [call("c2")])
        with pytest.raises(SessionEvicted):
            store.session_events("s1")
    finally:
        store.close()


def test_a_remembered_session_refuses_an_append_past_its_limit_or_pointing_nowhere_and_keeps_nothing(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, max_session_events=3)
    try:
        store.append_events("s1", [call("c1"), call("c2")])
        with pytest.raises(SessionFull, match="has 2 events; 2 more would pass 3"):
            store.append_events("s1", [call("c3"), call("c4")])
        with pytest.raises(ValueError, match="no call of this append"):
            store.append_events("s1", [result("c3", answers=-1)])
        assert [e.seq for e in store.append_events("s1", [call("c5")])] == [3]
        assert [e.call_id for e in store.session_events("s1")] == ["c1", "c2", "c5"]
    finally:
        store.close()


def test_a_version_2_database_gains_the_function_and_its_sessions_go_on_from_their_numbers(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for version in (1, 2):
            for statement in dict(_MIGRATIONS)[version]:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    before = PostgresStore(pg_url)  # written by this version: the rows a version 2 store wrote are the same
    before.append_events("s1", [call("c1"), call("c2")])
    before.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION policyguard_append_events")
        conn.execute("DELETE FROM schema_version WHERE version = 3")
    store = PostgresStore(pg_url)
    try:
        assert [e.call_id for e in store.session_events("s1")] == ["c1", "c2"]
        assert [e.seq for e in store.append_events("s1", [call("c3")])] == [3]
        assert [e.seq for e in store.append_events("s1", [call("c4")])] == [4]
    finally:
        store.close()


# -- the same steps, the same answers ------------------------------------------------

EVENTS = st.lists(
    st.one_of(
        st.builds(call, st.sampled_from(["a", "b"])),
        st.builds(call, st.sampled_from(["a", "b"])),
        st.builds(result, st.sampled_from(["a", "b"]), st.sampled_from([-1, -1, -2, 1, 3])),
    ),
    min_size=1,
    max_size=3,
)
REPLICA = st.sampled_from([0, 0, 0, 1])  # mostly one replica: its guesses hold; the other makes them stale
SESSION = st.sampled_from([0, 0, 1])
APPEND = st.tuples(st.just("append"), REPLICA, SESSION, EVENTS | st.just([]))
STEP = st.one_of(
    APPEND,
    APPEND,
    APPEND,
    st.tuples(st.just("read"), REPLICA, SESSION, st.integers(0, 4)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 0.6 * DAY])),
)


def _answer(store: Any, action: str, session_id: str, argument: Any) -> Any:
    """What one step gives: the events (numbers and JSON) or the error's type and message."""
    try:
        if action == "append":
            events = store.append_events(session_id, argument)
        else:
            events = store.session_events(session_id, after=argument)
        return [(e.seq, e.model_dump_json()) for e in events]
    except (SessionEvicted, SessionFull, ValueError) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=6, max_size=24))
def test_two_postgresql_replicas_answer_every_step_as_the_full_append_does(
    pg_url: str, tmp_path: Path, steps: list[Any]
) -> None:
    clock = Clock()
    limits: dict[str, Any] = {"max_session_events": 5, "session_retention_s": DAY, "max_sessions": 2}
    schema = f"append_{uuid.uuid4().hex[:16]}"  # each example its own tables: limits count a schema's sessions
    pg = [PostgresStore(pg_url, clock=clock, min_size=1, max_size=2, schema=schema, **limits) for _ in range(2)]
    lite = [SQLiteStore(str(tmp_path / f"{schema}.db"), clock=clock, **limits) for _ in range(2)]
    try:
        for step in steps:
            if step[0] == "tick":
                clock.now += step[1]
                continue
            action, replica, session, argument = step
            got = [_answer(store, action, f"s{session}", argument) for store in (pg[replica], lite[replica])]
            assert got[0] == got[1], step
    finally:
        for handle in pg:
            handle.close()
        for other in lite:
            other.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]  # a generated name
