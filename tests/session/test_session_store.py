"""One session store contract, three stores: in memory, a SQLite file, PostgreSQL.

A store keeps each conversation's record for every guard that shares it: the
replicas of ``policyguard serve`` and the proxy. What they rely on: events are
numbered 1, 2, ... without gaps or repeats, even when processes append at the
same time; an append is all or nothing; a record the store gave up (retention,
size) is said to be gone, never read as an empty one; and a write one replica
allowed counts on the others.
"""

from __future__ import annotations

import multiprocessing
import runpy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from policyguard import Guard, Message, ToolCall, Trajectory
from policyguard.enforcement.store import LedgerUnavailable
from policyguard.session import MemorySessionStore, NewEvent, SessionEvicted, SessionFull, SessionStore

from .credits import asked, credit, make_guard

BACKENDS = ["memory", "sqlite-file", "postgres"]
WORKER = str(Path(__file__).with_name("session_worker.py"))
DAY = 24 * 3600.0


@dataclass
class Backend:
    """Opens handles on one storage: every handle sees the same sessions (another process would open another)."""

    name: str
    url: str  # what a worker process opens ("" for memory: it has no URL)
    request: pytest.FixtureRequest
    clock: list[float] = field(default_factory=lambda: [1_000_000.0])
    _memory: MemorySessionStore | None = None

    def open(self, *, max_events: int = 20_000, retention_s: float = 7 * DAY, max_sessions: int | None = None) -> Any:
        now: Callable[[], float] = lambda: self.clock[0]  # noqa: E731
        if self.name == "memory":
            if self._memory is None:
                self._memory = MemorySessionStore(
                    max_events=max_events, retention_s=retention_s, max_sessions=max_sessions or 10_000, clock=now
                )
            return self._memory
        limits = {"max_session_events": max_events, "session_retention_s": retention_s, "max_sessions": max_sessions}
        store: Any
        if self.name == "postgres":
            from policyguard.enforcement.pgstore import PostgresStore

            store = PostgresStore(self.url, clock=now, **limits)
        else:
            from policyguard.enforcement.store import SQLiteStore

            store = SQLiteStore(self.url.removeprefix("sqlite:///"), clock=now, **limits)
        self.request.addfinalizer(store.close)
        return store

    def tick(self, seconds: float) -> None:
        self.clock[0] += seconds


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "postgres":
        url = str(request.getfixturevalue("pg_url"))
    elif request.param == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url = ""
    return Backend(request.param, url, request)


def call(call_id: str, tool: str = "get_account", **arguments: Any) -> NewEvent:
    return NewEvent(kind="call", call_id=call_id, tool=tool, arguments=arguments, judged="seen")


def result(call_id: str, answers: int, content: str = "ok", *, is_error: bool = False) -> NewEvent:
    return NewEvent(kind="result", call_id=call_id, answers=answers, content=content, is_error=is_error)


def seqs(store: SessionStore, session_id: str, after: int = 0) -> list[int]:
    return [event.seq for event in store.session_events(session_id, after=after)]


# -- numbering and reading ----------------------------------------------------------


def test_events_are_numbered_from_one_per_session_in_the_order_appended(backend: Backend) -> None:
    store = backend.open()
    first = store.append_events("s1", [call("a"), call("b"), NewEvent(kind="user", content="hi")])
    second = store.append_events("s1", [call("c"), call("d")])
    other = store.append_events("s2", [call("a")])
    assert [e.seq for e in first] == [1, 2, 3] and [e.seq for e in second] == [4, 5]
    assert [e.seq for e in other] == [1]
    assert store.session_events("s1") == [*first, *second]
    assert [e.call_id for e in store.session_events("s1")] == ["a", "b", "", "c", "d"]


def test_after_returns_only_the_later_events(backend: Backend) -> None:
    store = backend.open()
    store.append_events("s1", [call(f"c{i}") for i in range(5)])
    assert seqs(store, "s1", after=3) == [4, 5]
    assert seqs(store, "s1", after=5) == []
    assert seqs(store, "s1", after=0) == [1, 2, 3, 4, 5]


def test_a_session_never_written_reads_as_empty(backend: Backend) -> None:
    assert backend.open().session_events("never-written") == []


