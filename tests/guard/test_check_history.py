"""A message list checked again is read as it is now: the guard converts only what changed, never a stale copy.

``Guard.check`` keeps the conversion of the lists it was handed (keyed by the
session, or else by the list's first two message objects) and converts again
from the first message that differs, so a loop that appends to one list, or
builds a new one around the same messages, pays per new message; a list
edited in place, shortened or replaced is judged exactly as a fresh list would
be. (``tests/formats/test_history_cache.py`` proves the conversion equal to a
whole one on generated histories.)
"""

from __future__ import annotations

import copy
import json
from typing import Any

from policyguard import HardGate, parse_checklist
from policyguard.guard.core import Guard

from .test_wrapper_history import CHECKLIST, POLICY


def guard() -> Guard:
    checklist = parse_checklist(CHECKLIST)
    return Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)


def read(call_id: str, bags: int) -> list[dict[str, Any]]:
    arguments = json.dumps({"reservation_id": "NO6JO3"})
    call = {"id": call_id, "type": "function", "function": {"name": "get_reservation_details", "arguments": arguments}}
    record = {"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "total_baggages": bags}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(record)},
    ]


def bags(call_id: str, total: int) -> dict[str, Any]:
    arguments = json.dumps({"reservation_id": "NO6JO3", "total_baggages": total})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "update_reservation_baggages", "arguments": arguments},
    }


def ask(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def test_a_list_edited_in_place_is_judged_as_a_fresh_copy_of_it_is() -> None:
    checker, messages = guard(), [{"role": "user", "content": "Set my bags to 1."}, *read("r1", 0)]
    ask(messages, bags("w1", 1))
    assert checker.check(bags("w1", 1), messages).outcome == "allow"
    messages[2]["content"] = json.dumps({"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "total_baggages": 3})
    assert checker.check(bags("w1", 1), messages).outcome == "block"  # the record now says 3 bags: a removal
    assert guard().check(bags("w1", 1), copy.deepcopy(messages)).outcome == "block"


def test_a_list_shortened_and_grown_again_is_read_from_where_it_changed() -> None:
    checker, messages = guard(), [{"role": "user", "content": "Add a bag."}, *read("r1", 2)]
    ask(messages, bags("w1", 3))
    assert checker.check(bags("w1", 3), messages).outcome == "allow"
    del messages[1:]  # the host trimmed its history and read the reservation again, which now has 4 bags
    messages += read("r2", 4)
    ask(messages, bags("w2", 3))
    assert checker.check(bags("w2", 3), messages).outcome == "block"


def test_a_loop_appending_to_one_list_keeps_one_conversion_and_a_session_keys_its_own() -> None:
    checker, messages = guard(), [{"role": "user", "content": "Add a bag."}, *read("r1", 2)]
    for turn in range(5):
        ask(messages, bags(f"w{turn}", 3))
        fresh = guard().check(bags(f"w{turn}", 3), copy.deepcopy(messages))
        assert checker.check(bags(f"w{turn}", 3), messages).model_dump(include={"outcome", "requirements"}) == (
            fresh.model_dump(include={"outcome", "requirements"})
        )
        messages.append({"role": "tool", "tool_call_id": f"w{turn}", "content": "Error: not run"})
    assert len(checker._histories) == 1
    ask(messages, bags("w9", 3))
    checker.check(bags("w9", 3), messages, session="s1")
    assert len(checker._histories) == 2


def test_a_new_list_built_around_the_same_messages_converts_only_the_new_ones(monkeypatch: Any) -> None:
    from policyguard.trajectory.formats.chat_history import ChatHistory

    converted: list[int] = []
    real = ChatHistory._append

    def counting(self: ChatHistory, item: Any, index: int) -> None:
        converted.append(index)
        real(self, item, index)

    monkeypatch.setattr(ChatHistory, "_append", counting)
    checker, messages = guard(), [{"role": "user", "content": "Add a bag."}, *read("r1", 2)]
    kept = []  # every list stays alive: a new list never takes the address (the id) of the one before
    for turn in range(3):
        messages = [*messages, {"role": "assistant", "content": None, "tool_calls": [bags(f"w{turn}", 3)]}]
        kept.append(messages)
        converted.clear()
        decision = checker.check(bags(f"w{turn}", 3), messages)
        assert converted == ([0, 1, 2, 3] if turn == 0 else [len(messages) - 2, len(messages) - 1])
        fresh = guard().check(bags(f"w{turn}", 3), copy.deepcopy(messages))
        assert decision.model_dump(include={"outcome", "requirements"}) == fresh.model_dump(
            include={"outcome", "requirements"}
        )
        messages = messages + [{"role": "tool", "tool_call_id": f"w{turn}", "content": "Error: not run"}]
    messages[1]["tool_calls"][0]["id"] = "r9"  # an earlier message edited in place: read again from there
    messages = [*messages, {"role": "assistant", "content": None, "tool_calls": [bags("w8", 3)]}]
    converted.clear()
    decision = checker.check(bags("w8", 3), messages)
    assert converted[0] == 1
    fresh = guard().check(bags("w8", 3), copy.deepcopy(messages))
    assert decision.model_dump(include={"outcome", "requirements"}) == fresh.model_dump(
        include={"outcome", "requirements"}
    )


def test_the_packages_own_messages_in_a_provider_list_are_read_as_the_whole_list_reads_them() -> None:
    from policyguard.trajectory.inputs import as_trajectory
    from policyguard.trajectory.messages import Message

    call, answer = read("r1", 3)
    own = Message(role="tool", tool_call_id="r1", content=answer["content"])  # the package's message, not a dict
    checker, messages = guard(), [{"role": "user", "content": "Set my bags to 1."}, *read("r0", 1), call, own]
    ask(messages, bags("w1", 1))
    expected = guard().check(bags("w1", 1), as_trajectory(copy.deepcopy(messages)))
    assert expected.outcome == "block"  # the newest record, the package's message, says 3 bags
    for _ in range(2):  # converted, then read from the cache
        decision = checker.check(bags("w1", 1), messages)
        assert decision.model_dump(include={"outcome", "requirements"}) == (
            expected.model_dump(include={"outcome", "requirements"})
        )
    first = [Message(role="user", content="Set my bags to 1."), {"role": "assistant", "tool_calls": [bags("w2", 1)]}]
    assert checker.check(bags("w2", 1), first).outcome == guard().check(bags("w2", 1), as_trajectory(first)).outcome
