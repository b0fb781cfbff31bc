"""A long-running guard does not grow: its default in-memory trace keeps only the newest events.

``Trace()`` (the Guard's default) keeps the last ``DEFAULT_KEEP`` events;
``keep=True`` keeps all of them (a complete in-memory INV-1 audit needs that),
``keep=N`` the last N, and a trace file keeps none in memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyguard.audit.trace import DEFAULT_KEEP, Trace, read_trace
from tests.docblocks import doc_block


def _emit(trace: Trace, count: int) -> None:
    for number in range(count):
        trace.emit("submit", call_id=f"c{number}")


def test_the_default_in_memory_trace_keeps_only_the_newest_events() -> None:
    trace = Trace()
    _emit(trace, DEFAULT_KEEP + 50)
    events = trace.events
    assert len(events) == DEFAULT_KEEP
    assert events[0]["call_id"] == "c50" and events[-1]["call_id"] == f"c{DEFAULT_KEEP + 49}"
    assert events[-1]["t"] == DEFAULT_KEEP + 50  # the clock counts every event, kept or not


def test_keep_true_keeps_every_event_and_keep_n_the_last_n() -> None:
    everything, last3 = Trace(keep=True), Trace(keep=3)
    _emit(everything, DEFAULT_KEEP + 5)
    _emit(last3, 10)
    assert len(everything.events) == DEFAULT_KEEP + 5
    assert [e["call_id"] for e in last3.events] == ["c7", "c8", "c9"]


def test_a_trace_file_keeps_nothing_in_memory_and_every_line_on_disk(tmp_path: Path) -> None:
    with Trace(tmp_path / "audit.jsonl") as trace:
        _emit(trace, 20)
        assert trace.events == []
    assert [r["call_id"] for r in read_trace(tmp_path / "audit.jsonl")] == [f"c{n}" for n in range(20)]


def test_a_file_truncated_by_a_rotation_goes_on_in_append_mode(tmp_path: Path) -> None:
    """``logrotate copytruncate``: after the copy and the truncation the next line starts the new file."""
    path = tmp_path / "audit.jsonl"
    with Trace(path) as trace:
        _emit(trace, 3)
        path.write_text("")  # what copytruncate does after copying
        trace.emit("submit", call_id="after")
    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["call_id"] == "after" and json.loads(lines[0])["t"] == 4


def test_events_is_a_snapshot_that_later_events_do_not_change() -> None:
    trace = Trace()
    _emit(trace, 2)
    snapshot = trace.events
    _emit(trace, 1)
    assert len(snapshot) == 2 and len(trace.events) == 3


@pytest.mark.parametrize("keep", [-1, 1.5, "all"])
def test_a_nonsense_keep_is_refused(keep: object) -> None:
    with pytest.raises(ValueError):
        Trace(keep=keep)  # type: ignore[arg-type]


def test_the_readme_trace_example_runs_as_written() -> None:
    code = doc_block("docs/production/performance.md", "trace-memory")
    exec(compile(code, "docs/production/performance.md", "exec"), {"__name__": "readme_trace"})
