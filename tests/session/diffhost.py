"""The host of the differential test: a guarded tau2 airline conversation in session mode, then the one-shot reader.

A :class:`Plan` is a conversation (the user's id, then batches of tool calls
the assistant sends together) and the way a host delivers it (see
:class:`Variation`). :func:`run_plan` plays it against the REAL tau2 airline
environment with gate-only guards (the shipped checklist, no model): every
call is checked in session mode, an allowed call runs in the environment and
its result is reported with ``record_result``, a blocked one gets an error
result carrying the guard's message. :func:`one_shot_disagreements` then asks a
separate guard without a session about every call session mode allowed, on the
final history, and returns the calls it blocks.

The one-shot reader finds the pending call in the history as its newest
unanswered copy (``calls_before``), and refuses a call whose id is answered
already. In the final history every allowed call is answered, so the one-shot
reader gets the final history without the pending call's own result; with ids
reused per turn it also ends after the pending call's turn (a later turn
reuses its id). Neither changes what it reads: facts come from calls before
the pending one, and every result of a turn arrives before the next turn.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from policyguard import Guard, HardGate, Message, ToolCall, Trajectory
from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.decision import Decision
from policyguard.enforcement.store import SQLiteStore
from policyguard.resources import shipped_checklist
from policyguard.session import MemorySessionStore, SessionStore

Shape = Literal["one", "consecutive", "sequential"]
SHAPES: tuple[Shape, ...] = ("one", "consecutive", "sequential")
TODAY = "2024-05-15"  # the airline checklist's clock


@dataclass(frozen=True)
class Spec:
    """A tool call before it has an id."""

    tool: str
    arguments: dict[str, Any]

    def label(self) -> str:
        return f"{self.tool}({_args(self.arguments)})"


@dataclass(frozen=True)
class Variation:
    """How the host delivers one batch.

    ``shape``: the calls in ``one`` assistant message, in ``consecutive``
    assistant messages with the results after all of them, or ``sequential``
    (each call's message followed by its result; order and arrival then do not
    apply). ``order``: the positions in the order the host checks (and runs)
    them. ``arrival``: the positions in the order their results are appended.
    ``replica``: per position, which of the two guards checks it.
    """

    shape: Shape
    order: tuple[int, ...]
    arrival: tuple[int, ...]
    replica: tuple[int, ...]

    def describe(self, replicas: int) -> str:
        text: str = self.shape
        if self.shape != "sequential" and len(self.order) > 1:
            text += f" check={list(self.order)} arrive={list(self.arrival)}"
        if replicas > 1:
            text += f" replica={list(self.replica)}"
        return text


@dataclass(frozen=True)
class Plan:
    """A conversation and how its host behaves.

    ``ids``: ``unique`` (c1, c2, ...) or ``per-turn`` (call_0, call_1, ...
    restarting every batch). ``reads``: ``checked`` (every call goes through
    the guard) or ``unchecked`` (the host runs reads without asking; only the
    history shows them). ``replicas``: 1 (one guard, memory store) or 2 (two
    guards sharing one SQLite session file: two replicas of a service).
    """

    user_id: str
    batches: tuple[tuple[Spec, ...], ...]
    variations: tuple[Variation, ...]
    ids: Literal["unique", "per-turn"] = "unique"
    reads: Literal["checked", "unchecked"] = "checked"
    replicas: int = 1

    def describe(self) -> str:
        lines = [f"user={self.user_id} ids={self.ids} reads={self.reads} replicas={self.replicas}"]
        for number, (batch, variation) in enumerate(zip(self.batches, self.variations, strict=True)):
            calls = " | ".join(spec.label() for spec in batch)
            lines.append(f"  turn {number} [{variation.describe(self.replicas)}]: {calls}")
        return "\n".join(lines)


# -- the airline world: data, guards, the calls a plan draws from ---------------------


@dataclass(frozen=True)
class World:
    """The airline domain loaded once: policy, checklist, database, and per user the calls to draw from."""

    data: Any  # policyguard.bench.tau2.domain.DomainData
    checklist: Checklist

    def guard(self, sessions: SessionStore | None = None) -> Guard:
        """A gate-only guard (no model): model-judged requirements pass as unverified, as ``gate_only`` runs do."""
        return Guard(
            self.checklist,
            self.data.policy_text,
            gate=HardGate(self.checklist),
            allow_unverified=True,
            sessions=sessions,
            session_wait_s=1.0,
        )

    def is_write(self, tool: str) -> bool:
        return self.checklist.is_mutating(tool)


@cache
def world(domain: str) -> World:
    """A tau2 domain (``airline``, ``retail``) with its shipped checklist."""
    from policyguard.bench.tau2.domain import DomainData

    return World(DomainData.load(domain), load_checklist(shipped_checklist(domain)))


def airline() -> World:
    return world("airline")


@cache
def users() -> tuple[str, ...]:
    """Users with a gift card, two reservations not flown yet, and a cancelled or delayed flight: the calls
    drawn for them reach most airline rules (bags and flights paid by gift card, certificates, cancellations)."""
    raw = airline().data.raw_db
    chosen = []
    for user_id, user in sorted(raw["users"].items()):
        methods = user["payment_methods"].values()
        reservations = [raw["reservations"][r] for r in user["reservations"]]
        upcoming = [r for r in reservations if r.get("status") != "cancelled" and _upcoming(r)]
        statuses = {_status(raw, f) for r in reservations for f in r["flights"]}
        if (
            any(m["source"] == "gift_card" for m in methods)
            and len(upcoming) >= 2
            and statuses & {"cancelled", "delayed"}
            and len(reservations) <= 5
        ):
            chosen.append(user_id)
    return tuple(chosen[:12])


@cache
def call_pool(user_id: str) -> tuple[tuple[Spec, ...], tuple[Spec, ...]]:
    """``(reads, writes)`` for one user, from the real database: reads of the user's profile, reservations,
    flight statuses and flight searches; writes on the same records, some the policy allows and some not."""
    raw = airline().data.raw_db
    user = raw["users"][user_id]
    methods = user["payment_methods"]
    gift = sorted(m for m in methods if methods[m]["source"] == "gift_card")
    card = sorted(m for m in methods if methods[m]["source"] == "credit_card")
    payers = (gift[:1] + card[:1]) or sorted(methods)[:1]
    reads = [Spec("get_user_details", {"user_id": user_id})]
    writes: list[Spec] = []
    for reservation_id in _about_a_complaint_first(raw, user["reservations"])[:3]:
        r = raw["reservations"][reservation_id]
        reads.append(Spec("get_reservation_details", {"reservation_id": reservation_id}))
        for flight in r["flights"][:2]:
            if _status(raw, flight) in ("cancelled", "delayed"):
                reads.append(
                    Spec("get_flight_status", {"flight_number": flight["flight_number"], "date": flight["date"]})
                )
        writes.append(Spec("cancel_reservation", {"reservation_id": reservation_id}))
        for extra in (0, 1):
            writes.append(
                Spec(
                    "update_reservation_baggages",
                    {
                        "reservation_id": reservation_id,
                        "total_baggages": r["total_baggages"] + extra,
                        "nonfree_baggages": r["nonfree_baggages"] + extra,
                        "payment_id": payers[extra % len(payers)],
                    },
                )
            )
        same = [{"flight_number": f["flight_number"], "date": f["date"]} for f in r["flights"]]
        for cabin in (r["cabin"], "business" if r["cabin"] != "business" else "economy"):
            writes.append(
                Spec(
                    "update_reservation_flights",
                    {"reservation_id": reservation_id, "cabin": cabin, "flights": same, "payment_id": payers[0]},
                )
            )
        passengers = len(r["passengers"])
        for amount in (100 * passengers, 50 * passengers):
            writes.append(Spec("send_certificate", {"user_id": user_id, "amount": amount}))
        booking = _booking(raw, user, r, gift)
        if booking is not None:
            search, books = booking
            reads.append(search)
            writes.extend(books)
    return tuple(reads), tuple(writes)


def _booking(
    raw: dict[str, Any], user: dict[str, Any], r: dict[str, Any], gift: list[str]
) -> tuple[Spec, list[Spec]] | None:
    """A search for the reservation's first flight on its date, and one-way bookings of it paid by gift card
    (the card once, or listed twice): what a gift card's balance rules are about."""
    flight = r["flights"][0]
    on_date = raw["flights"][flight["flight_number"]]["dates"].get(flight["date"], {})
    if on_date.get("status") != "available" or not gift:
        return None
    price = int(on_date["prices"]["economy"])
    search = Spec(
        "search_direct_flight",
        {"origin": flight["origin"], "destination": flight["destination"], "date": flight["date"]},
    )
    base = {
        "user_id": user["user_id"],
        "origin": flight["origin"],
        "destination": flight["destination"],
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": flight["flight_number"], "date": flight["date"]}],
        "passengers": [
            {"first_name": user["name"]["first_name"], "last_name": user["name"]["last_name"], "dob": user["dob"]}
        ],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    once = [{"payment_id": gift[0], "amount": price}]
    half = price // 2
    twice = [{"payment_id": gift[0], "amount": half}, {"payment_id": gift[0], "amount": price - half}]
    return search, [
        Spec("book_reservation", {**base, "payment_methods": once}),
        Spec("book_reservation", {**base, "payment_methods": twice}),
    ]


def _about_a_complaint_first(raw: dict[str, Any], reservation_ids: list[str]) -> list[str]:
    """The reservations with a cancelled flight first, then with a delayed one (what a certificate is for)."""

    def rank(reservation_id: str) -> int:
        statuses = {_status(raw, f) for f in raw["reservations"][reservation_id]["flights"][:2]}
        return 0 if "cancelled" in statuses else 1 if "delayed" in statuses else 2

    return sorted(reservation_ids, key=rank)


def _status(raw: dict[str, Any], flight: dict[str, Any]) -> str | None:
    found: str | None = raw["flights"][flight["flight_number"]]["dates"].get(flight["date"], {}).get("status")
    return found


def _upcoming(reservation: dict[str, Any]) -> bool:
    return all(f["date"] > TODAY for f in reservation["flights"])


# -- the host ---------------------------------------------------------------------------


@dataclass
class Step:
    """One call as the host handled it: ``decision`` is session mode's (None: a read run without asking)."""

    call: ToolCall
    turn: int
    replica: int
    decision: Decision | None
    result: Message | None  # None: the run has no result for it (it ended first)
    turn_end: int = -1  # the final history's length when the call's turn was over


@dataclass
class Run:
    """A played plan: the final history and every call with session mode's decision."""

    plan: Plan | None  # None: a replayed real run
    history: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)


