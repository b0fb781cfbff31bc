"""Property-based: whatever an adversary does to the trajectory, the gate answers and refuses the forbidden.

The shipped airline checklist, mia (``mia_li_3668``) authenticated first, and a
pending ``cancel_reservation(T1QOBS)`` - noah's insured, future reservation, so
every other cancellation rule holds and only ownership forbids it. Hypothesis
then writes the rest of the dialogue: calls with reused ids, results filed
under any id, in any order, twice or never, records for another reservation,
error flags, text, non-finite and huge numbers, deep and wide JSON.

The environment is honest (every result that says it is T1QOBS says noah owns
it); the agent and the plumbing are not. Properties: ``HardGate.check`` never
raises, never fails on a RecursionError, and never lets the cancellation
through.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import Checklist, load_checklist, parse_checklist
from policyguard.gate.hardgate import HardGate
from policyguard.resources import shipped_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

MIA, NOAH = "mia_li_3668", "noah_muller_9847"
THEIRS, MINE = "T1QOBS", "NO6JO3"
OWNERS = {THEIRS: NOAH, MINE: MIA}
FORBIDDEN = ToolCall(id="pending", name="cancel_reservation", arguments={"reservation_id": THEIRS, "reason": "x"})
OWN = ToolCall(id="pending", name="cancel_reservation", arguments={"reservation_id": MINE, "reason": "x"})
OTHER_CALLS = [
    ToolCall(id="pending", name="send_certificate", arguments={"user_id": MIA, "amount": 100}),
    ToolCall(
        id="pending",
        name="update_reservation_baggages",
        arguments={"reservation_id": THEIRS, "total_baggages": 1, "nonfree_baggages": 0, "payment_id": "gift_card_1"},
    ),
    ToolCall(
        id="pending",
        name="update_reservation_flights",
        arguments={"reservation_id": MINE, "cabin": "business", "flights": [], "payment_id": "gift_card_1"},
    ),
]


def reservation(rid: str, **extra: Any) -> dict[str, Any]:
    return {
        "reservation_id": rid,
        "user_id": OWNERS.get(rid, MIA),
        "origin": "JFK",
        "destination": "LAX",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [
            {"flight_number": "HAT1", "date": "2024-05-25", "price": 100, "origin": "JFK", "destination": "LAX"}
        ],
        "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}],
        "payment_history": [{"payment_id": "gift_card_1", "amount": 100}],
        "created_at": "2024-05-01T10:00:00",
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "yes",
        "status": None,
        **extra,
    }


def profile(user_id: str) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "membership": "gold",
        "payment_methods": {"gift_card_1": {"source": "gift_card", "id": "gift_card_1", "amount": 500}},
        "reservations": [rid for rid, owner in OWNERS.items() if owner == user_id],
    }


def honest(call: ToolCall, extra: dict[str, Any]) -> str:
    """What the (honest) environment would answer to ``call``: the record it names."""
    if call.name == "get_user_details":
        return json.dumps(profile(str(call.arguments.get("user_id"))))
    rid = call.arguments.get("reservation_id")
    if isinstance(rid, str):
        return json.dumps(reservation(rid, **extra))
    return json.dumps([reservation(MINE)])


def deep(levels: int) -> str:
    return '{"reservation_id": ' * levels + json.dumps(THEIRS) + "}" * levels


odd_numbers = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", str(2**80), "-" + str(2**70), "1e308"])
garbage = st.one_of(
    st.just(""),
    st.just("Error: Reservation not found"),
    st.text(max_size=40),
    st.integers(2, 5_000).map(lambda n: "[" * n + "]" * n),
    st.integers(2, 5_000).map(deep),
    odd_numbers.map(lambda n: f'{{"reservation_id": "{THEIRS}", "user_id": "{NOAH}", "total_baggages": {n}}}'),
    odd_numbers.map(lambda n: f'{{"reservation_id": "{MINE}", "user_id": "{MIA}", "insurance": {n}}}'),
    st.integers(1_000, 60_000).map(lambda n: json.dumps({"reservation_id": THEIRS, "user_id": NOAH, "wide": [0] * n})),
    st.integers(1_000, 20_000).map(lambda n: json.dumps({f"k{i}": i for i in range(n)})),
    st.just(json.dumps(reservation(MINE))),  # another record, whatever was asked
    st.just(json.dumps(profile(MIA))),
)
extras = st.fixed_dictionaries(
    {},
    optional={
        "cabin": st.sampled_from(["basic_economy", "business", 2**80]),
        "insurance": st.sampled_from(["no", "yes"]),
        "status": st.sampled_from(["cancelled", None]),
    },
)
arguments = st.fixed_dictionaries(
    {},
    optional={
        "reservation_id": st.sampled_from([THEIRS, MINE, "", None]),
        "user_id": st.sampled_from([MIA, NOAH, None]),
    },
)
tools = st.sampled_from(
    [
        "get_reservation_details",
        "get_user_details",
        "update_reservation_flights",
        "cancel_reservation",
        "book_reservation",
        "send_certificate",
        "search_direct_flight",
        "calculate",
    ]
)
ids = st.sampled_from(["u0", "c1", "c2", "c3", "c4", "pending"])


@st.composite
def steps(draw: st.DrawFn) -> list[Message]:
    """One assistant message of calls and, for some of them, results (honest or not), shuffled."""
    calls = [
        ToolCall(id=draw(ids), name=draw(tools), arguments=draw(arguments)) for _ in range(draw(st.integers(1, 3)))
    ]
    results: list[Message] = []
    for call in calls:
        for _ in range(draw(st.integers(0, 2))):
            content = draw(st.one_of(extras.map(lambda e, c=call: honest(c, e)), garbage))
            answered = draw(st.one_of(st.just(call.id), ids))
            results.append(Message(role="tool", tool_call_id=answered, content=content, is_error=draw(st.booleans())))
    order = draw(st.permutations(results))
    return [Message(role="assistant", tool_calls=calls), *order]


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    """mia authenticates first; then anything."""
    first = ToolCall(id="u0", name="get_user_details", arguments={"user_id": MIA})
    messages = [
        Message(role="user", content="Cancel T1QOBS, I'm mia."),
        Message(role="assistant", tool_calls=[first]),
        Message(role="tool", tool_call_id="u0", content=json.dumps(profile(MIA))),
    ]
    for step in draw(st.lists(steps(), max_size=5)):
        messages.extend(step)
    if draw(st.booleans()):  # the honest read of T1QOBS, somewhere
        read = ToolCall(id="c9", name="get_reservation_details", arguments={"reservation_id": THEIRS})
        at = draw(st.integers(3, len(messages)))
        messages[at:at] = [
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="c9", content=json.dumps(reservation(THEIRS))),
        ]
    return Trajectory(messages=messages)


@pytest.fixture(scope="module")
def airline() -> tuple[HardGate, CheckContext]:
    checklist: Checklist = load_checklist(shipped_checklist("airline"))
    assert isinstance(checklist.clock, datetime)
    return HardGate(checklist), CheckContext(checklist=checklist, policy_text="", now=checklist.clock)


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(trajectory=trajectories())
def test_cancelling_another_users_reservation_is_never_let_through(
    airline: tuple[HardGate, CheckContext], trajectory: Trajectory
) -> None:
    gate, context = airline
    decision = gate.check(FORBIDDEN, trajectory, context)
    assert decision.outcome == "block", decision
    assert "RecursionError" not in (decision.error or "")


@PROPERTY
@given(trajectory=trajectories(), call=st.sampled_from([OWN, *OTHER_CALLS]))
def test_no_exception_escapes_the_gate(
    airline: tuple[HardGate, CheckContext], trajectory: Trajectory, call: ToolCall
) -> None:
    gate, context = airline
    decision = gate.check(call, trajectory, context)
    assert decision.outcome in ("block", "escalate")
    assert "RecursionError" not in (decision.error or "")


def test_the_same_cancellation_of_the_users_own_reservation_passes_the_gate(
    airline: tuple[HardGate, CheckContext],
) -> None:
    """Sanity for the property above: only ownership makes the T1QOBS cancellation forbidden."""
    gate, context = airline
    read = ToolCall(id="c1", name="get_reservation_details", arguments={"reservation_id": MINE})
    lookup = ToolCall(id="u0", name="get_user_details", arguments={"user_id": MIA})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[lookup]),
            Message(role="tool", tool_call_id="u0", content=json.dumps(profile(MIA))),
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="c1", content=json.dumps(reservation(MINE))),
        ]
    )
    assert gate.check(OWN, trajectory, context).outcome == "escalate"


LISTS = f"""
policy: {{name: p, version: "{policy_version("p")}"}}
principal: {{tool: get_user_details, field: user_id}}
facts:
  sent: {{tool: send_certificate, collect: calls}}
  seen: {{tool: search_direct_flight, also: [get_reservation_details], collect: all}}
  reservation:
    tool: get_reservation_details
    match: {{reservation_id: args.reservation_id}}
    refreshed_by: [update_reservation_flights, cancel_reservation]
    invalidated_by: [book_reservation]
