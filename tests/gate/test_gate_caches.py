"""What the gate remembers between decisions is bounded and keyed so nothing else can reuse it.

Parsed tool results are keyed by their exact text (a different text never
reuses a parse) and bounded by total characters; per-tool plans are bounded in
the number of tool names (an agent chooses the names it calls).
"""

from __future__ import annotations

from datetime import datetime, timezone

from policyguard.checklist.schema import Checklist
from policyguard.gate import facts
from policyguard.gate.hardgate import _CACHED_TOOLS, HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, ToolResult, Trajectory

CHECKLIST = Checklist.model_validate(
    {
        "policy": {"name": "p", "version": "sha256:" + "1" * 64},
        "facts": {"order": {"tool": "get_order", "match": {"order_id": "args.order_id"}}},
        "tools": {"get_order": {"mutating": False}},
        "general_rules": [
            {
                "id": "small",
                "text": "Amounts stay small.",
                "kind": "data",
                "source": "small",
                "check": "!has(args.amount) || args.amount < 10",
            }
        ],
    }
)
CONTEXT = CheckContext(checklist=CHECKLIST, policy_text="", now=datetime(2026, 1, 1, tzinfo=timezone.utc))


def _result(content: str) -> ToolResult:
    return ToolResult(call=ToolCall(id="r", name="get_order"), content=content, index=1)


def test_the_gate_remembers_at_most_a_bounded_number_of_tool_names() -> None:
    gate = HardGate(CHECKLIST)
    for number in range(_CACHED_TOOLS + 200):
        decision = gate.check(
            ToolCall(id=f"c{number}", name=f"tool_{number}", arguments={"amount": 50}), Trajectory(), CONTEXT
        )
        assert decision.outcome == "block"  # an unknown tool is judged as mutating: the general rule applies
    assert len(gate._plans) <= _CACHED_TOOLS and len(gate._tries) <= _CACHED_TOOLS


def test_a_parse_is_reused_only_for_the_identical_text() -> None:
    first = facts.read_result(_result('{"order_id": "O1", "status": "open"}'))
    same = facts.read_result(_result('{"order_id": "O1", "status": "open"}'))
    other = facts.read_result(_result('{"order_id": "O1", "status": "open" }'))
    changed = facts.read_result(_result('{"order_id": "O1", "status": "closed"}'))
    assert first is same
    assert other is not first and other == first
    assert changed[0] == {"order_id": "O1", "status": "closed"}


def test_the_parse_cache_stays_within_its_character_budget() -> None:
    cache = facts._ParseCache(budget=1000)
    for number in range(200):
        cache.get(f'{{"n": {number}, "pad": "{"x" * 40}"}}')
    assert cache._used <= 1000 and len(cache._entries) < 200


def test_an_unreadable_text_is_remembered_as_unreadable() -> None:
    assert facts.read_result(_result("not json")) == (None, "not JSON")
    assert facts.read_result(_result("not json")) == (None, "not JSON")


def test_a_result_over_the_cached_size_is_parsed_without_the_cache() -> None:
    big = '{"pad": "' + "x" * facts.PARSE_CACHE_MAX_CHARS + '"}'
    assert facts.read_result(_result(big))[1] is None
    assert big not in facts._PARSED._entries


def test_a_gate_decision_reads_the_newest_result_even_when_an_older_text_is_cached() -> None:
    """Two reads of one order with different results: the newer text decides, whatever is cached."""
    checklist = CHECKLIST.model_copy(
        update={
            "general_rules": [
                CHECKLIST.general_rules[0].model_copy(
                    update={"check": 'facts.order.status == "open"', "prerequisites": ["get_order"]}
                )
            ]
        }
    )
    gate = HardGate(checklist)
    read = Message(role="assistant", tool_calls=[ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})])
    reread = Message(role="assistant", tool_calls=[ToolCall(id="r2", name="get_order", arguments={"order_id": "O1"})])
    open_ = Message(role="tool", tool_call_id="r1", content='{"order_id": "O1", "status": "open"}')
    closed = Message(role="tool", tool_call_id="r2", content='{"order_id": "O1", "status": "closed"}')
    write = ToolCall(id="w", name="close_order", arguments={"order_id": "O1"})
    assert gate.check(write, Trajectory(messages=[read, open_]), CONTEXT).outcome == "escalate"
    assert gate.check(write, Trajectory(messages=[read, open_, reread, closed]), CONTEXT).outcome == "block"


def test_a_resolver_that_changes_its_keys_cannot_change_a_cached_record() -> None:
    """Keys computed from a shared parsed record reach the integrator as a copy."""
    checklist = Checklist.model_validate(
        {
            "policy": {"name": "p", "version": "sha256:" + "1" * 64},
            "facts": {
                "order": {"tool": "get_order", "match": {"order_id": "args.order_id"}},
                "shipment": {"tool": "get_shipment", "match": {"meta": "facts.order.meta"}, "bind": {}},
            },
            "tools": {"get_order": {"mutating": False}, "get_shipment": {"mutating": False}},
            "general_rules": [
                {
                    "id": "meta-kept",
                    "text": "t",
                    "kind": "data",
                    "source": "s",
                    "check": 'facts.order.meta.region == "eu" && facts.shipment.ok',
                }
            ],
        }
    )

    class Meddler:
        def resolve(self, fact_name: str, source: object, keys: dict[str, object]) -> object:
            if fact_name == "shipment":
                keys["meta"]["region"] = "us"  # type: ignore[index]
                return {"ok": True}
            return None

    read = Message(role="assistant", tool_calls=[ToolCall(id="r1", name="get_order", arguments={"order_id": "O9"})])
    record = Message(role="tool", tool_call_id="r1", content='{"order_id": "O9", "meta": {"region": "eu"}}')
    write = ToolCall(id="w", name="ship", arguments={"order_id": "O9"})
    gate = HardGate(checklist, resolver=Meddler())
    for _ in range(2):
        decision = gate.check(write, Trajectory(messages=[read, record]), CONTEXT)
        assert [r.status for r in decision.requirements] == ["MET"], decision
