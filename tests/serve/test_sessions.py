"""Sessions over HTTP: a `session_id` in the check request scopes deny-wins and keeps the conversation's record.

Agents number their calls per conversation (``call_1``, ``call_2``...), so many
conversations sent to one server use the same call ids. With a session id a
deny is keyed by the session and the call id, and the guard judges each write
on the conversation's own record, kept in the server's store where every
replica reads it. Without one, a check is one-shot and a deny is keyed by the
call alone: its id, tool, arguments and the message that issued it.
"""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..session.credits import CHECKLIST as CREDIT_CHECKLIST
from ..session.credits import POLICY as CREDIT_POLICY
from .conftest import CHECKLIST, POLICY, Replica, store_urls, tool_call, unique

TIMEOUT = httpx.Timeout(30.0)


class Conversation:
    """One agent's dialogue, sent one call at a time to `/v1/check` as a loop does (OpenAI Chat messages)."""

    def __init__(self, client: httpx.Client, url: str, session_id: str | None, text: str) -> None:
        self.client, self.url, self.session_id = client, url, session_id
        self.history: list[dict[str, Any]] = [{"role": "user", "content": text}]

    def step(self, call_id: str, tool: str, args: dict[str, Any], result: Any) -> dict[str, Any]:
        """Ask for one call; when allowed, the tool's result joins the history, else the guard's message does."""
        call = tool_call(call_id, tool, args)
        self.history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        body: dict[str, Any] = {"trajectory": self.history, "call": call}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        response = self.client.post(f"{self.url}/v1/check", json=body)
        assert response.status_code == 200, response.text
        decision: dict[str, Any] = response.json()
        content = json.dumps(result) if decision["outcome"] == "allow" else decision["message"]
        self.history.append({"role": "tool", "tool_call_id": call_id, "content": content})
        return decision


def refund_conversation(conversation: Conversation, transaction: str, *, allowed: bool) -> dict[str, str]:
    """call_1..call_3 read the refund's facts, call_4 asks for too much (always blocked), call_5 asks for 120."""
    reads = [
        ("get_refund_policy", {"transaction_id": transaction}, {"transaction_id": transaction, "refund_allowed": allowed}),
        ("get_transaction", {"transaction_id": transaction}, {"transaction_id": transaction, "captured": 200, "currency": "USD"}),
        ("get_approval", {"approval_id": ""}, {"approval_id": "", "status": "none"}),
    ]  # fmt: skip
    outcomes = {}
    for number, (tool, args, result) in enumerate(reads, start=1):
        outcomes[f"call_{number}"] = conversation.step(f"call_{number}", tool, args, result)["outcome"]
    for number, amount in ((4, 900), (5, 120)):
        args = {"transaction_id": transaction, "amount": amount, "currency": "USD", "idempotency_key": f"refund:{transaction}"}  # fmt: skip
        decision = conversation.step(f"call_{number}", "issue_refund", args, {"status": "issued"})
        outcomes[f"call_{number}"] = f"{decision['outcome']}:{decision['stage']}"
    return outcomes


EXPECTED = {"call_1": "allow", "call_2": "allow", "call_3": "allow", "call_4": "block:gate"}


