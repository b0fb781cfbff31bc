"""The settled rate of ``bench sims``: which compliant writes count, and which are set apart.

Raw counts every write labelled gold or extra. Settled leaves out, and reports apart,
(1) a write that ran before: gold is matched one to one, so the second execution of a
gold write is not gold; (2) a write the environment itself refused (an error result in
the recording); (3) every write of a task whose gold contradicts the written policy,
listed with the policy sentence. Synthetic runs on the shop checklist of
``test_sims.py``; the four shared real runs pin the figures quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.domain import DomainData  # noqa: E402
from policyguard.bench.tau2.guarding import build_guard  # noqa: E402
from policyguard.bench.tau2.sims import SimsReplay, SimsReport, render  # noqa: E402
from policyguard.bench.tau2.sims.excluded import EXCLUDED_TASKS, Exclusion  # noqa: E402
from policyguard.checklist.schema import Checklist, parse_checklist  # noqa: E402
from policyguard.cli import main  # noqa: E402
from policyguard.trajectory.canonical import policy_version  # noqa: E402
from tests.tau2.test_sims import HERE, SHOP_POLICY, Sim, _order, _results_json, _task, _user  # noqa: E402

REFUND_50 = {"order_id": "O1", "amount": 50}
TASKS = [
    _task("1", {"name": "refund", "arguments": REFUND_50}),
    _task("3", {"name": "refund", "arguments": {"order_id": "O2", "amount": 30}, "compare_args": ["order_id"]}),
    _task("4", {"name": "refund", "arguments": REFUND_50}, {"name": "refund", "arguments": REFUND_50}),
    _task("6", {"name": "refund", "arguments": {"order_id": "O6", "amount": 60}}),
]
EXCLUDED = {"6": Exclusion(sentence="Refund only orders of the authenticated user.", why="gold refunds a stranger")}


@pytest.fixture(scope="module")
def shop() -> Checklist:
    text = (HERE / "shop_checklist.yaml").read_text(encoding="utf-8").format(version=policy_version(SHOP_POLICY))
    return parse_checklist(text)


def _replay(shop: Checklist, tmp_path: Path, *sims: Sim) -> SimsReport:
    from tau2.data_model.tasks import Task

    path = tmp_path / "run.json"
    path.write_text(json.dumps(_results_json(list(sims), TASKS)), encoding="utf-8")
    guard = build_guard("gate_only", shop, SHOP_POLICY)
    assert guard is not None
    tasks = [Task.model_validate(t) for t in TASKS]
    return SimsReplay("airline", shop, guard, config="gate_only", tasks=tasks, excluded=EXCLUDED).run([path])


def _ready(sim_id: str, task: str, order: str = "O1") -> Sim:
    """A rewarded simulation in which the user u1 and the order were read: a refund of it passes the gate."""
    return Sim(sim_id, task, 1.0).user("refund please").calls(_user("u1")).calls(_order(order, "u1"))


def _refused(sim: Sim) -> Sim:
    """Mark the simulation's last tool result as an error, as tau2 records a call its tool refused."""
    sim.messages[-1]["error"] = True
    return sim


def _counted(report: SimsReport) -> list[tuple[str, str, str]]:
    return [(c.simulation, c.label, c.counted_as) for c in report.calls]


def test_a_gold_write_executed_twice_is_counted_once(shop: Checklist, tmp_path: Path) -> None:
    report = _replay(shop, tmp_path, _ready("A", "1").call("refund", REFUND_50).call("refund", REFUND_50))
    assert _counted(report) == [("A", "gold", "compliant"), ("A", "gold", "repeat")]
    rates = report.rates()
    assert (rates["raw"]["writes"], rates["settled"]["writes"], rates["set_apart"]["repeat"]["writes"]) == (2, 1, 1)


