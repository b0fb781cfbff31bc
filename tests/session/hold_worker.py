"""A child process that holds sessions (run with runpy in a spawned process; ``JOB`` is injected).

Kinds:

* ``count``: ``rounds`` times, hold the session, check nobody else is inside
  (a marker file created exclusively), bump a counter file by a read, a pause
  and a write (lost updates if two were inside), leave, release;
* ``wait``: hold the session (waiting up to ``timeout``), set ``held``, wait
  for ``go``, release;
* ``keep``: hold the session, set ``held``, then sleep until killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from policyguard.enforcement.storeurl import open_store

JOB: dict[str, Any] = globals().get("JOB", {})


def bump(directory: Path) -> None:
    """One round inside the hold: a second one inside at the same time is written to ``overlaps``."""
    marker, counter = directory / "inside", directory / "counter"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        with open(directory / "overlaps", "a") as out:
            out.write(f"{os.getpid()}\n")
        fd = -1
    value = int(counter.read_text() or "0") if counter.exists() else 0
    time.sleep(0.002)
    counter.write_text(str(value + 1))
    if fd >= 0:
        os.close(fd)
        marker.unlink()


def main() -> None:
    store = open_store(JOB["url"], synchronous="NORMAL")
    kind, session = JOB["kind"], JOB["session"]
    if kind == "count":
        JOB["barrier"].wait()
        for _ in range(JOB["rounds"]):
            held = store.hold(session, 60)
            assert held is not None, "a hold waited a minute"
            bump(Path(JOB["dir"]))
            held.release()
    elif kind == "wait":
        held = store.hold(session, JOB["timeout"])
        if held is not None:
            JOB["held"].set()
            JOB["go"].wait(60)
            held.release()
    elif kind == "keep":
        held = store.hold(session, 0)
        assert held is not None
        JOB["held"].set()
        time.sleep(600)
    store.close()


if __name__ == "__main__":
    main()
