"""The guard reads what it needs (issue 33): what a fetch may do, and what it never does."""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any

import pytest

from policyguard import Guard, HardGate, parse_checklist
from policyguard.audit.trace import Trace
from policyguard.errors import ChecklistError
from policyguard.gate.facts import FETCH_ID_PREFIX, resolve_facts, resolve_principal
from policyguard.gate.fetch import FetchedView
from policyguard.guard.fetching import Answer, ToolTable
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, ToolResult, ToolResultsView, Trajectory

POLICY = "Only the owner may cancel an order. A replacement is a variant of the same product.\n"

CHECKLIST = f"""
policy: {{name: shop, version: "{policy_version(POLICY)}"}}
principal: {{tool: get_user, field: user_id}}
facts:
  order:
    tool: get_order
    match: {{order_id: args.order_id}}
    refreshed_by: [cancel_order]
  products:
    tool: get_product
    collect: all
    fetch: >-
      facts.order.items.filter(i, i.item_id in args.item_ids).map(i, {{"product_id": i.product_id}})
tools:
  get_order: {{mutating: false}}
  get_user: {{mutating: false}}
  get_product: {{mutating: false}}
  cancel_order:
    requirements:
      - id: own-order
        text: Only the owner may cancel an order.
        kind: data
        source: Only the owner may cancel an order.
        prerequisites: [get_order]
        check: facts.order.user_id == principal
  exchange_items:
    requirements:
      - id: same-product
        text: A replacement is a variant of the same product.
        kind: data
        source: A replacement is a variant of the same product.
        check: >-
          args.new_item_ids.all(n, facts.products.exists(p, n in p.variants))
          && facts.order.user_id == principal
"""

ORDERS = {
    "O1": {"order_id": "O1", "user_id": "ann", "items": [{"item_id": "i1", "product_id": "P1"}]},
    "O2": {"order_id": "O2", "user_id": "bob", "items": []},
}
PRODUCTS = {
    "P1": {"product_id": "P1", "variants": {"i1": {}, "i2": {}}},
    "P2": {"product_id": "P2", "variants": {"x9": {}}},
}


def checklist() -> Any:
    return parse_checklist(textwrap.dedent(CHECKLIST), file="inline.yaml")


def guard(**kwargs: Any) -> Guard:
    cl = checklist()
    return Guard(cl, POLICY, gate=HardGate(cl), allow_unverified=True, trace=Trace(), **kwargs)


