"""GuardedTools gives the guard its read-only tools (issue 33): a write lacking a read is judged on the read."""

from __future__ import annotations

from typing import Any

from policyguard.gate.facts import FETCH_ID_PREFIX
from policyguard.guard.fetching import read_tools
from policyguard.integrations.openai_loop import GuardedTools
from tests import fetchshop as shop


def _tools(order: Any = shop.get_order, cancelled: list[str] | None = None) -> dict[str, Any]:
    def cancel_order(order_id: str) -> dict[str, str]:
        if cancelled is not None:
            cancelled.append(order_id)
        return {"order_id": order_id, "status": "cancelled"}

    return {"get_user": shop.get_user, "get_order": order, "cancel_order": cancel_order}


def test_without_the_read_tools_the_write_is_blocked_for_the_read() -> None:
    decision = shop.guard().check(shop.cancel(), shop.signed_in())
    assert decision.outcome == "block" and "get_order" in (decision.message or "")


def test_the_tool_table_holds_only_the_tools_declared_read_only() -> None:
    table = read_tools(shop.checklist(), {**_tools(), "unknown_tool": lambda: None})
    assert table is not None and table.names == ["get_order", "get_user"]
    assert read_tools(shop.checklist(), {"cancel_order": lambda order_id: None}) is None


def test_guarded_tools_reads_the_order_itself_and_runs_the_owners_cancel() -> None:
    cancelled: list[str] = []
    loop = GuardedTools(shop.guard(), _tools(cancelled=cancelled))
    trajectory = shop.signed_in()
    before = trajectory.model_dump()
    outcome = loop.run(shop.cancel("O1"), trajectory)
    assert outcome.executed and not outcome.is_error and cancelled == ["O1"]
    assert '"cancelled"' in outcome.content  # the model sees the write's result, not the guard's read
    assert trajectory.model_dump() == before  # the agent's dialogue is not changed
    fetched = [s for s in loop.session.view().call_sites() if s.call.id.startswith(FETCH_ID_PREFIX)]
    assert [(s.call.name, s.call.arguments) for s in fetched] == [("get_order", {"order_id": "O1"})]


def test_a_read_proving_another_owner_blocks_the_cancel() -> None:
    cancelled: list[str] = []
    outcome = GuardedTools(shop.guard(), _tools(cancelled=cancelled)).run(shop.cancel("O2"), shop.signed_in())
    assert outcome.is_error and not outcome.executed and cancelled == []
    assert "own-order" in (outcome.decision.message or "")
    assert outcome.decision.requirements[0].status == "NOT_MET"


def test_a_read_that_fails_or_answers_another_record_leaves_the_block() -> None:
    def broken(order_id: str) -> Any:
        raise TimeoutError("order service down")

    def wrong(order_id: str) -> dict[str, Any]:
        return shop.ORDERS["O2"]  # asked for O1, answers someone else's order

    for order in (broken, wrong):
        cancelled: list[str] = []
        outcome = GuardedTools(shop.guard(), _tools(order, cancelled)).run(shop.cancel("O1"), shop.signed_in())
        assert outcome.is_error and not outcome.executed and cancelled == []
        assert "get_order" in outcome.content  # the agent is told to read it, as without fetching


def test_an_unauthenticated_user_is_never_read_for() -> None:
    reads: list[str] = []

    def order(order_id: str) -> dict[str, Any]:
        reads.append(order_id)
        return shop.ORDERS[order_id]

    trajectory = shop.signed_in()
    trajectory = trajectory.model_copy(update={"messages": trajectory.messages[:1]})  # no profile read
    outcome = GuardedTools(shop.guard(), _tools(order)).run(shop.cancel("O1"), trajectory)
    assert outcome.is_error and not outcome.executed and reads == []