@pytest.fixture
def server(tmp_path: Path, replicas: Any) -> Replica:
    """One real server on the refund sandbox, with a SQLite file as its store."""
    store = f"sqlite:///{tmp_path / 'guard.db'}"
    return replicas("s", ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--store", store])


def test_a_block_in_one_conversation_does_not_refuse_the_same_call_id_in_another(server: Replica) -> None:
    """Conversation A's call_5 is blocked by the policy; B's and C's call_5 are allowed, as each alone would be."""
    with httpx.Client(timeout=TIMEOUT) as client:
        runs = {
            name: refund_conversation(Conversation(client, server.url, f"conv-{name}-{unique()}", "refund please"),
                                      unique(), allowed=name != "A")
            for name in ("A", "B", "C")
        }  # fmt: skip
    assert runs["A"] == {**EXPECTED, "call_5": "block:gate"}
    assert runs["B"] == runs["C"] == {**EXPECTED, "call_5": "allow:gate"}


def test_without_a_session_id_a_deny_is_keyed_by_the_call_alone(server: Replica) -> None:
    """The one-shot default: A's blocked call_5 does not refuse B's call_5 (another refund), but it does refuse
    C's, which asks for A's refund with A's call id in the same message: without a session id nothing tells
    them apart. Clients should send a session id."""
    transaction = unique()
    with httpx.Client(timeout=TIMEOUT) as client:
        a = refund_conversation(Conversation(client, server.url, None, "refund please"), transaction, allowed=False)
        b = refund_conversation(Conversation(client, server.url, None, "refund please"), unique(), allowed=True)
        c_conversation = Conversation(client, server.url, None, "refund please")
        c = refund_conversation(c_conversation, transaction, allowed=True)
    assert a["call_5"] == "block:gate"
    assert b["call_5"] == "allow:gate"
    assert c["call_5"] == "block:guard"
    assert "refused earlier" in c_conversation.history[-1]["content"]


# -- replicas share the record --------------------------------------------------------


def credit_files(tmp_path: Path) -> list[str]:
    (tmp_path / "credits.md").write_text(CREDIT_POLICY)
    (tmp_path / "credits.yaml").write_text(CREDIT_CHECKLIST)
    return ["--policy", str(tmp_path / "credits.md"), "--checklist", str(tmp_path / "credits.yaml")]


@pytest.mark.slow
@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_a_credit_allowed_on_one_replica_counts_on_the_other(tmp_path: Path, replicas: Any, store_url: str) -> None:
    """The host forgot the first credit (it kept only the newest turn); replica b still has it from the store."""
    files = credit_files(tmp_path)
    a = replicas("a", [*files, "--store", store_url])
    b = replicas("b", [*files, "--store", store_url])
    session = f"conv-{unique()}"
    first = tool_call("call_1", "send_credit", {"user_id": "u1", "amount": 50})
    second = tool_call("call_2", "send_credit", {"user_id": "u1", "amount": 50})
    with httpx.Client(timeout=TIMEOUT) as client:
        asked = [{"role": "user", "content": "a credit please"}, {"role": "assistant", "tool_calls": [first]}]
        allowed = client.post(f"{a.url}/v1/check", json={"trajectory": asked, "call": first, "session_id": session})
        reported = client.post(
            f"{a.url}/v1/results", json={"session_id": session, "call_id": "call_1", "content": '{"ok": true}'}
        )
        trimmed = [{"role": "user", "content": "another one"}, {"role": "assistant", "tool_calls": [second]}]
        again = client.post(f"{b.url}/v1/check", json={"trajectory": trimmed, "call": second, "session_id": session})
        other = client.post(
            f"{b.url}/v1/check", json={"trajectory": trimmed, "call": second, "session_id": f"conv-{unique()}"}
        )
    assert allowed.json()["outcome"] == "allow" and reported.json() == {"recorded": True}
    assert again.json()["outcome"] == "block" and "credit-once" in json.dumps(again.json()["requirements"])
    assert other.json()["outcome"] == "allow"


@pytest.mark.slow
@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_sibling_credits_checked_at_once_on_two_replicas_are_judged_as_one_process_judges_them(
    tmp_path: Path, replicas: Any, store_url: str
) -> None:
    """One assistant message issues two credits; the host sends both checks at the same moment, one to each
    replica. The record is the store's, and the decisions of one session are serialized there, so in every
    conversation exactly the first credit passes, as the history read once decides: the second sees the first
    issued before it, judged or not."""
    files = credit_files(tmp_path)
    a = replicas("a", [*files, "--store", store_url])
    b = replicas("b", [*files, "--store", store_url])
    first = tool_call("call_0", "send_credit", {"user_id": "u1", "amount": 50})
    second = tool_call("call_1", "send_credit", {"user_id": "u1", "amount": 50})
    history = [{"role": "user", "content": "two credits please"}, {"role": "assistant", "tool_calls": [first, second]}]
    outcomes: list[tuple[str, str]] = []
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(max_workers=4) as pool:
        for round_ in range(12):
            session = f"conv-{unique()}"
            urls = (a.url, b.url) if round_ % 2 else (b.url, a.url)
            futures = [
                pool.submit(
                    client.post, f"{url}/v1/check", json={"trajectory": history, "call": call, "session_id": session}
                )
                for url, call in zip(urls, (first, second), strict=True)
            ]
            answers = [future.result().json() for future in futures]
            outcomes.append((answers[0]["outcome"], answers[1]["outcome"]))
    assert outcomes == [("allow", "block")] * 12


@pytest.mark.slow
@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_two_turns_checked_at_once_on_two_replicas_never_both_send_a_credit(
    tmp_path: Path, replicas: Any, store_url: str
) -> None:
    """A client that keeps only the newest turn sends two credit checks of one conversation at the same moment,
    one to each replica, neither history showing the other credit. Decided one after the other in the store,
    the second always sees the first; decided side by side, both would pass."""
    files = credit_files(tmp_path)
    a = replicas("a", [*files, "--store", store_url])
    b = replicas("b", [*files, "--store", store_url])
    calls = [tool_call(f"call_{n}", "send_credit", {"user_id": "u1", "amount": 50}) for n in (1, 2)]
    histories = [[{"role": "user", "content": "a credit"}, {"role": "assistant", "tool_calls": [c]}] for c in calls]
    allowed: list[int] = []
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(16):
            session = f"conv-{unique()}"
            futures = [
                pool.submit(
                    client.post, f"{url}/v1/check", json={"trajectory": history, "call": call, "session_id": session}
                )
                for url, call, history in zip((a.url, b.url), calls, histories, strict=True)
            ]
            allowed.append(sum(future.result().json()["outcome"] == "allow" for future in futures))
    assert allowed == [1] * 16


# -- in process: the request fields and the results endpoint ---------------------------


def credit_client(make_client: Any, tmp_path: Path, **overrides: Any) -> Any:
    files = credit_files(tmp_path)
    return make_client(policy=Path(files[1]), checklist=Path(files[3]), grant_key=None, **overrides)


def check(client: Any, call_id: str, session_id: str | None, tool: str = "send_credit", **extra: Any) -> Any:
    call = tool_call(call_id, tool, {"user_id": "u1", "amount": 50} if tool == "send_credit" else {"user_id": "u1"})
    body: dict[str, Any] = {"trajectory": [{"role": "assistant", "tool_calls": [call]}], "call": call, **extra}
    if session_id is not None:
        body["session_id"] = session_id
    return client.post("/v1/check", json=body)


@pytest.mark.parametrize("session_id", ["", " padded", "tab\there", "x" * 201, 42])
def test_a_session_id_that_is_not_a_plain_id_is_refused_naming_the_field(make_client: Any, session_id: Any) -> None:
    client = make_client()
    body = {"trajectory": [], "call": tool_call("c1", "get_transaction", {}), "session_id": session_id}
    response = client.post("/v1/check", json=body)
    assert response.status_code == 422 and response.json()["field"] == "session_id"


def test_a_result_reported_for_an_allowed_call_is_recorded_once(make_client: Any, tmp_path: Path) -> None:
    client = credit_client(make_client, tmp_path)
    assert check(client, "call_1", "s1").json()["outcome"] == "allow"
    report = {
        "session_id": "s1",
        "call_id": "call_1",
        "content": "Error: the payment service refused",
        "is_error": True,
    }
    assert client.post("/v1/results", json=report).json() == {"recorded": True}
    assert client.post("/v1/results", json=report).json() == {"recorded": False}  # nothing waits for one now
    assert check(client, "call_2", "s1").json()["outcome"] == "allow"  # a failed credit does not count


def test_an_unknown_fate_counts_the_call_as_done_and_the_block_says_so(make_client: Any, tmp_path: Path) -> None:
    client = credit_client(make_client, tmp_path)
    assert check(client, "call_1", "s1").json()["outcome"] == "allow"
    report = {"session_id": "s1", "call_id": "call_1", "unknown": "the upstream timed out"}
    assert client.post("/v1/results", json=report).json() == {"recorded": True}
    decision = check(client, "call_2", "s1").json()
    assert decision["outcome"] == "block" and "not known (the upstream timed out)" in decision["message"]


def test_a_second_write_does_not_wait_for_the_first_ones_result(make_client: Any, tmp_path: Path) -> None:
    """An HTTP check never blocks on another request: a write still running counts as done at once."""
    import time

    client = credit_client(make_client, tmp_path)
    assert check(client, "call_1", "s1").json()["outcome"] == "allow"
    started = time.monotonic()
    assert check(client, "call_2", "s1").json()["outcome"] == "block"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "report",
    [
        {"session_id": "s1", "call_id": "call_1"},
        {"session_id": "s1", "call_id": "call_1", "content": "ok", "unknown": "cancelled"},
        {"session_id": "s1", "call_id": "call_1", "unknown": "cancelled", "is_error": True},
        {"session_id": "s1", "call_id": "", "content": "ok"},
        {"call_id": "call_1", "content": "ok"},
    ],
)
def test_a_result_report_needs_a_session_a_call_and_exactly_one_fate(make_client: Any, report: Any) -> None:
    assert make_client().post("/v1/results", json=report).status_code == 422


