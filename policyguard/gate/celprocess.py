"""Evaluate a costly CEL check in a pool of worker processes, each killed when its check runs too long.

The engine holds the interpreter lock for a whole evaluation and cannot be
interrupted, so a thread timeout does not stop it and every other request of
the process waits. A check whose estimated cost (:mod:`policyguard.gate.celcost`)
is over the in-process budget therefore runs here instead, in one of
:func:`settings`' ``workers`` processes (``python -m policyguard.gate.celworker``,
default: one per core), the caller waiting on a pipe (which frees the
interpreter lock).

* **One deadline per check, the wait included.** The time given to
  :func:`evaluate` starts when it is called: time spent waiting for a free
  worker counts, so a decision never waits longer than its budget.
* **A bounded queue.** At most ``queue`` checks wait for a worker; one more is
  refused at once with :class:`IsolatedBusy` (the gate blocks the call, naming
  the reason), never left to wait.
* **Cheap checks first.** Checks estimated over :data:`LARGE_STEPS` may hold at
  most ``workers - 1`` processes (when there are two or more), and a waiting
  cheaper check is served before them: a flood of over-budget checks cannot
  take every worker from an honest one. Cheap checks wait in arrival order;
  among the costly ones the check with the most time left goes first, so a
  freed worker is not spent on a check about to run out of time (killed at
  once, its slot restarted: a process start, ~85 ms of CPU, per such check).
* **A killed worker holds no one.** A worker past its deadline is killed and its
  slot restarted in the background; the other workers go on.

Every failure fails closed: the caller gets an exception, never a value.
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

START_TIMEOUT_S = 60.0  # a cold worker imports the engine; that time is not the check's
HEADER = struct.Struct("!Q")
LARGE_STEPS = 1_000_000  # ~0.5 s of engine time: a check estimated over it is served after cheaper ones
WORKERS_ENV = "POLICYGUARD_CEL_WORKERS"
QUEUE_ENV = "POLICYGUARD_CEL_QUEUE"


class IsolatedTimeout(Exception):
    """No answer in time (waiting for a worker included); a worker that was evaluating has been killed."""


class IsolatedBusy(Exception):
    """The queue for a worker is full: the check was refused at once, not evaluated."""


class IsolatedError(Exception):
    """The check failed in the worker; the message is its :class:`~policyguard.gate.cel.CelEvalError`'s."""


@dataclass(frozen=True)
class PoolSettings:
    """How many worker processes evaluate checks apart, and how many checks may wait for one."""

    workers: int
    queue: int


def default_settings() -> PoolSettings:
    """Workers: the core count (``$POLICYGUARD_CEL_WORKERS``); queue: 4 per worker (``$POLICYGUARD_CEL_QUEUE``)."""
    workers = int(os.environ.get(WORKERS_ENV) or os.cpu_count() or 1)
    queue = int(os.environ.get(QUEUE_ENV) or 4 * max(1, workers))
    return PoolSettings(workers=max(1, workers), queue=max(0, queue))


@dataclass(frozen=True, eq=False)
class _Ticket:
    """A place in a line for a worker, with the deadline of the check that holds it."""

    deadline: float


class _Pool:
    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self.large_cap = max(1, settings.workers - 1)
        self.cond = threading.Condition()
        self.idle: list[subprocess.Popen[bytes] | None] = [None] * settings.workers  # None: start on first use
        self.small: collections.deque[_Ticket] = collections.deque()
        self.large: collections.deque[_Ticket] = collections.deque()
        self.large_running = 0
        self.closed = False

    def acquire(self, large: bool, deadline: float) -> subprocess.Popen[bytes] | None:
        ticket = _Ticket(deadline)
        with self.cond:
            if len(self.small) + len(self.large) >= self.settings.queue and not self._eligible(large, None):
                raise IsolatedBusy(
                    f"the {self.settings.queue} places waiting for a worker process are taken (busy; refused at once)"
                )
            line = self.large if large else self.small
            line.append(ticket)
            try:
                while not self._eligible(large, ticket):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise IsolatedTimeout("no worker process was free before the deadline")
                    self.cond.wait(left)
            finally:
                line.remove(ticket)
                self.cond.notify_all()
            if large:
                self.large_running += 1
            return self.idle.pop()

    def _eligible(self, large: bool, ticket: _Ticket | None) -> bool:
        if not self.idle:
            return False
        if not large:
            return not self.small or self.small[0] is ticket or ticket is None
        if self.small or self.large_running >= self.large_cap:
            return False
        return not self.large or max(self.large, key=lambda waiting: waiting.deadline) is ticket or ticket is None

    def release(self, worker: subprocess.Popen[bytes] | None, large: bool) -> None:
        with self.cond:
            if large:
                self.large_running -= 1
            if self.closed:
                if worker is not None:
                    _stop(worker)
                return
            self.idle.append(worker)
            self.cond.notify_all()

    def restart(self, large: bool) -> None:
        """Start a fresh worker for a killed one's slot, off the caller's path; the slot is free once it is up."""

        def run() -> None:
            try:
                worker: subprocess.Popen[bytes] | None = _start()
            except IsolatedError:
                worker = None  # the next caller tries again
            self.release(worker, large)

        threading.Thread(target=run, name="policyguard-cel-restart", daemon=True).start()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            workers, self.idle = self.idle, []
        for worker in workers:
            if worker is not None:
                _stop(worker)


_pool_lock = threading.Lock()
_pool: _Pool | None = None


def configure(workers: int | None = None, queue: int | None = None) -> PoolSettings:
    """Set the pool's size and queue (``None``: the default); running workers of the old pool are stopped."""
    global _pool
    default = default_settings()
    settings = PoolSettings(
        workers=max(1, workers if workers is not None else default.workers),
        queue=max(0, queue if queue is not None else (4 * workers if workers is not None else default.queue)),
    )
    with _pool_lock:
        old, _pool = _pool, _Pool(settings)
    if old is not None:
        old.close()
    return settings


def settings() -> PoolSettings:
    """The settings of the pool in use (created with :func:`default_settings` on first use)."""
    return _current().settings


def _current() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(default_settings())
        return _pool


def evaluate(source: str, variables: Mapping[str, Any], timeout_s: float, cost: int = 0) -> Any:
    """The value of ``source`` over ``variables``, from a worker, within ``timeout_s`` seconds of this call.

    ``cost`` is the check's estimate: over :data:`LARGE_STEPS` it waits behind cheaper checks.
    """
    pool = _current()
    deadline = time.monotonic() + timeout_s
    large = cost > LARGE_STEPS
    worker = pool.acquire(large, deadline)
    try:
        if worker is None or worker.poll() is not None:
            started = time.monotonic()
            worker = _start()
            deadline += time.monotonic() - started  # a cold start is the pool's time, not the check's
        _send(worker, (source, dict(variables)))
        kind, value = _receive(worker, deadline)
    except IsolatedTimeout:
        if worker is not None:
            _stop(worker)
        pool.restart(large)
        raise IsolatedTimeout(f"still running after {timeout_s:g} s (queue wait included), stopped") from None
    except IsolatedError:
        pool.release(None, large)
        raise
    except (OSError, EOFError, pickle.PickleError) as exc:
        if worker is not None:
            _stop(worker)
        pool.release(None, large)
        raise IsolatedError(f"the evaluating process failed: {exc or type(exc).__name__}") from None
    except BaseException:
        if worker is not None:
            _stop(worker)
        pool.release(None, large)
        raise
    pool.release(worker, large)
    if kind == "error":
        raise IsolatedError(value)
    return value


def _start() -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "policyguard.gate.celworker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        close_fds=True,
    )
    try:
        _receive(worker, time.monotonic() + START_TIMEOUT_S)
    except (IsolatedTimeout, OSError, EOFError, pickle.PickleError):
        _stop(worker)
        raise IsolatedError(f"the evaluating process did not start within {START_TIMEOUT_S:g} s") from None
    return worker


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.kill()
    worker.wait(5)
    for pipe in (worker.stdin, worker.stdout):
        if pipe is not None:
            pipe.close()


def _send(worker: subprocess.Popen[bytes], message: Any) -> None:
    assert worker.stdin is not None
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    worker.stdin.write(HEADER.pack(len(data)) + data)
    worker.stdin.flush()


def _receive(worker: subprocess.Popen[bytes], deadline: float) -> Any:
    assert worker.stdout is not None
    size = HEADER.unpack(_read(worker.stdout, HEADER.size, deadline))[0]
    return pickle.loads(_read(worker.stdout, size, deadline))


def _read(pipe: IO[bytes], size: int, deadline: float) -> bytes:
    """Exactly ``size`` bytes, or :class:`IsolatedTimeout` at ``deadline`` (waiting frees the interpreter lock)."""
    chunks: list[bytes] = []
    while size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pipe], [], [], left)[0]:
            raise IsolatedTimeout
        chunk = os.read(pipe.fileno(), min(size, 1 << 20))
        if not chunk:
            raise EOFError("the evaluating process exited")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
