"""The audit trace: one JSON object per line, append-only, thread-safe.

Every guard decision and every INV-1 event (submit, allow, deny, execute,
effect, revoke) is written here with a logical clock ``t`` (strictly
increasing per trace file: a trace opened on an existing file goes on from its
last ``t``) and wall-clock ``ts`` (epoch seconds). A file has one writer at a
time: share the :class:`Trace` object rather than open one file twice. The
format is documented in ``docs/trace-format.md`` and checked by
``policyguard/inv1.py``; the field ``v`` carries the format version so other
systems can emit compatible traces.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

TRACE_FORMAT = "policyguard.trace/1"


class Trace:
    """Appends events to a JSONL file (or keeps them in memory when ``path`` is None)."""

    def __init__(self, path: str | Path | None = None, *, keep: bool | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._keep = keep if keep is not None else path is None
        self.events: list[dict[str, Any]] = []
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
                self.events.append(record)
            return record

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
    """Read a JSONL trace; raises ValueError naming the line on bad JSON."""
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            records.append(record)
    return records