def test_reporting_a_result_needs_the_token(make_client: Any) -> None:
    client = make_client(token="s3cret-token-for-tests-0123456789")
    report = {"session_id": "s1", "call_id": "call_1", "content": "ok"}
    assert client.post("/v1/results", json=report).status_code == 401


def test_a_session_the_store_evicted_blocks_writes_saying_the_record_is_gone(make_client: Any, tmp_path: Path) -> None:
    """Another replica evicted it (retention): writes are blocked with the reason, reads pass, reports are refused."""
    client = credit_client(make_client, tmp_path)
    with sqlite3.connect(tmp_path / "store.db") as conn:
        conn.execute("INSERT INTO session_tombstones (session_id, evicted_at) VALUES ('gone', 0)")
    decision = check(client, "call_1", "gone").json()
    assert decision["outcome"] == "block" and "no longer keeps the record of this conversation" in decision["message"]
    assert check(client, "call_2", "gone", tool="get_account").json()["outcome"] == "allow"
    report = client.post("/v1/results", json={"session_id": "gone", "call_id": "call_1", "content": "ok"})
    assert report.status_code == 409 and "evicted" in report.json()["error"]


def test_a_session_is_judged_on_its_record_not_only_on_the_history_sent(make_client: Any, tmp_path: Path) -> None:
    """The bypass a session closes: the second credit with a history that omits the first."""
    client = credit_client(make_client, tmp_path)
    assert check(client, "call_1", "s1").json()["outcome"] == "allow"
    client.post("/v1/results", json={"session_id": "s1", "call_id": "call_1", "content": "ok"})
    assert check(client, "call_2", "s1").json()["outcome"] == "block"
    assert check(client, "call_2", None).json()["outcome"] == "allow"  # one-shot: only what the host sent