def test_gold_is_matched_one_to_one_even_when_the_second_write_differs_outside_compare_args(
    shop: Checklist, tmp_path: Path
) -> None:
    """Task 3 compares order_id only: refund(O2, 30) and refund(O2, 40) both match its one gold action."""
    sim = _ready("C", "3", "O2").call("refund", {"order_id": "O2", "amount": 30})
    sim.call("refund", {"order_id": "O2", "amount": 40})
    assert _counted(_replay(shop, tmp_path, sim)) == [("C", "gold", "compliant"), ("C", "gold", "repeat")]


def test_a_task_whose_gold_lists_the_write_twice_counts_both(shop: Checklist, tmp_path: Path) -> None:
    report = _replay(shop, tmp_path, _ready("D", "4").call("refund", REFUND_50).call("refund", REFUND_50))
    assert _counted(report) == [("D", "gold", "compliant"), ("D", "gold", "compliant")]


def test_a_write_the_environment_refused_is_reported_apart_and_does_not_use_up_the_gold(
    shop: Checklist, tmp_path: Path
) -> None:
    sim = _refused(_ready("R", "1").call("refund", REFUND_50)).call("refund", REFUND_50)
    report = _replay(shop, tmp_path, sim)
    assert _counted(report) == [("R", "gold", "env_refused"), ("R", "gold", "compliant")]
    assert [c.recorded_error for c in report.calls] == [True, False]
    rates = report.rates()
    assert rates["set_apart"]["env_refused"]["writes"] == 1 and rates["settled"]["writes"] == 1


def test_an_excluded_task_is_listed_with_its_sentence_and_left_out_of_the_settled_rate(
    shop: Checklist, tmp_path: Path
) -> None:
    """Task 6's gold refund is blocked by the gate (order never read): raw pays for it, settled does not."""
    excluded = Sim("X", "6", 1.0).user("refund O6").calls(_user("u1")).call("refund", {"order_id": "O6", "amount": 60})
    report = _replay(shop, tmp_path, excluded, _ready("A", "1").call("refund", REFUND_50))
    assert _counted(report) == [("X", "gold", "excluded_task"), ("A", "gold", "compliant")]
    rates = report.rates()
    assert (rates["raw"]["writes"], rates["raw"]["blocked"]) == (2, 1)
    assert (rates["settled"]["writes"], rates["settled"]["blocked"], rates["settled"]["blocked_share"]) == (1, 0, 0.0)
    assert rates["set_apart"]["excluded_task"]["blocked"] == 1
    (row,) = rates["excluded_tasks"]
    assert row == {**EXCLUDED["6"].model_dump(), "task": "6", "simulations": 1, **_figures(1, 1, read_first=1)}
    text = render(report)
    assert "raw:     1 of 2 blocked (50.0%): 0 hard, 1 read first" in text
    assert "settled: 0 of 1 blocked (0.0%): 0 hard, 0 read first" in text
    assert 'task 6: 1 simulation(s), 1 write(s), 1 blocked\n      policy: "Refund only orders' in text


def _figures(writes: int, blocked: int, *, hard: int = 0, read_first: int = 0) -> dict[str, Any]:
    share = round(blocked / writes, 4) if writes else None
    return {
        "writes": writes,
        "blocked": blocked,
        "blocked_hard": hard,
        "blocked_read_first": read_first,
        "blocked_share": share,
    }


class CheckedSim(Sim):
    """A simulation whose reward lists the gold actions of ``task`` it was checked against, as tau2 records it."""

    def __init__(self, sim_id: str, recorded_task: str, task: dict[str, Any]) -> None:
        super().__init__(sim_id, recorded_task, 1.0)
        actions = task["evaluation_criteria"]["actions"]
        self.checks = [{"action": a, "action_match": True, "action_reward": 1.0} for a in actions]

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), "reward_info": {"reward": self.reward, "action_checks": self.checks}}


