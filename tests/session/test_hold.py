"""One session's decisions, one at a time: ``SessionStore.hold`` in every store, across threads and processes.

Two calls of one assistant message, checked at the same moment by two threads
or two ``serve`` replicas sharing a store, must be judged as one process
judges them: one after the other. A store's ``hold`` gives the caller the
session alone until it releases; it waits at most ``timeout`` seconds (None
after that), never blocks another session, and a holder that dies leaves no
lock behind. The process tests run real spawned processes on a SQLite file and
on a real PostgreSQL server.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policyguard.enforcement.store import LedgerUnavailable, SQLiteStore
from policyguard.enforcement.storeurl import open_store
from policyguard.errors import ConfigError
from policyguard.session import MemorySessionStore, SessionHold, SessionStore
from policyguard.session import holds as holds_module

WORKER = str(Path(__file__).with_name("hold_worker.py"))
BACKENDS = ["memory", "sqlite-memory", "sqlite-file", "postgres"]
SHARED = ["sqlite-file", "postgres"]  # storage other processes can open


class Storage:
    """Opens stores on one storage; each ``open()`` is another replica's store (one object for memory)."""

    def __init__(self, name: str, url: str, request: pytest.FixtureRequest) -> None:
        self.name, self.url, self._request = name, url, request
        self._single: Any = None

    def open(self) -> Any:
        if self.name in ("memory", "sqlite-memory"):
            if self._single is None:
                self._single = MemorySessionStore() if self.name == "memory" else SQLiteStore(":memory:")
            return self._single
        store = open_store(self.url)
        self._request.addfinalizer(store.close)
        return store


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return _storage(request, tmp_path)


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return _storage(request, tmp_path)


def _storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    name = request.param
    url = str(request.getfixturevalue("pg_url")) if name == "postgres" else f"sqlite:///{tmp_path / 'holds.db'}"
    return Storage(name, url if name in SHARED else "", request)


def held(store: SessionStore, session_id: str, timeout: float = 0) -> SessionHold:
    hold = store.hold(session_id, timeout)
    assert hold is not None, f"{session_id} should be free"
    return hold


def in_thread(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(action()), daemon=True)
    thread.start()
    return thread, out


# -- one process --------------------------------------------------------------------


def test_every_store_implements_the_hold(storage: Storage) -> None:
    store = storage.open()
    assert isinstance(store, SessionStore)
    hold = held(store, "s1")
    assert isinstance(hold, SessionHold)
    hold.release()


def test_a_held_session_is_refused_to_another_caller_until_released(storage: Storage) -> None:
    first, second = storage.open(), storage.open()
    hold = held(first, "s1")
    assert second.hold("s1", 0) is None
    hold.release()
    held(second, "s1").release()


def test_a_waiting_caller_gets_the_session_once_the_holder_releases(storage: Storage) -> None:
    first, second = storage.open(), storage.open()
    hold = held(first, "s1")
    released = threading.Event()

    def wait() -> bool:
        got = second.hold("s1", 30)
        inside_after_release = released.is_set()
        assert got is not None
        got.release()
        return inside_after_release

    thread, out = in_thread(wait)
    time.sleep(0.3)
    assert thread.is_alive(), "the second caller must wait while the first holds the session"
    released.set()
    hold.release()
    thread.join(30)
    assert out == [True]


def test_a_hold_that_stays_taken_returns_none_after_the_timeout(storage: Storage) -> None:
    store = storage.open()
    hold = held(store, "s1")
    thread, out = in_thread(lambda: (time.monotonic(), storage.open().hold("s1", 0.3), time.monotonic()))
    thread.join(30)
    start, got, end = out[0]
    assert got is None and end - start >= 0.25
    hold.release()


def test_another_session_is_not_blocked(storage: Storage) -> None:
    first, second = storage.open(), storage.open()
    hold = held(first, "s1")
    other = held(second, "s2")
    other.release()
    hold.release()


def test_release_is_idempotent(storage: Storage) -> None:
    store = storage.open()
    hold = held(store, "s1")
    hold.release()
    again = held(store, "s1")
    hold.release()  # a second release of the first hold must not free the second one
    assert storage.open().hold("s1", 0) is None
    again.release()
    again.release()
    held(store, "s1").release()


