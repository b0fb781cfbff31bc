"""The bench tau2 batch layer with a fake simulation: keys, checkpoints, resume, retries, report."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.agent import CallEvent  # noqa: E402
from policyguard.bench.tau2.results import ExecutedCall, SimResult  # noqa: E402
from policyguard.bench.tau2.runner import RunContext, RunSpec, check_keys, load_results, run_benchmark  # noqa: E402
from policyguard.cli import main  # noqa: E402
from policyguard.errors import ConfigError  # noqa: E402

TASKS = ["0", "1", "8"]  # task 8 is a mutation task; 0 and 1 are refusals


def spec(**kw: object) -> RunSpec:
    base: dict[str, object] = dict(
        config="gate_only", agent_model="openai/gpt-4.1", user_model="openai/gpt-4.1", trials=2, tasks=TASKS,
        concurrency=1,
    )  # fmt: skip
    base.update(kw)
    return RunSpec(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def context() -> RunContext:
    return RunContext.build(spec())


class FakeSim:
    """Succeeds on task 0, fails task 1, attempts a forbidden write on task 8; can crash or flake."""

    def __init__(self, crash_on: int | None = None, flaky: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.crash_on = crash_on
        self.flaky = set(flaky or ())
        self._lock = threading.Lock()

    def __call__(self, ctx: RunContext, task_id: str, trial: int) -> SimResult:
        key = f"{task_id}/{trial}"
        with self._lock:
            self.calls.append(key)
            if self.crash_on is not None and len(self.calls) == self.crash_on:
                raise RuntimeError("harness bug")
            if key in self.flaky:
                self.flaky.discard(key)
                return SimResult(domain="airline", config=ctx.spec.config, task_id=task_id, trial=trial, seed=trial,
                                 infra_error="APIConnectionError: reset")  # fmt: skip
        attempts = []
        if task_id == "8":
            attempts = [CallEvent(turn=3, call_id="x", tool="cancel_reservation", arguments={"reservation_id": "X"},
                                  mutating=True, outcome="block", stage="gate")]  # fmt: skip
        return SimResult(
            domain="airline", config=ctx.spec.config, task_id=task_id, trial=trial, seed=trial,
            reward=1.0 if task_id != "1" else 0.0, termination_reason="user_stop", attempts=attempts,
            executed=[ExecutedCall(tool="get_user_details", arguments={})][:0], messages=12, agent_user_turns=8,
        )  # fmt: skip


def test_missing_key_fails_first_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        check_keys(spec())
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        check_keys(spec(agent_model="anthropic/claude-sonnet-4-5"))
    with pytest.raises(ConfigError, match="needs --verifier-model"):
        check_keys(spec(config="hybrid"))


def test_missing_key_via_the_cli_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "tau2", "--config", "baseline", "--agent-model", "openai/gpt-4.1",
                 "--user-model", "openai/gpt-4.1", "--output", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "policyguard: error: missing API key(s)" in err and "OPENAI_API_KEY" in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_checkpoint_one_file_per_sim_and_summary(tmp_path: Path, context: RunContext) -> None:
    fake = FakeSim()
    summary = run_benchmark(spec(), tmp_path, simulate_fn=fake, context=context, stream=io.StringIO())
    files = sorted(p.name for p in (tmp_path / "sims").glob("*.json"))
    assert files == [f"task-{t}_trial-{n}.json" for t in TASKS for n in (0, 1)]
    assert summary["simulations"] == 6 and summary["infra_errors"] == 0
    assert summary["pass_hat_k"] == {"1": pytest.approx(2 / 3, abs=1e-4), "2": pytest.approx(2 / 3, abs=1e-4)}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert json.loads((tmp_path / "run.json").read_text())["config"] == "gate_only"


def test_a_crash_resumes_without_rerunning_finished_sims(tmp_path: Path, context: RunContext) -> None:
    first = FakeSim(crash_on=3)
    with pytest.raises(RuntimeError, match="harness bug"):
        run_benchmark(spec(), tmp_path, simulate_fn=first, context=context, stream=io.StringIO())
    done = {(r.task_id, r.trial) for r in load_results(tmp_path)}
    assert {("0", 0), ("0", 1)} <= done and ("1", 0) not in done  # the crashed sim left no file
    assert len(done) < 6  # the queue was cancelled (one more sim may already have started)

    with pytest.raises(ConfigError, match="--resume"):
        run_benchmark(spec(), tmp_path, simulate_fn=FakeSim(), context=context, stream=io.StringIO())
    with pytest.raises(ConfigError, match="different settings"):
        run_benchmark(spec(trials=3), tmp_path, resume=True, simulate_fn=FakeSim(), context=context)

    second = FakeSim()
    summary = run_benchmark(spec(), tmp_path, resume=True, simulate_fn=second, context=context, stream=io.StringIO())
    rerun = {tuple(c.split("/")) for c in second.calls}
    assert not rerun & {(t, str(n)) for t, n in done}
    assert len(second.calls) == 6 - len(done)
    assert summary["simulations"] == 6


def test_infra_errors_are_retried_with_the_same_trial_then_kept_and_counted(
    tmp_path: Path, context: RunContext
) -> None:
    fake = FakeSim(flaky={"0/0"})
    run_benchmark(spec(), tmp_path, simulate_fn=fake, context=context, stream=io.StringIO())
    assert fake.calls.count("0/0") == 2
    always = FakeSim()
    always.flaky = {"1/1"}

    def never_recovers(ctx: RunContext, task_id: str, trial: int) -> SimResult:
        always.flaky.add("1/1")
        return always(ctx, task_id, trial)

    summary = run_benchmark(spec(retries=1), tmp_path / "b", simulate_fn=never_recovers, context=context,
                            stream=io.StringIO())  # fmt: skip
    assert summary["infra_errors"] == 1
    assert summary["pass_hat_k"]["1"] == pytest.approx((1 + 0 + 1) / 3, abs=1e-4)  # task 1 keeps its trial 0 only


def test_progress_bar_goes_to_the_given_stream(tmp_path: Path, context: RunContext) -> None:
    stream = io.StringIO()
    run_benchmark(spec(), tmp_path, simulate_fn=FakeSim(), context=context, stream=stream)
    assert "6/6 sims, 0 infra errors" in stream.getvalue()


def test_report_writes_markdown_metrics_and_plots(tmp_path: Path, context: RunContext) -> None:
    run_benchmark(spec(), tmp_path / "gate", simulate_fn=FakeSim(), context=context, stream=io.StringIO())
    run_benchmark(spec(config="baseline"), tmp_path / "base", simulate_fn=FakeSim(), context=context,
                  stream=io.StringIO())  # fmt: skip
    code = main(["bench", "report", str(tmp_path / "gate"), str(tmp_path / "base"), "--output", str(tmp_path / "rep")])
    assert code == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| gate_only |" in md and "| baseline |" in md and "pass^2" in md
    for png in ("passk.png", "confusion.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    gate = metrics[f"gate_only@{tmp_path / 'gate'}"]
    assert gate["verdict"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 0}  # task 8's cancel of X is not a gold write
    assert gate["pass_hat_k_pv"] == {"1": 0.5, "2": 0.5}  # task 0 passes, task 1 fails


@pytest.mark.slow
def test_simulate_runs_tau2_for_real_with_litellm_mock_responses(context: RunContext) -> None:
    from policyguard.bench.tau2.runner import simulate

    mocked = spec(
        tasks=["10"],
        agent_llm_args={"mock_response": "How can I help?"},
        user_llm_args={"mock_response": "###STOP###"},
    )
    ctx = RunContext(spec=mocked, data=context.data, checklist=context.checklist, verifier_model=None)
    result = simulate(ctx, "10", 0)
    assert result.infra_error is None
    assert (result.termination_reason, result.reward) == ("user_stop", 1.0)  # task 10 expects no write
    assert result.executed == [] and result.attempts == []
    assert result.agent_user_turns == 2 and result.seed == mocked.seed


def test_simulate_turns_a_provider_failure_into_an_infra_error(context: RunContext) -> None:
    from policyguard.bench.tau2.runner import simulate

    failing = spec(tasks=["10"], user_llm_args={"mock_response": Exception("provider down"), "num_retries": 0})
    ctx = RunContext(spec=failing, data=context.data, checklist=context.checklist, verifier_model=None)
    result = simulate(ctx, "10", 1)
    assert result.reward is None and result.infra_error is not None and "provider down" in result.infra_error


def test_without_a_checklist_the_baseline_falls_back_to_tau2_tool_types() -> None:
    from policyguard.bench.tau2.domain import DomainData
    from policyguard.bench.tau2.runner import tool_type_checklist

    checklist = tool_type_checklist(DomainData.load("retail"))
    assert checklist.is_mutating("cancel_pending_order")
    assert not checklist.is_mutating("get_order_details")
    assert checklist.requirements_for("cancel_pending_order") == []
