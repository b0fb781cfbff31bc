"""Evaluate a costly CEL check in a separate process that is killed when it runs too long.

The engine holds the interpreter lock for a whole evaluation and cannot be
interrupted, so a thread timeout does not stop it and every other request of
the process waits. A check whose estimated cost (:mod:`policyguard.gate.celcost`)
is over the in-process budget therefore runs here instead: one worker process
(started on first use, ``spawn``), one evaluation at a time, the caller waiting
on a pipe (which frees the interpreter lock). A worker that does not answer
within the time left is killed, restarted for the next check, and the check
fails closed.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

START_TIMEOUT_S = 60.0  # a cold worker imports the engine; that time is not the check's
HEADER = struct.Struct("!Q")

_lock = threading.Lock()
_worker: subprocess.Popen[bytes] | None = None


class IsolatedTimeout(Exception):
    """The worker did not answer in time; it has been killed."""


class IsolatedError(Exception):
    """The check failed in the worker; the message is its :class:`~policyguard.gate.cel.CelEvalError`'s."""


def evaluate(source: str, variables: Mapping[str, Any], timeout_s: float) -> Any:
    """The value of ``source`` over ``variables``, computed in the worker within ``timeout_s`` seconds."""
    global _worker
    with _lock:
        if _worker is None or _worker.poll() is not None:
            _worker = _start()
        worker = _worker
        deadline = time.monotonic() + timeout_s
        try:
            _send(worker, (source, dict(variables)))
            kind, value = _receive(worker, deadline)
        except IsolatedTimeout:
            _stop(worker)
            _worker = None
            raise IsolatedTimeout(f"still running after {timeout_s:g} s, stopped") from None
        except (OSError, EOFError, pickle.PickleError) as exc:
            _stop(worker)
            _worker = None
            raise IsolatedError(f"the evaluating process failed: {exc or type(exc).__name__}") from None
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