class Host:
    """The host's read tools, counting every call the guard makes."""

    def __init__(self, orders: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.orders = ORDERS if orders is None else orders

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer:
        self.calls.append((tool, arguments))
        if tool == "get_order":
            return Answer(json.dumps(self.orders[arguments["order_id"]]))
        if tool == "get_product":
            return Answer(json.dumps(PRODUCTS[arguments["product_id"]]))
        if tool == "get_user":
            return Answer(json.dumps({"user_id": arguments["user_id"]}))
        raise LookupError(tool)


def dialogue(*calls: tuple[str, dict[str, Any], Any], user: str = "hi") -> Trajectory:
    messages = [Message(role="user", content=user)]
    for n, (tool, args, result) in enumerate(calls):
        messages.append(Message(role="assistant", tool_calls=[ToolCall(id=f"c{n}", name=tool, arguments=args)]))
        messages.append(Message(role="tool", tool_call_id=f"c{n}", content=json.dumps(result)))
    return Trajectory(messages=messages)


AUTHENTICATED = ("get_user", {"user_id": "ann"}, {"user_id": "ann"})


def test_a_missing_record_is_read_and_the_write_judged_on_it() -> None:
    host, g = Host(), guard()
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    assert g.check(call, dialogue(AUTHENTICATED)).outcome == "block"  # no fetcher: today's "read first"
    decision = g.check(call, dialogue(AUTHENTICATED), fetch=host)
    assert decision.outcome == "allow"
    assert host.calls == [("get_order", {"order_id": "O1"})]
    (event,) = [e for e in g.trace.events if e["event"] == "fetch"]
    assert event["tool"] == "get_order" and event["arguments"] == {"order_id": "O1"}
    assert event["fetched_by"] == "guard" and len(event["result_sha256"]) == 64
    assert event["call_id"].startswith(FETCH_ID_PREFIX)


def test_an_unauthenticated_user_gets_no_fetch_and_must_authenticate() -> None:
    host = Host()
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O2"})
    decision = guard().check(call, dialogue(user="I am bob, cancel O2"), fetch=host)
    assert decision.outcome == "block" and "authenticate" in (decision.message or "")
    assert host.calls == []


def test_a_fetched_record_of_another_user_is_refused() -> None:
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O2"})
    decision = guard().check(call, dialogue(AUTHENTICATED), fetch=Host())
    assert decision.outcome == "block" and "own-order" in (decision.message or "")


def test_a_read_answering_for_another_record_is_not_the_fact() -> None:
    host = Host(orders={"O1": ORDERS["O2"]})  # asked for O1, answers O2's record
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    decision = guard().check(call, dialogue(AUTHENTICATED), fetch=host)
    assert decision.outcome == "block" and decision.requirements[0].status == "NOT_MET"


@pytest.mark.parametrize(
    "answer",
    [
        Answer("{not json"),
        Answer("x" * 1_000_001),
        Answer("order service down", is_error=True),
        "a bare string, not an Answer",
        LookupError("no such tool"),
    ],
    ids=["malformed", "huge", "error", "not-an-answer", "raises"],
)
def test_a_bad_read_leaves_the_block_as_it_was(answer: Any) -> None:
    def host(tool: str, arguments: dict[str, Any]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    before = guard().check(call, dialogue(AUTHENTICATED))
    after = guard().check(call, dialogue(AUTHENTICATED), fetch=host)
    assert after.outcome == "block" and after.message == before.message


def test_a_slow_read_times_out_and_the_block_stands() -> None:
    def slow(tool: str, arguments: dict[str, Any]) -> Answer:
        time.sleep(2)
        return Answer(json.dumps(ORDERS["O1"]))

    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    started = time.monotonic()
    decision = guard(fetch_timeout_s=0.2).check(call, dialogue(AUTHENTICATED), fetch=slow)
    assert decision.outcome == "block" and time.monotonic() - started < 1.5


def test_fetch_maps_compute_the_reads_of_list_facts_from_records_already_read() -> None:
    host = Host()
    read_order = ("get_order", {"order_id": "O1"}, ORDERS["O1"])
    ok = ToolCall(
        id="w", name="exchange_items", arguments={"order_id": "O1", "item_ids": ["i1"], "new_item_ids": ["i2"]}
    )
    assert guard().check(ok, dialogue(AUTHENTICATED, read_order), fetch=host).outcome == "allow"
    assert host.calls == [("get_product", {"product_id": "P1"})]
    other = ok.model_copy(update={"arguments": {"order_id": "O1", "item_ids": ["i1"], "new_item_ids": ["x9"]}})
    assert guard().check(other, dialogue(AUTHENTICATED, read_order), fetch=Host()).outcome == "block"


def test_at_most_max_fetches_reads_per_decision() -> None:
    host = Host()
    call = ToolCall(
        id="w", name="exchange_items", arguments={"order_id": "O1", "item_ids": ["i1"], "new_item_ids": ["i2"]}
    )
    decision = guard(max_fetches=1).check(call, dialogue(AUTHENTICATED), fetch=host)
    assert decision.outcome == "block" and host.calls == [("get_order", {"order_id": "O1"})]
    assert guard(max_fetches=0).check(call, dialogue(AUTHENTICATED), fetch=Host()).outcome == "block"


def test_a_checklist_cannot_fetch_a_mutating_tool() -> None:
    text = textwrap.dedent(CHECKLIST).replace("  get_product: {mutating: false}\n", "")
    with pytest.raises(ChecklistError, match="not declared mutating: false"):
        parse_checklist(text, file="inline.yaml")


def test_a_newest_fact_of_an_undeclared_tool_is_never_fetched() -> None:
    text = textwrap.dedent(CHECKLIST).replace("  get_order: {mutating: false}\n", "")
    cl = parse_checklist(text, file="inline.yaml")
    host = Host()
    g = Guard(cl, POLICY, gate=HardGate(cl), allow_unverified=True)
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    g.check(call, dialogue(AUTHENTICATED), fetch=host)
    assert host.calls == []


def test_a_fetched_profile_never_authenticates() -> None:
    cl = checklist()
    fetched = ToolCall(id=f"{FETCH_ID_PREFIX}1", name="get_user", arguments={"user_id": "bob"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[fetched]),
            Message(role="tool", tool_call_id=fetched.id, content=json.dumps({"user_id": "bob"})),
        ]
    )
    assert resolve_principal(cl, trajectory, None) is None


def test_a_fetched_read_counts_before_a_write_of_the_batch_still_running() -> None:
    cl = checklist()
    write = ToolCall(id="w1", name="cancel_order", arguments={"order_id": "O1"})
    pending = ToolCall(id="w2", name="exchange_items", arguments={"order_id": "O1", "item_ids": [], "new_item_ids": []})
    batch = Trajectory(messages=[Message(role="assistant", tool_calls=[write, pending])])  # w1 not answered
    read = ToolCall(id=f"{FETCH_ID_PREFIX}9", name="get_order", arguments={"order_id": "O1"})
    result = ToolResult(call=read, content=json.dumps(ORDERS["O1"]), index=-1)
    base = ToolResultsView(batch).call_sites()[:1]
    view = FetchedView(base, [(read, result)])
    facts = resolve_facts(cl, pending, view, {"order"}, principal="ann")
    assert "order" in facts.missing  # cancel_order may have changed it: read again, never taken as after it
    answered = Trajectory(messages=[*batch.messages, Message(role="tool", tool_call_id="w1", content="not the order")])
    view = FetchedView(ToolResultsView(answered).call_sites()[:1], [(read, result)])
    assert resolve_facts(cl, pending, view, {"order"}, principal="ann").values["order"]["order_id"] == "O1"


def test_the_session_record_keeps_the_fetched_read_marked_and_before_the_write() -> None:
    g, host = guard(), Host()
    session = g.session("s1")
    call = ToolCall(id="w", name="cancel_order", arguments={"order_id": "O1"})
    assert g.check(call, dialogue(AUTHENTICATED), session=session, fetch=host).outcome == "allow"
    sites = session.view().call_sites()
    fetched = [s for s in sites if s.call.id.startswith(FETCH_ID_PREFIX)]
    assert [s.call.name for s in fetched] == ["get_order"] and fetched[0].result is not None
    assert fetched[0].order <= next(s.order for s in sites if s.call.id == "w")


def test_a_tool_table_is_a_fetcher() -> None:
    table = ToolTable({"get_order": lambda order_id: ORDERS[order_id]})
    assert json.loads(table("get_order", {"order_id": "O1"}).content)["user_id"] == "ann"
    with pytest.raises(LookupError):
        table("cancel_order", {"order_id": "O1"})