def run_plan(plan: Plan) -> Run:
    """Play ``plan`` against a fresh airline environment (see the module docstring)."""
    airline_world = airline()
    if plan.replicas == 1:
        return _Host(airline_world, plan, [MemorySessionStore()]).play()
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "sessions.db")
        stores: list[SessionStore] = [SQLiteStore(path, synchronous="NORMAL") for _ in range(plan.replicas)]
        try:
            return _Host(airline_world, plan, stores).play()
        finally:
            for store in stores:
                close = getattr(store, "close", None)
                if close is not None:
                    close()


class _Host:
    def __init__(self, world: World, plan: Plan, stores: Sequence[SessionStore]) -> None:
        self.world = world
        self.plan = plan
        self.env = world.data.fresh_env()
        self.guards = [world.guard(store) for store in stores]
        self.sessions = [guard.session("difftest") for guard in self.guards]
        self.run = Run(plan, [Message(role="user", content=f"Hi, my user id is {plan.user_id}.")])
        self.counter = 0

    def play(self) -> Run:
        for turn, (batch, variation) in enumerate(zip(self.plan.batches, self.plan.variations, strict=True)):
            self._turn(turn, batch, variation)
        return self.run

    def _turn(self, turn: int, batch: Sequence[Spec], variation: Variation) -> None:
        history = self.run.history
        calls = [
            ToolCall(id=self._id(k), name=s.tool, arguments=copy.deepcopy(s.arguments)) for k, s in enumerate(batch)
        ]
        first = len(self.run.steps)
        if variation.shape == "sequential":
            for position, call in enumerate(calls):
                history.append(Message(role="assistant", tool_calls=[call]))
                result = self._handle(call, turn, variation.replica[position]).result
                assert result is not None
                history.append(result)
        else:
            if variation.shape == "one":
                history.append(Message(role="assistant", tool_calls=calls))
            else:
                history.extend(Message(role="assistant", tool_calls=[call]) for call in calls)
            results = {
                position: self._handle(calls[position], turn, variation.replica[position]).result
                for position in variation.order
            }
            history.extend(r for r in (results[position] for position in variation.arrival) if r is not None)
        for step in self.run.steps[first:]:
            step.turn_end = len(history)

    def _id(self, position: int) -> str:
        self.counter += 1
        return f"call_{position}" if self.plan.ids == "per-turn" else f"c{self.counter}"

    def _handle(self, call: ToolCall, turn: int, replica: int) -> Step:
        replica %= len(self.guards)
        if not self.world.is_write(call.name) and self.plan.reads == "unchecked":
            step = Step(call, turn, replica, None, self._execute(call))
        else:
            guard, session = self.guards[replica], self.sessions[replica]
            decision = guard.check(call, Trajectory(messages=list(self.run.history)), session=session)
            if decision.outcome == "allow":
                result = self._execute(call)
                guard.record_result(session, call.id, result.content or "", is_error=result.is_error)
            else:
                text = f"Blocked by the guard: {decision.message}"
                result = Message(role="tool", tool_call_id=call.id, name=call.name, content=text, is_error=True)
            step = Step(call, turn, replica, decision, result)
        self.run.steps.append(step)
        return step

    def _execute(self, call: ToolCall) -> Message:
        """Run the call in the tau2 environment; the result as tau2 serializes it (a failure: ``Error: ...``)."""
        from tau2.environment.environment import Environment

        try:
            content, is_error = Environment.to_json_str(self.env.use_tool(call.name, **call.arguments)), False
        except Exception as exc:  # tau2 reports a tool's refusal as an "Error: ..." result
            content, is_error = f"Error: {exc}", True
        return Message(role="tool", tool_call_id=call.id, name=call.name, content=content, is_error=is_error)