def test_a_result_that_answers_a_call_of_the_same_append_gets_that_calls_number(backend: Backend) -> None:
    store = backend.open()
    store.append_events("s1", [call("x"), call("y")])
    added = store.append_events("s1", [call("r1"), NewEvent(kind="user", content="hm"), result("r1", answers=-2)])
    assert [e.seq for e in added] == [3, 4, 5] and added[2].answers == 3
    assert store.session_events("s1", after=4)[0].answers == 3


def test_a_relative_answer_that_points_at_no_call_of_the_append_appends_nothing(backend: Backend) -> None:
    store = backend.open()
    store.append_events("s1", [call("x")])
    with pytest.raises(ValueError, match="no call of this append"):
        store.append_events("s1", [NewEvent(kind="user", content="hi"), result("x", answers=-2)])
    assert seqs(store, "s1") == [1]


def test_what_a_tool_returned_comes_back_exactly(backend: Backend) -> None:
    """Arguments as a JSON object, content as text: unicode, a NUL character, big integers, nesting."""
    store = backend.open()
    arguments = {"name": "Zoë 🚀", "n": 2**63 - 1, "nested": {"list": [1, 2.5, None, True], "empty": {}}}
    content = 'line 1\nline 2 with a NUL \x00 and "quotes" and \\ backslash'
    store.append_events(
        "s1", [call("c1", "send_credit", **arguments), result("c1", answers=-1, content=content, is_error=True)]
    )
    got = store.session_events("s1")
    assert got[0].arguments == arguments and got[0].tool == "send_credit"
    assert got[1].content == content and got[1].is_error is True and got[1].answers == 1
    assert got[0].at == backend.clock[0]


# -- bounds -------------------------------------------------------------------------


def test_an_append_past_the_event_limit_raises_and_appends_nothing(backend: Backend) -> None:
    store = backend.open(max_events=3)
    store.append_events("s1", [call("a"), call("b")])
    with pytest.raises(SessionFull):
        store.append_events("s1", [call("c"), call("d")])
    assert seqs(store, "s1") == [1, 2]
    assert [e.seq for e in store.append_events("s1", [call("c")])] == [3]
    with pytest.raises(SessionFull):
        store.append_events("s2", [call(str(i)) for i in range(4)])
    assert store.session_events("s2") == []


def test_a_session_not_written_for_the_retention_is_evicted_and_said_so(backend: Backend) -> None:
    store = backend.open(retention_s=60)
    store.append_events("old", [call("a")])
    backend.tick(30)
    store.append_events("kept", [call("a")])
    backend.tick(31)  # "old" last written 61 s ago, "kept" 31 s ago
    with pytest.raises(SessionEvicted):
        store.session_events("old")
    with pytest.raises(SessionEvicted):
        store.append_events("old", [call("b")])
    assert seqs(store, "kept") == [1]
    assert seqs(backend.open(retention_s=60), "kept") == [1]  # another replica agrees
    with pytest.raises(SessionEvicted):
        backend.open(retention_s=60).session_events("old")


def test_writing_a_session_keeps_it_alive(backend: Backend) -> None:
    store = backend.open(retention_s=60)
    for i in range(5):
        store.append_events("busy", [call(f"c{i}")])
        backend.tick(50)
    assert seqs(store, "busy") == [1, 2, 3, 4, 5]


def test_an_evicted_id_stays_evicted_after_its_events_are_swept(backend: Backend) -> None:
    """The tombstone: the sweep that drops the record keeps its id, so it never reads as a new, empty session."""
    store = backend.open(retention_s=60)
    store.append_events("old", [call("a")])
    backend.tick(61)
    for i in range(3):  # new sessions sweep the ones past retention
        store.append_events(f"new-{i}", [call("a")])
    for handle in (store, backend.open(retention_s=60)):
        with pytest.raises(SessionEvicted):
            handle.session_events("old")
        with pytest.raises(SessionEvicted):
            handle.append_events("old", [call("b")])


def test_past_max_sessions_the_least_recently_written_is_evicted(backend: Backend) -> None:
    store = backend.open(max_sessions=2)
    store.append_events("a", [call("1")])
    backend.tick(1)
    store.append_events("b", [call("1")])
    backend.tick(1)
    store.append_events("a", [call("2")])  # "b" is now the least recently written
    backend.tick(1)
    store.append_events("c", [call("1")])
    with pytest.raises(SessionEvicted):
        store.session_events("b")
    assert seqs(store, "a") == [1, 2] and seqs(store, "c") == [1]