def test_trace_events_of_a_session_check_carry_the_session_id(make_client: Any, tmp_path: Path) -> None:
    from policyguard.audit.trace import read_trace

    client = credit_client(make_client, tmp_path)
    check(client, "call_1", "s-42")
    client.service.trace.sync()
    events = [e for e in read_trace(tmp_path / "trace.jsonl") if e.get("call_id") == "call_1"]
    assert events and all(e["session_id"] == "s-42" for e in events)


def test_the_openapi_document_describes_the_session_id_and_the_results_endpoint(make_client: Any) -> None:
    document = make_client().get("/openapi.json").json()
    field = document["components"]["schemas"]["CheckRequest"]["properties"]["session_id"]
    assert "call id alone" in field["description"] and "send a session id" in field["description"]
    results = document["paths"]["/v1/results"]["post"]
    assert results["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ResultReport")
    assert {"200", "409", "422"} <= set(results["responses"])


def test_a_session_history_sent_again_is_converted_once_and_an_earlier_change_is_read_again(make_client: Any) -> None:
    """The server converts only what a session's history adds; a changed earlier message is refused as one-shot."""
    from .conftest import check_body

    client = make_client()
    transaction = unique()
    body = check_body(transaction, session_id="conv-1")
    assert client.post("/v1/check", json=body).json()["outcome"] == "allow"
    assert len(client.service.histories) == 1
    broken = json.loads(json.dumps(body))
    broken["call"]["id"] = "c2"
    broken["trajectory"][3]["tool_call_id"] = "r1"  # an earlier result now answers r1 a second time
    one_shot = {key: value for key, value in broken.items() if key != "session_id"}
    for sent in (broken, one_shot):
        answer = client.post("/v1/check", json=sent)
        assert answer.status_code == 422 and "answered by two results" in answer.json()["error"], answer.text
    assert len(client.service.histories) == 0  # the refused list took its conversation's entry with it


def test_a_sqlite_file_store_commits_concurrent_writes_in_groups(make_client: Any) -> None:
    """Sixteen request threads share one fsync per batch (a session check writes twice) rather than queueing."""
    assert make_client().service.store.inner.group_commit
    assert not make_client(store="sqlite:///:memory:").service.store.inner.group_commit  # no file, no fsync
