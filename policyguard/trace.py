"""The audit trace: one JSON object per line, append-only, thread-safe.

Every guard decision and every INV-1 event (submit, allow, deny, execute,
effect, revoke) is written here with a logical clock ``t`` (strictly
increasing per trace) and wall-clock ``ts`` (epoch seconds). The event formats
are documented in ``policyguard/inv1.py``; the field ``v`` carries the format
version so other systems can emit compatible traces.
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