# -- a real run replayed ---------------------------------------------------------------------


def replay(domain_world: World, messages: Sequence[Message]) -> Run:
    """A recorded dialogue fed to session mode message by message, as a host that checks every call would.

    The calls of an assistant message are checked in their order, each right
    after the one before it ran: an allowed call's recorded result is reported
    (``record_result``) at once and appended where the run had it; a blocked
    call's result is replaced by the guard's message, so the final history is
    the one this host produced.
    """
    guard = domain_world.guard(MemorySessionStore())
    session = guard.session("replay")
    run = Run(None)
    recorded: dict[str, Message] = {}  # call id -> the result the run recorded (this assistant message's)
    produced: dict[str, Message] = {}  # call id -> the result this host shows
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            recorded = _results_after(messages, index)
            produced = {}
            run.history.append(message)
            for call in message.tool_calls:
                decision = guard.check(call, Trajectory(messages=list(run.history)), session=session)
                result = recorded.get(call.id)
                if decision.outcome != "allow":
                    text = f"Blocked by the guard: {decision.message}"
                    result = Message(role="tool", tool_call_id=call.id, name=call.name, content=text, is_error=True)
                elif result is not None:
                    guard.record_result(session, call.id, result.content or "", is_error=result.is_error)
                if result is not None:
                    produced[call.id] = result
                run.steps.append(Step(call, len(run.history) - 1, 0, decision, result))
        elif message.role == "tool" and message.tool_call_id in produced:
            run.history.append(produced.pop(message.tool_call_id))
        else:
            run.history.append(message)
    for step in run.steps:
        end = step.turn + 1
        while end < len(run.history) and run.history[end].role == "tool":
            end += 1
        step.turn_end = end
    return run


