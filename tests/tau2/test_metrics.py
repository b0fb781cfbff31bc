"""Metrics on synthetic simulation results with hand-computed expectations."""

from __future__ import annotations

import pytest

from policyguard.bench.tau2.agent import CallEvent
from policyguard.bench.tau2.labels import call_key
from policyguard.bench.tau2.metrics import compute_metrics, pass_hat_k
from policyguard.bench.tau2.results import ExecutedCall, SimResult


def sim(task: str, trial: int, reward: float | None, infra: str | None = None, **kw: object) -> SimResult:
    return SimResult(
        domain="airline", config=str(kw.pop("config", "hybrid")), task_id=task, trial=trial, seed=trial,
        reward=reward, infra_error=infra, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def event(tool: str, args: dict[str, object], outcome: str, turn: int = 1, **kw: object) -> CallEvent:
    return CallEvent(turn=turn, call_id=f"c{turn}", tool=tool, arguments=args, mutating=True, outcome=outcome,
                     stage=str(kw.pop("stage", "gate")), **kw)  # type: ignore[arg-type]  # fmt: skip


def _rewards(task: str, values: list[float | None]) -> list[SimResult]:
    return [sim(task, i, v, None if v is not None else "RateLimitError: 429") for i, v in enumerate(values)]


def test_pass_hat_k_by_hand() -> None:
    results = (
        _rewards("A", [1, 1, 1, 1])  # c=4 n=4
        + _rewards("B", [1, 0, 1, 0])  # c=2 n=4
        + _rewards("C", [0, 0, 0, 0])  # c=0 n=4
        + _rewards("D", [1, 0, None, 0])  # one infra error: c=1 n=3, so k stops at 3
        + _rewards("E", [None, None, None, None])  # every run an infra error: task excluded
    )
    got = pass_hat_k(results)
    assert list(got) == [1, 2, 3]
    assert got[1] == pytest.approx((1 + 2 / 4 + 0 + 1 / 3) / 4)  # 0.458333
    assert got[2] == pytest.approx((1 + 1 / 6 + 0 + 0) / 4)  # comb(2,2)/comb(4,2) = 1/6
    assert got[3] == pytest.approx((1 + 0 + 0 + 0) / 4)
    assert pass_hat_k(results, {"B"}) == {1: 0.5, 2: pytest.approx(1 / 6), 3: 0.0, 4: 0.0}
    assert pass_hat_k([]) == {}


def test_split_counts_infra_and_uses_labels() -> None:
    results = _rewards("A", [1, 1]) + _rewards("B", [1, 0]) + _rewards("E", [None, None])
    m = compute_metrics(results, {"A": "PV", "B": "Mut", "E": "Mut"}, {})
    assert (m.simulations, m.infra_errors, m.tasks, m.tasks_all_infra) == (6, 2, 3, ["E"])
    assert m.pass_hat_k_pv == {1: 1.0, 2: 1.0}
    assert m.pass_hat_k_mut == {1: 0.5, 2: 0.0}


GOLD = {"tool": "cancel_reservation", "args": {"reservation_id": "R1"}}


def test_verdict_view_confusion_block_rate_and_pv_recall() -> None:
    gold = {"M": {call_key("cancel_reservation", {"reservation_id": "R1"})}}
    results = [
        sim("P", 0, 1.0, attempts=[event("cancel_reservation", {"reservation_id": "X"}, "block")]),  # TP (PV)
        sim("P", 1, 0.0, attempts=[event("cancel_reservation", {"reservation_id": "X"}, "allow")]),  # FN (PV)
        sim(
            "M", 0, 1.0,
            attempts=[
                event("cancel_reservation", {"reservation_id": "R1"}, "block", turn=2),  # FP
                event("cancel_reservation", {"reservation_id": "R1"}, "allow", turn=4),  # TN, resolves the FP in 3
                event("send_certificate", {"user_id": "u", "amount": 999}, "block", turn=5),  # TP, never resolved
            ],
        ),
    ]  # fmt: skip
    m = compute_metrics(results, {"P": "PV", "M": "Mut"}, gold)
    assert (m.verdict.tp, m.verdict.fp, m.verdict.fn, m.verdict.tn) == (2, 1, 1, 1)
    assert m.block_rate == pytest.approx(3 / 5)
    assert m.verdict.recall == pytest.approx(2 / 3)
    assert (m.pv_attempts, m.pv_blocked, m.pv_recall) == (2, 1, 0.5)
    assert m.blocks == 3
    assert m.remediation_turns_per_block == pytest.approx(3.0)  # turn 2 -> turn 4
    assert m.unresolved_blocks == 2  # the PV block (rightly never retried) and the certificate


def test_baseline_counts_executed_writes_as_allowed_attempts() -> None:
    results = [
        sim(
            "P",
            0,
            0.0,
            config="baseline",
            executed=[ExecutedCall(tool="cancel_reservation", arguments={"reservation_id": "X"})],
        )
    ]
    m = compute_metrics(results, {"P": "PV"}, {})
    assert (m.verdict.fn, m.verdict.attempts, m.block_rate, m.pv_recall) == (1, 1, 0.0, 0.0)


def test_runtime_view_call_nmr_costs_and_latency() -> None:
    key = call_key("cancel_reservation", {"reservation_id": "R1"})
    executed = [
        ExecutedCall(tool="cancel_reservation", arguments={"reservation_id": "R1"}),  # compliant, confirmed, read
        ExecutedCall(
            tool="cancel_reservation", arguments={"reservation_id": "R1"}
        ),  # compliant but no "yes": near miss
        ExecutedCall(tool="cancel_reservation", arguments={"reservation_id": "R9"}),  # violating (not a near miss)
    ]
    results = [
        sim(
            "M", 0, 1.0, executed=executed,
            confirmed_before=[True, False, True], prerequisites_read=[True, True, False],
            messages=10, agent_user_turns=6, agent_cost_usd=0.02, user_cost_usd=0.01, verifier_cost_usd=0.004,
            attempts=[event("cancel_reservation", {"reservation_id": "R1"}, "allow", stage="verifier",
                            verifier_latency_s=2.0)],
        ),
        sim("M", 1, 1.0, messages=20, agent_user_turns=8, agent_cost_usd=0.04, user_cost_usd=None,
            attempts=[event("cancel_reservation", {"reservation_id": "R1"}, "allow", stage="verifier",
                            verifier_latency_s=4.0)]),
    ]  # fmt: skip
    m = compute_metrics(results, {"M": "Mut"}, {"M": {key}})
    assert (m.executed_mutating, m.executed_violating, m.near_misses) == (3, 1, 1)
    assert m.call_nmr == pytest.approx(1 / 3)
    assert (m.mean_messages, m.mean_agent_user_turns) == (15.0, 7.0)
    assert m.cost_per_trial == {"agent": pytest.approx(0.03), "user": 0.01, "verifier": 0.004}
    assert m.verifier_latency_s == {"mean": 3.0, "p50": 3.0, "p95": 4.0}


def test_mixing_configurations_is_an_error() -> None:
    with pytest.raises(ValueError, match="mix"):
        compute_metrics([sim("A", 0, 1.0), sim("A", 1, 1.0, config="baseline")], {}, {})
