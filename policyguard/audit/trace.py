"""The audit trace: one JSON object per line, append-only, thread-safe.

Every guard decision and every INV-1 event (submit, allow, deny, execute,
effect, revoke) is written here with a logical clock ``t`` (strictly
increasing per trace file: a trace opened on an existing file goes on from its
last ``t``) and wall-clock ``ts`` (epoch seconds). A file has one writer at a
time: share the :class:`Trace` object rather than open one file twice. The
format is documented in ``docs/trace-format.md`` and checked by
``policyguard/inv1.py``; the field ``v`` carries the format version so other
systems can emit compatible traces.

Memory and disk: an in-memory trace (no path, the :class:`~policyguard.guard.core.Guard`
default) keeps only the last :data:`DEFAULT_KEEP` events, so a long-running
guard does not grow; pass ``keep=True`` to keep every event (a complete INV-1
audit of an in-memory run needs them all) or ``keep=N`` for the last N. A trace
FILE keeps nothing in memory and grows by one line per event (about 0.3-0.6 KB;
a guarded call writes 2-4 events) for as long as it is written: it is never
rotated or truncated by this class. Rotate it from outside with a copy-and-
truncate rotation (``logrotate copytruncate``): the file is opened in append
mode, so writes after a truncation start the new file, and ``t`` goes on
increasing in memory.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from policyguard.trajectory import strictjson

TRACE_FORMAT = "policyguard.trace/1"
DEFAULT_KEEP = 1000
"""Events an in-memory trace keeps by default (the newest); older ones are dropped."""


class Trace:
    """Appends events to a JSONL file, or keeps the newest in memory when ``path`` is None.

    ``keep``: ``None`` (default) keeps the last :data:`DEFAULT_KEEP` events in
    memory without a path and none with one; ``True`` every event; ``False``
    none; an int N the last N.
    """

    def __init__(self, path: str | Path | None = None, *, keep: bool | int | None = None) -> None:
        self.path = Path(path) if path is not None else None
        if keep is None:
            keep = DEFAULT_KEEP if path is None else False
        if isinstance(keep, bool):
            limit: int | None = None if keep else 0
        elif isinstance(keep, int) and keep >= 0:
            limit = keep
        else:
            raise ValueError(f"keep must be True, False, None or a count >= 0, got {keep!r}")
        self.keep_limit = limit
        """How many events are kept in memory (None: all)."""
        self._keep = limit != 0
        self._events: deque[dict[str, Any]] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._clock = 0
        self._file: TextIO | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._clock = _last_t(self.path)  # appending: the clock goes on from the file's last record
            self._file = self.path.open("a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Record one event; returns the full record as written."""
        with self._lock:
            self._clock += 1
            record = {"v": TRACE_FORMAT, "event": event, "t": self._clock, "ts": time.time(), **fields}
            if self._file is not None:
                self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                self._file.flush()
            if self._keep:
                self._events.append(record)
            return record

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events kept in memory, oldest first (a copy; see ``keep``)."""
        with self._lock:
            return list(self._events)

    def sync(self) -> None:
        """Flush to disk and fsync (for callers that need durability)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _last_t(path: Path, tail: int = 4 << 20) -> int:
    """The ``t`` of the last record of an existing trace file (0 when there is none to read)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail))
            lines = handle.read().splitlines()
    except OSError:
        return 0
    for raw in reversed(lines):
        if not raw.strip():
            continue
        try:
            t = json.loads(raw).get("t")
        except (ValueError, AttributeError):
            return 0
        return t if isinstance(t, int) and not isinstance(t, bool) and t > 0 else 0
    return 0


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL trace; raises ValueError naming the line on bad JSON (a key named twice included)."""
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = strictjson.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            records.append(record)
    return records
