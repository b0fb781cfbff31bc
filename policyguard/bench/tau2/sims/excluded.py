"""Tasks whose gold contradicts the written policy: their writes are left out of the settled rate.

On such a task a guard that follows the policy text must block a gold write, so
counting the task's writes would charge the guard for tau2's gold, not for its
own mistakes. Each entry names the policy sentence (verbatim from tau2's
``domains/<domain>/policy.md``; a test checks it is there) and what the gold does
against it. The report lists every excluded task that occurs in the replayed runs.

The airline entries are the tasks of :data:`policyguard.bench.tau2.domains.airline.labels.POLICY_CONTRADICTING_GOLD`
(tau2-bench issues [156](https://github.com/sierra-research/tau2-bench/issues/156),
[224](https://github.com/sierra-research/tau2-bench/issues/224) and the delay-certificate rule) and of
``domains.airline.labels.GOLD_DISAGREEMENTS`` (29, 33, found by the offline replay); the retail
entries are those of ``domains.retail.violations.POLICY_CONTRADICTING_GOLD``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Exclusion(BaseModel):
    """Why one task's writes are out of the settled rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sentence: str
    why: str


_DELAY = (
    "If the user complains about delayed flights in a reservation and wants to change or cancel the reservation, "
    "the agent can offer a certificate as a gesture after confirming the facts and changing or cancelling the "
    "reservation, with the amount being $50 times the number of passengers."
)
_FLOWN = "If any portion of the flight has already been flown, the agent cannot help and transfer is needed."
_FLOWN_WHY = "gold cancels NQNU5R, whose segments have already flown (landed 2024-05-13/14)"
_REFUND_TO = "The refund must either go to the original payment method, or an existing gift card."
_PAYPAL = "gold refunds the return of #W5490111 to paypal_9497703; the order was paid with credit_card_3124723"

AIRLINE: dict[str, Exclusion] = {
    "2": Exclusion(
        sentence=_DELAY,
        why="gold sends noah_muller_9847 a $50 delay certificate (4OG6T3) with no change or cancellation",
    ),
    "7": Exclusion(
        sentence="Otherwise, flight can be cancelled if any of the following is true:",
        why="gold changes basic-economy XEHM4B to economy, then cancels it: not business, no insurance, booked "
        "more than 24 h ago, no airline cancellation - none of the listed conditions holds",
    ),
    "9": Exclusion(sentence=_FLOWN, why=_FLOWN_WHY),
    "27": Exclusion(
        sentence=_DELAY,
        why="gold sends ethan_martin_2396 a $150 delay certificate (HAT039 delayed, 3 passengers) with no change "
        "or cancellation",
    ),
    "29": Exclusion(
        sentence="Other reservations can be modified without changing the origin, destination, and trip type.",
        why="gold changes round trip VA5SGQ from DTW-LGA to DTW-JFK (HAT169, HAT033): the destination changes",
    ),
    "33": Exclusion(
        sentence="3 free checked bag for each economy passenger",
        why="gold adds 2 bags to HXDUBJ as 2 non-free bags, but yara_garcia_1905 is a gold member in economy "
        "with 1 passenger: 3 bags are free, so none should be paid",
    ),
    "37": Exclusion(sentence=_FLOWN, why=_FLOWN_WHY),
    "38": Exclusion(
        sentence=_DELAY,
        why="gold sends noah_muller_9847 a $50 delay certificate (4OG6T3) with no change or cancellation",
    ),
}

RETAIL: dict[str, Exclusion] = {
    "12": Exclusion(sentence=_REFUND_TO, why=_PAYPAL + " (tau2's tool rejects it too)"),
    "13": Exclusion(
        sentence=_REFUND_TO,
        why=_PAYPAL + " (tau2's tool rejects it too); its second return, to the card, complies",
    ),
    "64": Exclusion(
        sentence="An order can only be exchanged if its status is 'delivered'",
        why="gold first exchanges an item of #W7464385, which is pending (tau2's tool rejects it too); its item "
        "modification complies",
    ),
    "105": Exclusion(
        sentence="If the user provides a gift card, it must have enough balance to cover the price difference.",
        why="gold pays the exchange of two tea kettles of #W4316152 (difference 21.10) with gift_card_7245904, "
        "balance 17.00 (tau2's tool rejects it too)",
    ),
}

EXCLUDED_TASKS: dict[str, dict[str, Exclusion]] = {"airline": AIRLINE, "retail": RETAIL}


def excluded_tasks(domain: str) -> dict[str, Exclusion]:
    """Task id -> why its writes are out of the settled rate, for ``domain`` (empty for another domain)."""
    return EXCLUDED_TASKS.get(domain, {})