def _results_after(messages: Sequence[Message], index: int) -> dict[str, Message]:
    """The tool results that follow the assistant message at ``index``, by call id (the first of each)."""
    found: dict[str, Message] = {}
    for message in messages[index + 1 :]:
        if message.role != "tool":
            break
        if message.tool_call_id is not None:
            found.setdefault(message.tool_call_id, message)
    return found


def reuses_ids(messages: Sequence[Message]) -> bool:
    ids = [call.id for message in messages for call in message.tool_calls]
    return len(set(ids)) < len(ids)


# -- the one-shot reader on the final history -----------------------------------------------


@dataclass
class Disagreement:
    """A call session mode allowed and the one-shot reader blocked on the final history."""

    step: Step
    one_shot: Decision


def one_shot_history(run: Run, step: Step, *, cut: bool) -> list[Message]:
    """The final history for the one-shot reader judging ``step``: without the call's own result, and (``cut``)
    ending with the call's turn."""
    history = run.history[: step.turn_end] if cut else run.history
    return [message for message in history if message is not step.result]


def one_shot_disagreements(run: Run, guard: Guard, *, cut: bool) -> list[Disagreement]:
    found = []
    for step in run.steps:
        if step.decision is None or step.decision.outcome != "allow":
            continue
        decision = guard.check(step.call, Trajectory(messages=one_shot_history(run, step, cut=cut)))
        if decision.outcome != "allow":
            found.append(Disagreement(step, decision))
    return found