def test_a_store_that_fails_raises_and_the_guard_blocks_the_write(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("the memory store has no connection to lose")
    store = backend.open()
    store.append_events("s1", [call("a")])
    store.close()
    if backend.name == "sqlite-file":
        Path(backend.url.removeprefix("sqlite:///")).write_bytes(b"not a database" * 512)
    with pytest.raises(LedgerUnavailable):
        store.append_events("s1", [call("b")])
    with pytest.raises(LedgerUnavailable):
        store.session_events("s1")
    guard = replica(store)
    decision = guard.check(credit("c1"), Trajectory(messages=[asked(credit("c1"))]), session="s1")
    assert decision.outcome == "block" and "session store" in (decision.error or "")
    read = ToolCall(id="r1", name="get_account", arguments={"account_id": "A1"})
    assert guard.check(read, Trajectory(messages=[asked(read)]), session="s1").outcome == "allow"


# -- several writers ---------------------------------------------------------------


def _spawn(job: dict[str, Any]) -> multiprocessing.process.BaseProcess:
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(
        target=runpy.run_path, args=(WORKER,), kwargs={"init_globals": {"JOB": job}, "run_name": "__main__"}
    )
    process.start()
    return process


@pytest.mark.slow
def test_writers_appending_at_once_to_one_session_get_unique_contiguous_numbers(backend: Backend) -> None:
    """Two processes (threads for the memory store) each append 60 call-and-result pairs to one session."""
    store = backend.open()
    writers, count = 2, 60
    if backend.name == "memory":
        barrier = threading.Barrier(writers)

        def write(tag: str) -> None:
            barrier.wait()
            for i in range(count):
                store.append_events("shared", [call(f"{tag}-{i}"), result(f"{tag}-{i}", answers=-1)])

        threads = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    else:
        process_barrier = multiprocessing.get_context("spawn").Barrier(writers)
        jobs = [
            {"url": backend.url, "session": "shared", "count": count, "tag": f"w{n}", "barrier": process_barrier}
            for n in range(writers)
        ]
        processes = [_spawn(job) for job in jobs]
        for process in processes:
            process.join(120)
            assert process.exitcode == 0
    events = store.session_events("shared")
    assert [e.seq for e in events] == list(range(1, 2 * writers * count + 1))
    by_seq = {e.seq: e for e in events}
    for event in events:
        if event.kind == "result":  # each pair stayed together: its result answers the call just before it
            assert event.answers == event.seq - 1 and by_seq[event.answers].call_id == event.call_id
    for n in range(writers):
        mine = [e.call_id for e in events if e.kind == "call" and e.call_id.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}" for i in range(count)]


# -- replicas: two guards on one store ----------------------------------------------


def replica(store: SessionStore) -> Guard:
    """A guard on ``store`` that never waits for another check (replicas share only the store)."""
    return make_guard(sessions=store, session_wait_s=0)


def test_a_write_allowed_on_one_replica_counts_on_the_other(backend: Backend) -> None:
    """The once-rule holds across replicas: the second credit is blocked on the replica that never saw the first."""
    first, second = replica(backend.open()), replica(backend.open())
    assert first.check(credit("c1"), Trajectory(messages=[asked(credit("c1"))]), session="conv").outcome == "allow"
    assert first.record_result("conv", "c1", '{"ok": true}')
    trimmed = [Message(role="user", content="one more credit please"), asked(credit("c2"))]  # what the host kept
    decision = second.check(credit("c2"), Trajectory(messages=trimmed), session="conv")
    assert decision.outcome == "block" and decision.stage == "gate"
    other = second.check(credit("c1"), Trajectory(messages=[asked(credit("c1"))]), session="another-conv")
    assert other.outcome == "allow"


def test_a_write_whose_outcome_is_unknown_on_one_replica_counts_on_the_other(backend: Backend) -> None:
    first, second = replica(backend.open()), replica(backend.open())
    assert first.check(credit("c1"), Trajectory(messages=[asked(credit("c1"))]), session="conv").outcome == "allow"
    decision = second.check(credit("c2"), Trajectory(messages=[asked(credit("c2"))]), session="conv")
    assert decision.outcome == "block"
    assert "not known (no result yet)" in (decision.message or "")