def test_threads_contending_on_one_session_are_inside_one_at_a_time(storage: Storage) -> None:
    """Eight threads on four store handles, 25 rounds each: a read, a pause and a write that loses updates if two overlap."""
    stores = [storage.open() for _ in range(4)]
    state = {"counter": 0, "inside": 0, "most": 0}
    barrier = threading.Barrier(8)

    def work(store: SessionStore) -> None:
        barrier.wait()
        for _ in range(25):
            hold = held(store, "shared", 30)
            state["inside"] += 1
            state["most"] = max(state["most"], state["inside"])
            value = state["counter"]
            time.sleep(0.0005)
            state["counter"] = value + 1
            state["inside"] -= 1
            hold.release()

    threads = [threading.Thread(target=work, args=(stores[n % 4],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert state == {"counter": 200, "inside": 0, "most": 1}


def test_a_session_id_is_checked(storage: Storage) -> None:
    with pytest.raises(ConfigError):
        storage.open().hold("", 0)


def test_the_memory_stores_lock_table_keeps_only_sessions_held_or_waited_for() -> None:
    store = MemorySessionStore()
    for n in range(500):
        held(store, f"s{n}").release()
    hold = held(store, "kept")
    assert store.hold("kept", 0) is None
    assert len(store._holds) == 1
    hold.release()
    assert len(store._holds) == 0


def test_sessions_whose_hash_meets_wait_for_each_other_and_neither_is_let_in_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SQLite lock file has one byte per hash: a collision serializes two sessions, nothing worse."""
    monkeypatch.setattr(holds_module, "offset", lambda key: 7)
    store = SQLiteStore(str(tmp_path / "s.db"))
    first = held(store, "s1")
    assert store.hold("s2", 0) is None
    first.release()
    second = held(store, "s2")
    assert store.hold("s1", 0) is None
    second.release()
    store.close()


def test_a_closed_sqlite_store_still_keeps_the_holds_of_another_store_on_the_file(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process has on it: the stores share one."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    keeper, other = open_store(url), open_store(url)
    hold = held(other, "s1")
    held(keeper, "s2").release()
    keeper.close()
    assert _child_takes(url, "s1", timeout=0) is False
    hold.release()
    assert _child_takes(url, "s1", timeout=0) is True
    other.close()


def test_a_sqlite_lock_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    (tmp_path / "s.db.holds").mkdir()
    with pytest.raises(LedgerUnavailable):
        store.hold("s1", 0)
    store.close()


# -- real processes -------------------------------------------------------------------


def _spawn(job: dict[str, Any]) -> multiprocessing.process.BaseProcess:
    ctx = multiprocessing.get_context("spawn")
    kwargs = {"init_globals": {"JOB": job}, "run_name": "__main__"}
    process = ctx.Process(target=runpy.run_path, args=(WORKER,), kwargs=kwargs, daemon=True)
    process.start()
    return process


def _events() -> tuple[Any, Any]:
    ctx = multiprocessing.get_context("spawn")
    return ctx.Event(), ctx.Event()


def _child_takes(url: str, session_id: str, *, timeout: float) -> bool:
    """Whether a new process gets the session within ``timeout`` (it releases at once)."""
    got, go = _events()
    go.set()
    process = _spawn({"kind": "wait", "url": url, "session": session_id, "timeout": timeout, "held": got, "go": go})
    process.join(60)
    assert process.exitcode == 0
    return bool(got.is_set())


@pytest.mark.slow
def test_processes_contending_on_one_session_are_inside_one_at_a_time(shared: Storage, tmp_path: Path) -> None:
    """Three processes, 40 rounds each, on one session: never two inside, no update lost."""
    barrier = multiprocessing.get_context("spawn").Barrier(3)
    job = {"kind": "count", "url": shared.url, "session": "shared", "rounds": 40, "dir": str(tmp_path)}
    processes = [_spawn({**job, "barrier": barrier}) for _ in range(3)]
    for process in processes:
        process.join(180)
        assert process.exitcode == 0
    assert not (tmp_path / "overlaps").exists()
    assert (tmp_path / "counter").read_text() == "120"


@pytest.mark.slow
def test_a_process_waiting_for_a_session_gets_it_when_the_holder_releases(shared: Storage) -> None:
    store = shared.open()
    hold = held(store, "s1")
    got, go = _events()
    process = _spawn({"kind": "wait", "url": shared.url, "session": "s1", "timeout": 60, "held": got, "go": go})
    assert not got.wait(3), "the other process must wait while this one holds the session"
    assert process.is_alive()
    other = held(store, "s2")  # and this process still takes other sessions
    hold.release()
    assert got.wait(30), "the waiting process gets the session once it is released"
    assert store.hold("s1", 0) is None  # now the other process holds it
    go.set()
    process.join(60)
    assert process.exitcode == 0
    held(store, "s1").release()
    other.release()


@pytest.mark.slow
def test_a_process_that_times_out_gets_none(shared: Storage) -> None:
    store = shared.open()
    hold = held(store, "s1")
    assert _child_takes(shared.url, "s1", timeout=0.5) is False
    assert _child_takes(shared.url, "s2", timeout=0) is True
    hold.release()


@pytest.mark.slow
def test_a_killed_holder_leaves_no_lock_behind(shared: Storage) -> None:
    store = shared.open()
    got, _ = _events()
    process = _spawn({"kind": "keep", "url": shared.url, "session": "s1", "held": got})
    assert got.wait(60)
    assert store.hold("s1", 0) is None
    os.kill(process.pid or 0, signal.SIGKILL)
    process.join(30)
    hold = store.hold("s1", 30)
    assert hold is not None, "the dead holder's lock must be gone"
    hold.release()


# -- PostgreSQL connections ---------------------------------------------------------------


def _terminate_hold_connections(url: str) -> int:
    import psycopg

    from policyguard.enforcement.pgholds import APPLICATION

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
        ).fetchall()
    return len(rows)


def test_a_postgres_hold_whose_connection_dies_is_released_by_the_server(pg_url: str) -> None:
    first, second = open_store(pg_url), open_store(pg_url)
    hold = held(first, "s1")
    assert _terminate_hold_connections(pg_url) == 1
    hold.release()  # the unlock fails on the dead connection: never raised, the connection is dropped
    again = second.hold("s1", 10)
    assert again is not None
    again.release()
    first.close()
    second.close()


def test_a_postgres_store_replaces_an_idle_hold_connection_the_server_dropped(pg_url: str) -> None:
    store = open_store(pg_url)
    held(store, "s1").release()  # its connection now waits idle for the next hold
    assert _terminate_hold_connections(pg_url) == 1
    held(store, "s1").release()
    store.close()