# -- what a failure shows ---------------------------------------------------------------


def report(run: Run, found: Sequence[Disagreement], header: str) -> str:
    """The disagreements, each with both decisions, then the final history one message a line."""
    lines = [header]
    for item in found:
        step = item.step
        lines.append(
            f"PENDING {step.call.id} {step.call.name}({_args(step.call.arguments)}) turn {step.turn} "
            f"replica {step.replica}"
        )
        assert step.decision is not None
        lines.append(f"  session:  {_decision(step.decision)}")
        lines.append(f"  one-shot: {_decision(item.one_shot)}")
    lines.append("SESSION DECISIONS (in check order):")
    for step in run.steps:
        judged = "ran unchecked" if step.decision is None else _decision(step.decision, short=True)
        lines.append(f"  t{step.turn} r{step.replica} {step.call.id} {step.call.name}: {judged}")
    lines.append("FINAL HISTORY:")
    lines.extend(f"  {index:3} {_message(message)}" for index, message in enumerate(run.history))
    return "\n".join(lines)


def _decision(decision: Decision, *, short: bool = False) -> str:
    not_met = [r.id for r in decision.requirements if r.status == "NOT_MET"]
    text = f"{decision.outcome}/{decision.stage}"
    if not_met:
        text += f" NOT_MET={not_met}"
    if not short and decision.outcome != "allow" and decision.message:
        text += f" :: {_clip(decision.message, 300)}"
    return text


def _message(message: Message) -> str:
    if message.role == "assistant" and message.tool_calls:
        return "assistant: " + " | ".join(f"{c.id} {c.name}({_args(c.arguments)})" for c in message.tool_calls)
    if message.role == "tool":
        flag = " ERROR" if message.is_error else ""
        return f"tool {message.tool_call_id}{flag}: {_clip(message.content or '', 160)}"
    return f"{message.role}: {_clip(message.content or '', 160)}"


def _args(arguments: dict[str, Any]) -> str:
    return _clip(", ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in arguments.items()), 200)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
