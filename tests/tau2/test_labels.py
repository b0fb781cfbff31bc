"""The PV/Mut data files equal the stated rule applied to tau2's own tasks."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.domain import DomainData  # noqa: E402
from policyguard.bench.tau2.domains.airline.labels import POLICY_CONTRADICTING_GOLD  # noqa: E402
from policyguard.bench.tau2.labels import (  # noqa: E402
    CALL_TRUTH_RULE,
    LABEL_RULE,
    build_labels_file,
    call_key,
    default_labels_path,
    gold_write_keys,
    load_labels,
)


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_labels_file_equals_the_rule(domain: str) -> None:
    data = DomainData.load(domain)
    stored = load_labels(default_labels_path(domain))
    assert stored == build_labels_file(domain, data.tasks, data.write_tools)
    assert stored.rule == LABEL_RULE and stored.call_ground_truth == CALL_TRUTH_RULE


def test_airline_has_30_mutation_and_20_refusal_tasks() -> None:
    labels = load_labels(default_labels_path("airline"))
    assert Counter(labels.labels.values()) == {"Mut": 30, "PV": 20}
    assert labels.policy_contradicting_gold == POLICY_CONTRADICTING_GOLD
    assert all(labels.labels[t] == "Mut" for t in POLICY_CONTRADICTING_GOLD)


def test_call_ground_truth_ignores_key_order_but_not_values() -> None:
    data = DomainData.load("airline")
    gold = gold_write_keys(data.task("40"), data.write_tools)
    assert len(gold) == 1
    passengers = [
        {"dob": "1992-11-12", "last_name": "Garcia", "first_name": "Anya"},
        {"first_name": "Mei", "last_name": "Garcia", "dob": "1989-12-13"},
    ]
    assert call_key("update_reservation_passengers", {"passengers": passengers, "reservation_id": "3RK2T9"}) in gold
    passengers[1]["last_name"] = "Lee"
    assert call_key("update_reservation_passengers", {"passengers": passengers, "reservation_id": "3RK2T9"}) not in gold
