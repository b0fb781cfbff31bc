"""What the audit used to report clean: effects nobody authorised, misspelled kinds, clock disorder, empty traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.audit.inv1 import TraceFormatError, audit_file, audit_records
from policyguard.audit.trace import Trace
from policyguard.cli import main

H1 = "a" * 64
H2 = "b" * 64
V1 = "sha256:" + "1" * 64
IDS = {"call_id": "c1", "tool": "refund", "args_sha256": H1}


def allow(trace: Trace, **over: Any) -> None:
    trace.emit("allow", **{**IDS, **over}, policy_version=V1, expires_at=4_000_000_000.0)


def kinds(trace: Trace) -> list[str]:
    return [v.kind for v in audit_records(trace.events).violations]


# -- effects belong under INV-1 -----------------------------------------------------


def test_an_effect_with_no_allow_and_no_execute_is_a_violation() -> None:
    trace = Trace()
    trace.emit("submit", **IDS)
    trace.emit("effect", **IDS, idempotency_key="k1")
    report = audit_records(trace.events)
    assert [v.kind for v in report.violations] == ["effect_without_execute"] and report.violations[0].line == 2


def test_an_effect_before_its_allow_is_a_violation() -> None:
    trace = Trace()
    trace.emit("effect", **IDS)
    allow(trace)
    trace.emit("execute", **IDS)
    assert kinds(trace) == ["effect_without_execute"]


def test_two_effects_for_one_execute_are_a_violation_even_without_idempotency_keys() -> None:
    trace = Trace()
    allow(trace)
    trace.emit("execute", **IDS)
    trace.emit("effect", **IDS)
    trace.emit("effect", **IDS)
    [violation] = audit_records(trace.events).violations
    assert violation.kind == "extra_effect" and "line 2" in violation.detail


def test_an_effect_for_other_arguments_than_were_executed_is_a_violation() -> None:
    trace = Trace()
    allow(trace)
    trace.emit("execute", **IDS)
    trace.emit("effect", **{**IDS, "args_sha256": H2})
    assert kinds(trace) == ["effect_without_execute"]


def test_an_effect_after_an_unauthorised_execute_is_reported_once_at_the_execute() -> None:
    trace = Trace()
    trace.emit("execute", **IDS)
    trace.emit("effect", **IDS, idempotency_key="k1")
    assert kinds(trace) == ["no_allow"]


def test_allow_execute_effect_is_clean() -> None:
    trace = Trace()
    allow(trace)
    trace.emit("execute", **IDS)
    trace.emit("effect", **IDS, idempotency_key="k1")
    report = audit_records(trace.events)
    assert report.ok and (report.executes, report.effects) == (1, 1)


# -- the format is read strictly: exit 2 with a one-line message --------------------


def write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def record(event: Any, t: int, **fields: Any) -> dict[str, Any]:
    return {"v": "policyguard.trace/1", "event": event, "t": t, "ts": 1_800_000_000.0 + t, **IDS, **fields}


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("Execute", "did you mean 'execute'?"),
        ("execute ", "did you mean 'execute'?"),
        ("EFFECT", "did you mean 'effect'?"),
        ("exec\u200bute", "did you mean 'execute'?"),
        ("tool_result", "known kinds"),
        (3, "known kinds"),
        (None, "known kinds"),
        (["execute"], "known kinds"),
    ],
)
def test_an_unknown_or_misspelled_event_kind_is_an_error_not_silence(tmp_path: Path, kind: Any, hint: str) -> None:
    """An execute spelled "Execute" used to be skipped, so a trace with an unauthorised run audited clean."""
    path = write(tmp_path / "t.jsonl", [record("submit", 1), record(kind, 2)])
    with pytest.raises(TraceFormatError) as info:
        audit_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: unknown event kind") and hint in message and "\n" not in message


MISSING = object()


@pytest.mark.parametrize(
    "version", [None, MISSING, "", "policyguard.trace/2", "POLICYGUARD.TRACE/1", 1, ["policyguard.trace/1"]]
)
def test_a_record_without_the_known_format_version_is_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: Any
) -> None:
    """A record whose ``v`` is null, absent or another format is not evidence: exit 2, naming line and field."""
    bad = record("execute", 2)
    if version is MISSING:
        del bad["v"]
    else:
        bad["v"] = version
    path = write(tmp_path / "t.jsonl", [record("allow", 1, policy_version=V1, expires_at=4e9), bad])
    with pytest.raises(TraceFormatError) as info:
        audit_file(path)
    assert str(info.value).startswith(f"{path}:2: ") and "'v'" in str(info.value)
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2" in err and err.count("\n") == 1


def test_extension_kinds_with_the_x_prefix_are_skipped() -> None:
    trace = Trace()
    trace.emit("x-note", text="operator looked at it")
    allow(trace)
    trace.emit("execute", **IDS)
    assert audit_records(trace.events).ok


@pytest.mark.parametrize("second_t", [1, 0, -5])
def test_a_logical_clock_that_does_not_increase_is_an_error(tmp_path: Path, second_t: int) -> None:
    path = write(
        tmp_path / "t.jsonl", [record("allow", 1, policy_version=V1, expires_at=4e9), record("execute", second_t)]
    )
    with pytest.raises(TraceFormatError, match=r":2: t -?\d+ does not follow t 1 of line 1"):
        audit_file(path)


def test_a_duplicated_line_is_clock_disorder(tmp_path: Path) -> None:
    allowed = record("allow", 1, policy_version=V1, expires_at=4e9)
    executed = record("execute", 2)
    with pytest.raises(TraceFormatError, match=":3: t 2 does not follow"):
        audit_file(write(tmp_path / "t.jsonl", [allowed, executed, executed]))


@pytest.mark.parametrize(
    ("field", "value"),
    [("t", True), ("t", "2"), ("t", 2.0), ("ts", "now"), ("ts", None), ("call_id", 7), ("expires_at", "soon")],
)
def test_fields_must_have_their_json_types(tmp_path: Path, field: str, value: Any) -> None:
    bad = record("allow", 2, policy_version=V1, expires_at=4e9)
    bad[field] = value
    with pytest.raises(TraceFormatError, match=f":2: .*field '{field}'"):
        audit_file(write(tmp_path / "t.jsonl", [record("submit", 1), bad]))


def test_every_record_needs_t_and_ts_not_only_inv1_events(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=":1: record: field 't'"):
        audit_file(write(tmp_path / "t.jsonl", [{"v": "policyguard.trace/1", "event": "decision", "ts": 1.0}]))


def test_non_finite_numbers_are_not_json(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"event": "execute", "t": 1, "ts": NaN, "call_id": "c", "tool": "t", "args_sha256": "h"}\n')
    with pytest.raises(TraceFormatError, match=":1: .*NaN"):
        audit_file(path)


def test_an_empty_trace_is_not_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")
    for path in (empty, blank):
        with pytest.raises(TraceFormatError, match="no records"):
            audit_file(path)
        assert main(["audit", str(path)]) == 2
        assert "no records" in capsys.readouterr().err
    with pytest.raises(TraceFormatError, match="no records"):
        audit_records([])


def test_cli_exit_2_names_the_line_of_a_misspelled_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "t.jsonl", [record("Execute", 1)])
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{path}:1: unknown event kind 'Execute'" in err


def test_a_second_writer_appending_to_a_trace_file_continues_its_clock(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with Trace(path) as first:
        allow(first)
    with Trace(path) as second:
        second.emit("execute", **IDS)
    assert [json.loads(line)["t"] for line in path.read_text().splitlines()] == [1, 2]
    assert audit_file(path).ok
