"""Group commit: the writes of many threads share one transaction, so one fsync makes a whole batch durable.

A durable commit costs an fsync (0.1-4 ms on the disks measured here), and
SQLite takes one write transaction at a time, so concurrent callers that each
commit on their own queue behind each other's fsyncs (and, past the busy
timeout, fail). Databases solve this by letting one flush cover every
transaction that was waiting: that is what :class:`GroupCommitter` does for
:class:`policyguard.enforcement.store.SQLiteStore`.

Each write is a function of a connection (``op(conn) -> result``). Callers
queue their ops; the caller at the head of the queue is the *leader*: it takes
everything queued (its own op first), runs it in one ``BEGIN IMMEDIATE``
transaction on the shared connection, in arrival order, commits, answers the
others and hands the lead to the next caller in the queue (LevelDB's writer
queue). A lone caller therefore commits on its own thread with no hand-off; under
load, one fsync covers the whole queue. No caller is answered before the
``COMMIT`` of its batch returned, so with ``synchronous=FULL`` a claim is on
disk before the tool runs, exactly as without batching.

Failure semantics (fail closed; no caller is answered with data that is not durable):

- an op raises inside the batch: the batch is rolled back, then each of its
  ops runs again in a transaction of its own, so only the failing caller gets
  the error and the others their normal result. Every op reads the state it
  decides on inside its transaction, so running it again makes the decision it
  would have made alone;
- ``BEGIN`` or ``COMMIT`` fails: every caller of the batch gets the error
  (:class:`policyguard.enforcement.store.LedgerUnavailable` from the store): inconclusive;
- no answer within ``wait_s``: the caller gets the error. An op still queued is
  withdrawn (nothing was written); one already taken may still commit, and what
  it wrote is what a crash would leave (a spent nonce, a pending claim), both of
  which refuse rather than allow;
- the process dies mid-batch: nothing of the batch was acknowledged, and SQLite
  keeps the transaction all or nothing.

Deferred writes (:meth:`GroupCommitter.defer`) are for writes whose loss fails
closed, such as marking a claimed effect completed (lost, the claim stays
``pending`` and nobody may re-send it): the caller does not wait; the write
rides in the next batch, or is flushed by a timer after ``flush_after_s``, by
:meth:`GroupCommitter.flush` or by :meth:`GroupCommitter.close`. A sequential
caller thus pays one fsync per call instead of two.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_QUEUED, _TAKEN, _DONE = 0, 1, 2


class _Pending:
    """One queued op. ``wake`` is made (under the committer's lock) only when its caller has to wait."""

    __slots__ = ("op", "wake", "result", "error", "state")

    def __init__(self, op: Callable[[sqlite3.Connection], Any]) -> None:
        self.op = op
        self.wake: threading.Condition | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.state = _QUEUED

    def notify(self) -> None:
        if self.wake is not None:
            self.wake.notify()


class GroupCommitter:
    """Runs the queued write operations of many threads in shared transactions, one COMMIT per batch.

    ``connect`` opens the shared connection (with the store's pragmas);
    ``unavailable(message)`` builds the error callers get when the database
    cannot be written. ``max_batch`` bounds a transaction's size.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        unavailable: Callable[[str], Exception],
        *,
        wait_s: float = 30.0,
        max_batch: int = 512,
        flush_after_s: float = 0.05,
    ) -> None:
        self._connect = connect
        self._unavailable = unavailable
        self.wait_s = wait_s
        self.max_batch = max_batch
        self.flush_after_s = flush_after_s
        self._lock = threading.Lock()
        self._queue: deque[_Pending] = deque()
        self._deferred: list[_Pending] = []
        self._idle = threading.Condition(self._lock)
        self._flusher: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._leading = False
        self._pid = os.getpid()
        self.batches = 0
        self.operations = 0

    def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Queue ``op``, wait until the batch holding it committed, and return its result (or raise its error)."""
        if os.getpid() != self._pid:
            raise self._unavailable("this store was opened before a fork; open a new store in this process")
        item = _Pending(op)
        deadline = time.monotonic() + self.wait_s
        with self._lock:
            if self._closed:
                raise self._unavailable("the store is closed")
            self._queue.append(item)
            while item.state != _DONE and (self._leading or self._queue[0] is not item):
                left = deadline - time.monotonic()
                if left <= 0:
                    return self._give_up(item)
                if item.wake is None:
                    item.wake = threading.Condition(self._lock)
                item.wake.wait(left)
            if item.state != _DONE:  # at the head of the queue and nobody leads: lead a batch
                self._leading = True
                batch, self._deferred = self._deferred, []
                batch += [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                for pending in batch:
                    pending.state = _TAKEN
        if item.state != _DONE:
            self._lead(batch)
        if item.error is not None:
            raise item.error
        result: T = item.result
        return result

    def defer(self, op: Callable[[sqlite3.Connection], object]) -> None:
        """Queue ``op`` for the next batch without waiting for it; its result and errors are dropped."""
        if os.getpid() != self._pid:
            raise self._unavailable("this store was opened before a fork; open a new store in this process")
        with self._lock:
            if self._closed:
                raise self._unavailable("the store is closed")
            self._deferred.append(_Pending(op))
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_soon, name="policyguard-flush", daemon=True)
                self._flusher.start()
            elif len(self._deferred) == 1:
                self._idle.notify()

    def flush(self) -> None:
        """Return once every deferred write made before this call has been committed (or has failed)."""
        with self._lock:
            needed = bool(self._deferred) or self._leading
        if needed:
            self.run(lambda conn: None)

    def _flush_soon(self) -> None:
        while True:
            with self._lock:
                while not self._deferred and not self._closed:
                    self._idle.wait()
                if self._closed:
                    return
            time.sleep(self.flush_after_s)
            try:
                self.flush()
            except Exception:  # a lost deferred write leaves what a crash would: it fails closed
                pass

    def close(self) -> None:
        """Commit deferred writes, refuse new ones, close the shared connection once no batch is running."""
        try:
            self.flush()
        except Exception:
            pass
        with self._lock:
            self._closed = True
            self._idle.notify()
            if self._leading or self._queue:  # the last leader closes the connection when the queue drains
                return
            self._drop_connection()

    # -- leading a batch ------------------------------------------------------

    def _lead(self, batch: list[_Pending]) -> None:
        try:
            self._commit(batch)
        except BaseException as exc:  # never leave a follower waiting on a leader that died
            for pending in batch:
                if pending.error is None and pending.state != _DONE:
                    pending.result = None
                    pending.error = self._unavailable(f"the batch failed: {type(exc).__name__}: {exc}")
            self._drop_connection()
        finally:
            with self._lock:
                self._leading = False
                for pending in batch:
                    pending.state = _DONE
                    pending.notify()
                if self._queue:
                    self._queue[0].notify()
                elif self._closed:
                    self._drop_connection()

    def _give_up(self, item: _Pending) -> Any:
        """Called with the lock held when the caller's wait ran out."""
        if item.state == _QUEUED:
            self._queue.remove(item)
            if self._queue:
                self._queue[0].notify()  # it may be the head now
            raise self._unavailable(f"no commit within {self.wait_s:g} s; the write was withdrawn")
        raise self._unavailable(f"no commit within {self.wait_s:g} s; whether the write landed is unknown")

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            conn = self._conn if self._conn is not None else self._open()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._answer_all(batch, self._unavailable(f"cannot begin a transaction: {exc}"))
            self._drop_connection()
            return
        for pending in batch:
            try:
                pending.result = pending.op(conn)
            except Exception:
                self._rollback(conn)
                self._one_by_one(batch)
                return
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            self._answer_all(batch, self._unavailable(f"commit failed, nothing of this batch was written: {exc}"))
            return
        self.batches += 1
        self.operations += len(batch)

    def _one_by_one(self, batch: list[_Pending]) -> None:
        """After a failed batch: each op in its own transaction, so one caller's failure is only its own."""
        for pending in batch:
            pending.result = pending.error = None
            try:
                conn = self._conn if self._conn is not None else self._open()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    pending.result = pending.op(conn)
                except BaseException:
                    self._rollback(conn)
                    raise
                conn.execute("COMMIT")
                self.batches += 1
                self.operations += 1
            except sqlite3.Error as exc:
                if self._conn is not None:
                    self._rollback(self._conn)
                pending.result, pending.error = None, self._unavailable(str(exc))
            except Exception as exc:
                pending.result, pending.error = None, exc

    def _answer_all(self, batch: list[_Pending], error: Exception) -> None:
        for pending in batch:
            pending.result, pending.error = None, error

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
