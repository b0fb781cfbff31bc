"""Counters for two views of the same run (PolicyGuard paper, arXiv 2606.29225, appendix E).

* verdict view: every attempted mutating call and what the guard decided;
* runtime view: the calls that actually reached the executor.

They differ in advisory mode (a BLOCK verdict whose call still ran) and when an
integration never reports execution.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict


class CounterSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    read_only: int = 0
    attempted_mutating: int = 0
    passed: int = 0
    blocked: int = 0
    halted: int = 0
    escalated: int = 0
    errors: int = 0
    advisory_blocks: int = 0
    shadow_blocked: int = 0  # allowed calls that a requirement in shadow mode would have blocked (also in passed)
    executed: int = 0
    executed_mutating: int = 0
    executor_refused: int = 0

    @property
    def block_rate(self) -> float:
        return self.blocked / self.attempted_mutating if self.attempted_mutating else 0.0


class Counters:
    """Thread-safe tallies; ``snapshot()`` returns a consistent copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = CounterSnapshot()

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self._values, name, getattr(self._values, name) + delta)

    def snapshot(self) -> CounterSnapshot:
        with self._lock:
            return self._values.model_copy()
