"""``serve`` and the reads the guard needs (issue 33): the block names them, the client makes them and asks again.

The service has no tools of its own, so it cannot read. A block that only reads
can cure carries ``needs_reads``; the client runs them with its own read tools
and sends the check again with their results, before the pending call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.gate.facts import FETCH_ID_PREFIX
from tests import fetchshop as shop

from .conftest import tool_call


@pytest.fixture
def client(make_client: Any, tmp_path: Path) -> Any:
    import textwrap

    policy, checklist = tmp_path / "shop.md", tmp_path / "shop.yaml"
    policy.write_text(shop.POLICY, encoding="utf-8")
    checklist.write_text(textwrap.dedent(shop.CHECKLIST), encoding="utf-8")
    return make_client(policy=policy, checklist=checklist, grant_key=None)


def dialogue(user: str | None = "ann") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "I am ann, please cancel my order."}]
    if user is not None:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [tool_call("c0", "get_user", {"user_id": user})]},
            {"role": "tool", "tool_call_id": "c0", "content": json.dumps(shop.get_user(user))},
        ]
    return messages


def pending(order_id: str) -> dict[str, Any]:
    return tool_call("w1", "cancel_order", {"order_id": order_id})


def check(client: Any, messages: list[dict[str, Any]], order_id: str) -> dict[str, Any]:
    body = {"trajectory": [*messages, {"role": "assistant", "content": None, "tool_calls": [pending(order_id)]}],
            "call": pending(order_id)}  # fmt: skip
    response = client.post("/v1/check", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def with_reads(messages: list[dict[str, Any]], reads: list[dict[str, Any]], answer: Any) -> list[dict[str, Any]]:
    """The client's round trip: each read made with its own tool, its call and result before the pending call."""
    calls = [tool_call(r["call_id"], r["tool"], r["arguments"]) for r in reads]
    results = [
        {"role": "tool", "tool_call_id": r["call_id"], "content": json.dumps(answer(r["tool"], r["arguments"]))}
        for r in reads
    ]
    return [*messages, {"role": "assistant", "content": None, "tool_calls": calls}, *results]


def read_the_shop(tool: str, arguments: dict[str, Any]) -> Any:
    return shop.get_order(**arguments) if tool == "get_order" else shop.get_user(**arguments)


def test_a_block_only_a_read_can_cure_names_the_read_and_the_resent_check_passes_the_gate(client: Any) -> None:
    first = check(client, dialogue(), "O1")
    assert first["outcome"] == "block" and "get_order" in first["message"]  # the remediation is still there
    (read,) = first["needs_reads"]
    assert (read["tool"], read["arguments"]) == ("get_order", {"order_id": "O1"})
    assert read["call_id"].startswith(FETCH_ID_PREFIX)
    second = check(client, with_reads(dialogue(), first["needs_reads"], read_the_shop), "O1")
    assert second["outcome"] != "block" and "needs_reads" not in second
    assert [r["status"] for r in second["requirements"] if r["id"] == "own-order"] == ["MET"]


def test_the_read_showing_another_owner_blocks_for_good(client: Any) -> None:
    first = check(client, dialogue(), "O2")
    second = check(client, with_reads(dialogue(), first["needs_reads"], read_the_shop), "O2")
    assert second["outcome"] == "block" and "needs_reads" not in second
    assert "own-order" in second["message"]


def test_a_read_answered_for_another_record_is_asked_for_again_never_taken(client: Any) -> None:
    first = check(client, dialogue(), "O1")
    second = check(client, with_reads(dialogue(), first["needs_reads"], lambda t, a: shop.ORDERS["O2"]), "O1")
    assert second["outcome"] == "block"
    assert [(r["tool"], r["arguments"]) for r in second["needs_reads"]] == [("get_order", {"order_id": "O1"})]


def test_nobody_authenticated_gets_no_reads_to_make(client: Any) -> None:
    answer = check(client, dialogue(user=None), "O1")
    assert answer["outcome"] == "block" and "needs_reads" not in answer


def test_reads_made_for_the_guard_never_authenticate(client: Any) -> None:
    """A client that sends a profile read with a guard-read id has authenticated nobody."""
    messages = dialogue(user=None)
    reads = [{"call_id": f"{FETCH_ID_PREFIX}x-1", "tool": "get_user", "arguments": {"user_id": "ann"}},
             {"call_id": f"{FETCH_ID_PREFIX}x-2", "tool": "get_order", "arguments": {"order_id": "O1"}}]  # fmt: skip
    answer = check(client, with_reads(messages, reads, read_the_shop), "O1")
    assert answer["outcome"] == "block" and "authenticate" in answer["message"]
