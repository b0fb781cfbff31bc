"""One hook process per event: every event meets a record object of its own, read from the store.

That is how Claude Code runs a command hook, and how ``POST /v1/hooks/claude-code`` answers (a guard per
request). The record must come out as one long-lived hook would have made it: a result reported by
PostToolUse is recorded even though the process never saw the call judged, and reading the transcript
from the start again does not record its user messages again.
"""

from __future__ import annotations

import json
from pathlib import Path

from policyguard.enforcement.storeurl import open_store
from policyguard.integrations.claude_code import ClaudeCodeHook, HookEvent
from policyguard.session import SessionEvent
from tests.session.credits import make_guard

from .shapes import Transcript, post, pre, use


def _process(url: str) -> ClaudeCodeHook:
    return ClaudeCodeHook(make_guard(sessions=open_store(url), session_result_wait_s=5.0))


def _events(url: str, t: Transcript) -> list[SessionEvent]:
    return open_store(url).session_events(t.session)


def test_a_result_reported_to_a_new_process_is_recorded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    t = Transcript(tmp_path / "session.jsonl")
    t.user("I'm u1, a goodwill credit please.")
    t.assistant(use("toolu_01", "send_credit", user_id="u1", amount=50))
    assert _process(url).answer(pre(t, "toolu_01", "send_credit", user_id="u1", amount=50)) == {}
    # a sub-agent's call: its result reaches the hook through PostToolUse only, never the main transcript
    event = HookEvent.read(json.dumps(post(t, "toolu_01", "send_credit", "credit sent", user_id="u1", amount=50)))
    assert _process(url).post_tool_use(event) is True
    results = [e for e in _events(url, t) if e.kind == "result"]
    assert [(e.call_id, e.content) for e in results] == [("toolu_01", "credit sent")]
    t.assistant(use("toolu_02", "send_credit", user_id="u1", amount=50))
    answer = _process(url).answer(pre(t, "toolu_02", "send_credit", user_id="u1", amount=50))
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_a_result_for_a_call_nobody_recorded_is_not_taken(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    t = Transcript(tmp_path / "session.jsonl")
    t.user("I'm u1.")
    event = HookEvent.read(json.dumps(post(t, "toolu_09", "send_credit", "credit sent", user_id="u1", amount=50)))
    assert _process(url).post_tool_use(event) is False
    assert [e.kind for e in _events(url, t) if e.kind == "result"] == []


def test_processes_reading_the_same_transcript_record_its_user_messages_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    t = Transcript(tmp_path / "session.jsonl")
    t.user("I'm u1.")
    t.user("Please read my account, again and again.")
    t.user("Yes.")
    for number in range(10):
        call_id = f"toolu_{number:02d}"
        t.assistant(use(call_id, "get_account", account_id="A1"))
        assert _process(url).answer(pre(t, call_id, "get_account", account_id="A1")) == {}
        t.result(call_id, {"account_id": "A1", "limit": 10})
        result = json.dumps({"account_id": "A1", "limit": 10})
        assert _process(url).post_tool_use(HookEvent.read(json.dumps(post(t, call_id, "get_account", result))))
    kinds = [e.kind for e in _events(url, t)]
    assert kinds.count("user") == 3  # one hook process per event: 20 processes read them, each from the start
    assert kinds.count("call") == 10 and kinds.count("result") == 10
