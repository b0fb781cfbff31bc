"""INV-1 checker: each rule, in the order the spec gives them, on hand-written traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyguard.audit.inv1 import TraceFormatError, audit_file, audit_records
from policyguard.audit.trace import Trace
from policyguard.cli import main

H1 = "a" * 64
H2 = "b" * 64
V1 = "sha256:" + "1" * 64
V2 = "sha256:" + "2" * 64


def allowed_call(trace: Trace, call_id: str = "c1", args: str = H1, *, ts: float = 100.0, ttl: float = 30.0) -> None:
    trace.emit("submit", call_id=call_id, tool="refund", args_sha256=args, ts=ts)
    trace.emit("allow", call_id=call_id, tool="refund", args_sha256=args, policy_version=V1, expires_at=ts + ttl, ts=ts)


def execute(trace: Trace, call_id: str = "c1", args: str = H1, *, tool: str = "refund", ts: float = 101.0) -> None:
    trace.emit("execute", call_id=call_id, tool=tool, args_sha256=args, ts=ts)


def kinds(trace: Trace) -> list[str]:
    return [v.kind for v in audit_records(trace.events).violations]


def test_allow_then_execute_is_clean_and_counts_the_execute() -> None:
    trace = Trace()
    allowed_call(trace)
    execute(trace)
    report = audit_records(trace.events)
    assert report.ok and report.executes == 1 and report.events == 3


def test_execute_without_allow_is_a_violation_naming_line_and_call() -> None:
    trace = Trace()
    trace.emit("submit", call_id="c1", tool="refund", args_sha256=H1)
    execute(trace)
    [violation] = audit_records(trace.events).violations
    assert (violation.kind, violation.line, violation.call_id) == ("no_allow", 2, "c1")


def test_execute_racing_the_verdict_is_a_violation() -> None:
    trace = Trace()
    execute(trace, ts=99.0)
    allowed_call(trace)
    assert kinds(trace) == ["no_allow"]


def test_allow_for_other_args_or_other_tool_does_not_cover_the_execute() -> None:
    trace = Trace()
    allowed_call(trace)
    execute(trace, args=H2)
    allowed_call(trace, "c2")
    execute(trace, "c2", tool="delete")
    assert kinds(trace) == ["args_changed", "args_changed"]


def test_allow_for_another_call_id_does_not_cover_the_execute() -> None:
    trace = Trace()
    allowed_call(trace, "c1")
    execute(trace, "c2")
    assert kinds(trace) == ["no_allow"]


def test_deny_wins_whatever_the_order_of_verdicts() -> None:
    trace = Trace()
    allowed_call(trace)
    trace.emit("deny", call_id="c1", tool="refund", args_sha256=H1)
    execute(trace)
    assert kinds(trace) == ["denied"]


def test_revoke_that_changes_the_policy_version_voids_older_allows() -> None:
    trace = Trace()
    allowed_call(trace)
    trace.emit("revoke", policy_version=V2)
    execute(trace)
    assert kinds(trace) == ["revoked"]


def test_allow_under_the_new_version_after_a_revoke_is_fine() -> None:
    trace = Trace()
    trace.emit("revoke", policy_version=V2)
    trace.emit("allow", call_id="c1", tool="refund", args_sha256=H1, policy_version=V2, expires_at=200.0)
    execute(trace)
    assert kinds(trace) == []


def test_call_scoped_revoke_voids_only_that_call() -> None:
    trace = Trace()
    allowed_call(trace, "c1")
    allowed_call(trace, "c2")
    trace.emit("revoke", policy_version=V1, call_id="c1")
    execute(trace, "c1")
    execute(trace, "c2")
    assert kinds(trace) == ["revoked"]


def test_execute_after_expiry_compares_the_execute_timestamp() -> None:
    trace = Trace()
    allowed_call(trace, ts=100.0, ttl=30.0)
    execute(trace, ts=130.0)  # exactly at expiry: still valid
    allowed_call(trace, "c2", ts=100.0, ttl=30.0)
    execute(trace, "c2", ts=130.5)
    assert kinds(trace) == ["expired"]


def test_one_allow_authorizes_one_execute() -> None:
    trace = Trace()
    allowed_call(trace)
    execute(trace)
    execute(trace)
    assert kinds(trace) == ["replay"]


def test_two_effects_with_one_idempotency_key_break_the_ledger() -> None:
    trace = Trace()
    for call_id in ("c1", "c2"):
        allowed_call(trace, call_id)
        execute(trace, call_id)
        trace.emit("effect", call_id=call_id, tool="refund", args_sha256=H1, idempotency_key="k-1")
    report = audit_records(trace.events)
    assert [v.kind for v in report.violations] == ["duplicate_effect"]
    assert report.violations[0].call_id == "c2" and report.effects == 2


def test_other_record_kinds_are_ignored_and_unknown_fields_allowed() -> None:
    trace = Trace()
    trace.emit("decision", outcome="block", call_id="c1")
    allowed_call(trace)
    trace.emit("execute", call_id="c1", tool="refund", args_sha256=H1, ts=101.0, future_field={"x": 1})
    report = audit_records(trace.events)
    assert report.ok and report.records == 4 and report.events == 3


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_missing_required_field_names_file_line_and_field(tmp_path: Path) -> None:
    v1 = {"v": "policyguard.trace/1"}
    good = json.dumps({**v1, "event": "submit", "call_id": "c1", "tool": "t", "args_sha256": H1, "t": 1, "ts": 1.0})
    bad = json.dumps({**v1, "event": "allow", "call_id": "c1", "tool": "t", "args_sha256": H1, "t": 2, "ts": 1.0})
    path = write_lines(tmp_path / "t.jsonl", [good, bad])
    with pytest.raises(TraceFormatError) as info:
        audit_file(path)
    assert f"{path}:2" in str(info.value) and "policy_version" in str(info.value)


def test_bad_json_and_unknown_format_version_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=":1: not JSON"):
        audit_file(write_lines(tmp_path / "a.jsonl", ["{not json"]))
    record = {"v": "policyguard.trace/9", "event": "submit", "call_id": "c", "tool": "t", "args_sha256": H1}
    with pytest.raises(TraceFormatError, match="unsupported trace format"):
        audit_file(write_lines(tmp_path / "b.jsonl", [json.dumps({**record, "t": 1, "ts": 1.0})]))


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = tmp_path / "clean.jsonl"
    with Trace(clean) as trace:
        allowed_call(trace)
        execute(trace)
    dirty = tmp_path / "dirty.jsonl"
    with Trace(dirty) as trace:
        execute(trace)
    assert main(["audit", str(clean)]) == 0
    assert main(["audit", str(dirty)]) == 1
    assert "line 1: no_allow: call c1" in capsys.readouterr().out
    bad = write_lines(tmp_path / "bad.jsonl", ['{"event": "execute", "t": 1}'])
    assert main(["audit", str(bad)]) == 2
    assert f"{bad}:1" in capsys.readouterr().err


def test_cli_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirty = tmp_path / "dirty.jsonl"
    with Trace(dirty) as trace:
        execute(trace)
    assert main(["audit", str(dirty), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False and payload["executes"] == 1
    assert [(v["kind"], v["line"], v["call_id"]) for v in payload["violations"]] == [("no_allow", 1, "c1")]