tools:
  get_user_details: {{mutating: false}}
  get_reservation_details: {{mutating: false}}
  search_direct_flight: {{mutating: false}}
  send_certificate:
    requirements:
      - id: one-certificate
        text: At most one certificate per conversation.
        kind: data
        source: s
        check: facts.sent.filter(c, !c.error).size() == 0 && facts.seen.size() >= 0
  cancel_reservation:
    requirements:
      - {{id: own, text: Own only., kind: data, source: s, check: facts.reservation.user_id == principal}}
"""


@pytest.fixture(scope="module")
def lists_gate() -> tuple[HardGate, CheckContext]:
    checklist = parse_checklist(LISTS)
    return HardGate(checklist), CheckContext(checklist=checklist, policy_text="", now=datetime.now(timezone.utc))


@PROPERTY
@given(trajectory=trajectories())
def test_collected_facts_never_crash_and_a_second_certificate_is_never_let_through(
    lists_gate: tuple[HardGate, CheckContext], trajectory: Trajectory
) -> None:
    gate, context = lists_gate
    call = ToolCall(id="pending", name="send_certificate", arguments={"user_id": MIA, "amount": 100})
    decision = gate.check(call, trajectory, context)
    assert decision.outcome in ("block", "escalate")
    sites = trajectory.call_sites() if trajectory.duplicate_call_id() is None else []
    mine = [n for n, s in enumerate(sites) if s.call.id == "pending"]
    cut = None  # the pending call itself, when the trajectory carries it unanswered
    if mine and sites[mine[-1]].result is None:  # only the newest call of an id can be unanswered
        if (sites[mine[-1]].call.name, sites[mine[-1]].call.arguments) != (call.name, call.arguments):
            assert decision.outcome == "block" and "'pending' is used by an earlier, different call" in str(decision)
        cut = mine[-1]
    earlier = [s for s in sites[:cut] if s.call.name == "send_certificate"]
    if any(s.result is None or not s.result.is_error for s in earlier):
        assert decision.outcome == "block", decision
    forbidden = gate.check(FORBIDDEN, trajectory, context)
    assert forbidden.outcome == "block", forbidden
