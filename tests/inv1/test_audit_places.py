"""INV-1 with reused call ids: a call is its id in its session at its place (which issuance of the id it is).

Stacks that number calls per turn send ``call_0`` every turn; the guard names
each issuance by its place, and the audit judges an execute against the allows
and denies of the same place. A deny with no place refuses the same tool and
arguments at every place, as the deny store does.
"""

from __future__ import annotations

from typing import Any

from policyguard.audit.inv1 import audit_records
from policyguard.audit.trace import Trace

H1, H2 = "a" * 64, "b" * 64
V1 = "sha256:" + "1" * 64


def allow(trace: Trace, place: str | None, sha: str = H1) -> None:
    where: dict[str, Any] = {} if place is None else {"place": place}
    trace.emit("allow", call_id="call_0", tool="refund", args_sha256=sha, policy_version=V1, expires_at=1e12,
               session_id="s", **where)  # fmt: skip


def deny(trace: Trace, place: str | None, sha: str = H1) -> None:
    where: dict[str, Any] = {} if place is None else {"place": place}
    trace.emit("deny", call_id="call_0", tool="refund", args_sha256=sha, session_id="s", **where)


def execute(trace: Trace, place: str | None, sha: str = H1) -> None:
    where: dict[str, Any] = {} if place is None else {"place": place}
    trace.emit("execute", call_id="call_0", tool="refund", args_sha256=sha, session_id="s", **where)


def kinds(trace: Trace) -> list[str]:
    return [violation.kind for violation in audit_records(trace.events).violations]


def test_a_deny_of_turn_1s_call_0_does_not_taint_turn_3s_call_0() -> None:
    trace = Trace(keep=True)
    deny(trace, "1.0")
    allow(trace, "3.0")
    execute(trace, "3.0")
    assert kinds(trace) == []


def test_the_denied_issuance_itself_executed_is_a_violation() -> None:
    trace = Trace(keep=True)
    deny(trace, "1.0")
    allow(trace, "1.0")
    execute(trace, "1.0")
    assert kinds(trace) == ["denied"]


def test_a_deny_with_no_place_refuses_the_same_call_at_every_place_but_not_another_call() -> None:
    trace = Trace(keep=True)
    deny(trace, None)
    allow(trace, "3.0")
    execute(trace, "3.0")
    allow(trace, "4.0", sha=H2)
    execute(trace, "4.0", sha=H2)
    assert kinds(trace) == ["denied"]


def test_an_execute_with_no_place_is_refused_by_a_deny_of_the_same_call_at_any_place() -> None:
    trace = Trace(keep=True)
    deny(trace, "1.0")
    allow(trace, None)
    execute(trace, None)
    assert kinds(trace) == ["denied"]


def test_one_issuance_executed_twice_is_a_replay_and_a_later_issuance_is_not() -> None:
    trace = Trace(keep=True)
    allow(trace, "1.0")
    execute(trace, "1.0")
    execute(trace, "1.0")
    allow(trace, "2.0")
    execute(trace, "2.0")
    assert kinds(trace) == ["replay"]
