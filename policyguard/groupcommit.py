"""Group commit: the writes of many threads share one transaction, so one fsync makes a whole batch durable.

A durable commit costs an fsync (0.1-4 ms on the disks measured here), and
SQLite takes one write transaction at a time, so concurrent callers that each
commit on their own queue behind each other's fsyncs. Databases solve this by
letting one flush cover every transaction that was waiting: that is what
:class:`GroupCommitter` does for :class:`policyguard.store.SQLiteStore`.

Each write is a function of a connection (``op(conn) -> result``). The caller
queues it and waits; one committer thread takes everything queued, runs it in
one ``BEGIN IMMEDIATE`` transaction on its own connection, in arrival order,
and answers every caller only after ``COMMIT`` returned. So a caller never sees
the result of a write that is not yet durable (with ``synchronous=FULL``):
the claim is on disk before the tool runs, exactly as without batching.

Failure semantics (fail closed, no caller is answered with undurable data):

- an op raises inside the batch: the batch is rolled back, then each of its
  ops runs again in a transaction of its own, so only the failing caller gets
  the error and the others their normal result. Every op reads the state it
  decides on inside its transaction, so running it again is the same decision
  it would have made alone;
- ``BEGIN`` or ``COMMIT`` fails: every caller of the batch gets the error
  (:class:`policyguard.store.LedgerUnavailable` from the store): inconclusive;
- no answer within ``wait_s``: the caller gets the error. An op still queued
  is withdrawn (nothing was written); one already running may still commit, and
  what it wrote is what a crash would leave (a spent nonce, a pending claim),
  both of which refuse rather than allow;
- the process dies mid-batch: nothing of the batch was acknowledged, and SQLite
  keeps the transaction all or nothing.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_QUEUED, _TAKEN, _WITHDRAWN = 0, 1, 2


class _Pending:
    __slots__ = ("op", "done", "result", "error", "state")

    def __init__(self, op: Callable[[sqlite3.Connection], Any]) -> None:
        self.op = op
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.state = _QUEUED


class GroupCommitter:
    """Runs queued write operations of many threads in shared transactions, one COMMIT per batch.

    ``connect`` opens the committer's own connection (with the store's
    pragmas); ``unavailable(message)`` builds the error callers get when the
    database cannot be written. ``max_batch`` bounds a transaction's size.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        unavailable: Callable[[str], Exception],
        *,
        wait_s: float = 30.0,
        max_batch: int = 512,
    ) -> None:
        self._connect = connect
        self._unavailable = unavailable
        self.wait_s = wait_s
        self.max_batch = max_batch
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._pid = os.getpid()
        self.batches = 0
        self.operations = 0

    def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Queue ``op``, wait until the batch holding it committed, and return its result (or raise its error)."""
        if os.getpid() != self._pid:
            raise self._unavailable("this store was opened before a fork; open a new store in this process")
        item = _Pending(op)
        with self._cond:
            if self._closed:
                raise self._unavailable("the store is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="policyguard-group-commit", daemon=True)
                self._thread.start()
            self._queue.append(item)
            self._cond.notify()
        if not item.done.wait(self.wait_s):
            with self._cond:
                if item.state == _QUEUED:
                    item.state = _WITHDRAWN
                    raise self._unavailable(f"no commit within {self.wait_s:g} s; the write was withdrawn")
            raise self._unavailable(f"no commit within {self.wait_s:g} s; whether the write landed is unknown")
        if item.error is not None:
            raise item.error
        result: T = item.result
        return result

    def close(self, timeout_s: float = 10.0) -> None:
        """Commit what is queued, stop the committer thread and close its connection."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # -- the committer thread -------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    break
                batch = [item for item in self._queue[: self.max_batch] if item.state == _QUEUED]
                del self._queue[: self.max_batch]
                for item in batch:
                    item.state = _TAKEN
            try:
                self._commit(batch)
            except BaseException as exc:  # never leave a caller waiting on a dead thread
                for item in batch:
                    if not item.done.is_set():
                        item.error = self._unavailable(f"the committer failed: {type(exc).__name__}: {exc}")
                        item.done.set()
                self._drop_connection()
        self._drop_connection()

    def _commit(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        try:
            conn = self._conn if self._conn is not None else self._open()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._answer_all(batch, self._unavailable(f"cannot begin a transaction: {exc}"))
            self._drop_connection()
            return
        for item in batch:
            try:
                item.result = item.op(conn)
            except BaseException:
                self._rollback(conn)
                self._one_by_one(conn, batch)
                return
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            self._answer_all(batch, self._unavailable(f"commit failed, nothing of this batch was written: {exc}"))
            return
        self.batches += 1
        self.operations += len(batch)
        for item in batch:
            item.done.set()

    def _one_by_one(self, conn: sqlite3.Connection, batch: list[_Pending]) -> None:
        """After a failed batch: each op in its own transaction, so one caller's failure is only its own."""
        for item in batch:
            item.result = item.error = None
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    item.result = item.op(conn)
                except BaseException:
                    self._rollback(conn)
                    raise
                conn.execute("COMMIT")
                self.batches += 1
                self.operations += 1
            except sqlite3.Error as exc:
                self._rollback(conn)
                item.error = self._unavailable(str(exc))
            except Exception as exc:
                item.error = exc
            item.done.set()

    def _answer_all(self, batch: list[_Pending], error: Exception) -> None:
        for item in batch:
            item.result, item.error = None, error
            item.done.set()

    def _open(self) -> sqlite3.Connection:
        self._conn = self._connect()
        return self._conn

    def _rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass
