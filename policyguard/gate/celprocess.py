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
* **A bounded queue.** At most ``queue`` checks of each lane (below) wait for a
  worker; one more is refused at once with :class:`IsolatedBusy` (the gate blocks the call, naming
  the reason), never left to wait.
* **Two lanes by estimate.** The estimate is an upper bound, so a check
  estimated at :data:`LARGE_STEPS` or less (~0.25 s at the worst measured
  0.35 us per step) is *cheap*; one over it is *costly*. With two workers or
  more, one is reserved for cheap checks: a costly check never holds it, so a
  flood of costly checks cannot delay a cheap one by more than the cheap checks
  ahead of it. Cheap checks may use any idle worker and are served first, in
  arrival order; each lane has its own queue of ``queue`` places. Among the
  costly checks the one with the most time left goes first, so a freed worker
  is not spent on a check about to run out of time (killed at once, its slot
  restarted: a process start, ~85 ms of CPU, per such check).
* **Costly checks run on spare CPU.** The shared workers (the costly lane's)
  run at the lowest priority (Linux ``SCHED_IDLE``, elsewhere nice 19; setting
  ``costly_low``, ``$POLICYGUARD_CEL_COSTLY_PRIORITY=normal`` to turn it off):
  a check spinning for its whole deadline, and the restart of its killed
  worker, take only CPU time the reserved worker, the server and the rest of
  the machine leave. On a machine busy with other work a costly check gets
  less done before its deadline (then it is blocked: fail closed).
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
LARGE_STEPS = 700_000  # ~0.25 s at the worst 0.35 us/step measured: over it, a check is in the costly lane
WORKERS_ENV = "POLICYGUARD_CEL_WORKERS"
QUEUE_ENV = "POLICYGUARD_CEL_QUEUE"
PRIORITY_ENV = "POLICYGUARD_CEL_COSTLY_PRIORITY"


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
    costly_low: bool = True


def default_settings() -> PoolSettings:
    """Workers: the core count (``$POLICYGUARD_CEL_WORKERS``); queue: 4 per worker (``$POLICYGUARD_CEL_QUEUE``)."""
    workers = int(os.environ.get(WORKERS_ENV) or os.cpu_count() or 1)
    queue = int(os.environ.get(QUEUE_ENV) or 4 * max(1, workers))
    return PoolSettings(workers=max(1, workers), queue=max(0, queue), costly_low=_low(os.environ.get(PRIORITY_ENV)))


def _low(priority: str | None) -> bool:
    if priority in (None, "", "low"):
        return True
    if priority == "normal":
        return False
    raise ValueError(f"${PRIORITY_ENV} must be low or normal, got {priority!r}")


@dataclass(frozen=True, eq=False)
class _Ticket:
    """A place in a line for a worker, with the deadline of the check that holds it."""

    deadline: float


class _Pool:
    """The workers, in two lanes by estimate, and the checks waiting for them."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        reserved = 1 if settings.workers >= 2 else 0
        self.cond = threading.Condition()
        # None: start on first use. The reserved slots serve cheap checks only; the others serve both lanes.
        self.idle: dict[bool, list[subprocess.Popen[bytes] | None]] = {
            True: [None] * reserved,
            False: [None] * (settings.workers - reserved),
        }
        self.lines: dict[bool, collections.deque[_Ticket]] = {False: collections.deque(), True: collections.deque()}
        self.closed = False

    def acquire(self, costly: bool, deadline: float) -> tuple[subprocess.Popen[bytes] | None, bool]:
        """A worker (None: its slot is to be started) and whether it is a reserved one, for :meth:`release`."""
        ticket = _Ticket(deadline)
        with self.cond:
            line = self.lines[costly]
            if len(line) >= self.settings.queue and not self._eligible(costly, None):
                lane = "costly" if costly else "cheap"
                raise IsolatedBusy(
                    f"the {self.settings.queue} places waiting for a worker process for {lane} checks are taken"
                    " (busy; refused at once)"
                )
            line.append(ticket)
            try:
                while not self._eligible(costly, ticket):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise IsolatedTimeout("no worker process was free before the deadline")
                    self.cond.wait(left)
            finally:
                line.remove(ticket)
                self.cond.notify_all()
            reserved = not costly and bool(self.idle[True])
            return _take(self.idle[reserved]), reserved

    def _eligible(self, costly: bool, ticket: _Ticket | None) -> bool:
        cheap, dear = self.lines[False], self.lines[True]
        if not costly:
            if not (self.idle[True] or self.idle[False]):
                return False
            return ticket is None or cheap[0] is ticket
        if not self.idle[False] or cheap:  # a waiting cheap check takes a shared worker first
            return False
        return ticket is None or max(dear, key=lambda waiting: waiting.deadline) is ticket

    def release(self, worker: subprocess.Popen[bytes] | None, reserved: bool) -> None:
        with self.cond:
            if self.closed:
                if worker is not None:
                    _stop(worker)
                return
            self.idle[reserved].append(worker)
            self.cond.notify_all()

    def restart(self, reserved: bool) -> None:
        """Start a fresh worker for a killed one's slot, off the caller's path; the slot is free once it is up."""

        def run() -> None:
            try:
                worker: subprocess.Popen[bytes] | None = _start(self.low(reserved))
            except IsolatedError:
                worker = None  # the next caller tries again
            self.release(worker, reserved)

        threading.Thread(target=run, name="policyguard-cel-restart", daemon=True).start()

    def low(self, reserved: bool) -> bool:
        """Whether a slot's worker runs at low priority: the shared ones (costly checks), unless set otherwise."""
        return not reserved and self.settings.costly_low

    def close(self) -> None:
        with self.cond:
            self.closed = True
            workers = self.idle[True] + self.idle[False]
            self.idle = {True: [], False: []}
        for worker in workers:
            if worker is not None:
                _stop(worker)


def _take(slots: list[subprocess.Popen[bytes] | None]) -> subprocess.Popen[bytes] | None:
    """A started worker when there is one (a cold start costs the check ~0.1-0.4 s), else a slot to start."""
    for index in range(len(slots) - 1, -1, -1):
        if slots[index] is not None:
            return slots.pop(index)
    return slots.pop()


_pool_lock = threading.Lock()
_pool: _Pool | None = None


def configure(workers: int | None = None, queue: int | None = None, costly_low: bool | None = None) -> PoolSettings:
    """Set the pool's size and queue (``None``: the default); running workers of the old pool are stopped."""
    global _pool
    default = default_settings()
    settings = PoolSettings(
        workers=max(1, workers if workers is not None else default.workers),
        queue=max(0, queue if queue is not None else (4 * workers if workers is not None else default.queue)),
        costly_low=default.costly_low if costly_low is None else costly_low,
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

    ``cost`` is the check's estimate: over :data:`LARGE_STEPS` it is a costly check, in the costly lane.
    """
    pool = _current()
    deadline = time.monotonic() + timeout_s
    worker, reserved = pool.acquire(cost > LARGE_STEPS, deadline)
    try:
        if worker is None or worker.poll() is not None:
            started = time.monotonic()
            worker = _start(pool.low(reserved))
            deadline += time.monotonic() - started  # a cold start is the pool's time, not the check's
        _send(worker, (source, dict(variables)))
        kind, value = _receive(worker, deadline)
    except IsolatedTimeout:
        if worker is not None:
            _stop(worker)
        pool.restart(reserved)
        raise IsolatedTimeout(f"still running after {timeout_s:g} s (queue wait included), stopped") from None
    except IsolatedError:
        pool.release(None, reserved)
        raise
    except (OSError, EOFError, pickle.PickleError) as exc:
        if worker is not None:
            _stop(worker)
        pool.release(None, reserved)
        raise IsolatedError(f"the evaluating process failed: {exc or type(exc).__name__}") from None
    except BaseException:
        if worker is not None:
            _stop(worker)
        pool.release(None, reserved)
        raise
    pool.release(worker, reserved)
    if kind == "error":
        raise IsolatedError(value)
    return value


def _lower_priority(pid: int) -> None:
    """Run ``pid`` only on CPU time nothing else wants (Linux ``SCHED_IDLE``; elsewhere nice 19), if allowed."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        except (AttributeError, OSError):
            pass  # no priorities here: the worker runs at ours


def _start(low: bool = False) -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "policyguard.gate.celworker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        close_fds=True,
    )
    if low:
        _lower_priority(worker.pid)
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