def test_the_task_a_simulation_played_is_the_one_tau2_checked_it_against(shop: Checklist, tmp_path: Path) -> None:
    """Recorded as task 1 but evaluated against task 6 (excluded): gold and exclusion follow task 6.

    Once one simulation of a file shows its ids are not its tasks, a simulation without checks has an
    unknown task: no gold, never excluded.
    """
    played = CheckedSim("P", "1", TASKS[3]).user("x").calls(_user("u1")).calls(_order("O6", "u1"))
    played.call("refund", {"order_id": "O6", "amount": 60})
    unknown = _ready("U", "1").call("refund", REFUND_50)
    report = _replay(shop, tmp_path, played, unknown)
    rows = [(c.simulation, c.task, c.recorded_task, c.label, c.counted_as) for c in report.calls]
    assert rows == [("P", "6", "1", "gold", "excluded_task"), ("U", "unknown", "1", "extra", "compliant")]
    assert report.retasked == 2 and report.rates()["retasked_simulations"] == 2


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_excluded_sentence_is_in_the_installed_policy_and_every_task_has_gold_writes(domain: str) -> None:
    data = DomainData.load(domain)
    policy = re.sub(r"\s+", " ", data.policy_text)
    tasks = {str(t.id): t for t in data.tasks}
    for task_id, exclusion in EXCLUDED_TASKS[domain].items():
        assert re.sub(r"\s+", " ", exclusion.sentence) in policy, (domain, task_id)
        actions = tasks[task_id].evaluation_criteria.actions or []
        assert any(a.requestor == "assistant" and a.name in data.write_tools for a in actions), (domain, task_id)
    if domain == "airline":
        assert {"29", "33"} <= set(EXCLUDED_TASKS[domain])  # the two found by the offline replay


# -- the four shared real runs: the figures docs/benchmarks.md quotes -------------------

_ROOT = Path(__file__).resolve().parents[2]
RUNS = next(
    (p for p in (b / "shared" / "data" / "tau2-runs" for b in _ROOT.parents[:2]) if p.is_dir()),
    _ROOT.parent / "shared" / "data" / "tau2-runs",
)
# file -> (raw writes, raw blocked, settled writes, settled blocked, excluded_task, env_refused, repeat writes),
# with the guard fetching the reads it needs through the recorded environment (the default), and without
MEASURED = {
    "claude-sonnet-4-5_airline_1trial.json": (35, 1, 32, 0, 2, 1, 0),
    "gpt-4.1-mini_toolorchestra_airline.json": (36, 4, 32, 1, 2, 2, 0),
    "gpt-4.1-mini_toolorchestra_retail_even.json": (73, 2, 71, 0, 0, 2, 0),
    "gpt-oss-120b_langchain_airline.json": (13, 1, 10, 0, 0, 0, 3),
}
MEASURED_NO_FETCH = {**MEASURED, "gpt-4.1-mini_toolorchestra_airline.json": (36, 5, 32, 2, 2, 2, 0)}


@pytest.mark.skipif(not RUNS.is_dir(), reason=f"the shared real runs are not at {RUNS}")
@pytest.mark.parametrize("fetch", [True, False], ids=["fetch", "no-fetch"])
@pytest.mark.parametrize("name", sorted(MEASURED))
def test_the_shared_runs_raw_and_settled(name: str, fetch: bool, capsys: pytest.CaptureFixture[str]) -> None:
    domain = "retail" if "retail" in name else "airline"
    flags = [] if fetch else ["--no-fetch"]
    assert main(["bench", "sims", str(RUNS / name), "--domain", domain, "--json", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    apart = out["set_apart"]
    got = (
        out["raw"]["writes"],
        out["raw"]["blocked"],
        out["settled"]["writes"],
        out["settled"]["blocked"],
        apart["excluded_task"]["writes"],
        apart["env_refused"]["writes"],
        apart["repeat"]["writes"],
    )
    assert got == (MEASURED if fetch else MEASURED_NO_FETCH)[name]
    assert out["settled"]["blocked_hard"] == 0
    # the keys the before-stop hook reads are still on every call, with their meaning
    assert all(
        {"label", "simulation", "tool", "arguments", "recorded_error", "outcome", "block_kind"} <= set(c)
        for c in out["calls"]
    )
