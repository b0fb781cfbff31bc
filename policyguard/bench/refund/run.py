"""Run the refund eval: every sample x repetition against one target, then score and gate.

Output directory: ``trials/<trial>.json`` (identity, input, output, scores),
``summary.json`` (metrics, gate, one row per trial), ``trace.jsonl`` (guard
decisions and INV-1 events; ``policyguard audit`` reads it) and
``ledger.sqlite`` (the payment sandbox's ledger, the final state); with target
``approval`` also ``approvals.sqlite`` (the approval queue: requests, the
supervisor's decisions, grants as sha256 only).
Approval tokens never reach these files: approvals appear by id and digest.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from policyguard.audit.trace import Trace
from policyguard.enforcement.store import LedgerUnavailable
from policyguard.errors import ConfigError

from .sandbox import PaymentSandbox, SandboxLedger
from .scoring import (
    GateResult,
    Metrics,
    Scores,
    compute_metrics,
    evaluate_gate,
    score_decision,
    score_ledger,
    score_tool_arguments,
)
from .spec import LoadedEval, Sample, TargetId
from .targets import AgentRun, ApprovalTarget, BuggyTarget, FixedTarget, Target, run_agent

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalRequest, SQLApprovalQueue

if TYPE_CHECKING:
    from policyguard.enforcement.store import Store

LedgerMode = Literal["available", "unavailable"]
APPROVALS_FILE = "approvals.sqlite"
EXIT_CODES = {"passed": 0, "failed": 1, "inconclusive": 3}
MEMORY_STORE = "sqlite:///:memory:"


class TrialIdentity(BaseModel):
    """What a trial is: policy version, transaction fixture, target, repetition."""

    model_config = ConfigDict(extra="forbid")

    trial_id: str
    eval: str
    policy_version: str
    sample_id: str
    transaction_id: str
    target: TargetId
    repetition: int


class TrialRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    identity: TrialIdentity
    input: dict[str, Any]
    expected: dict[str, Any]
    output: AgentRun
    scores: Scores


class RunSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    eval: str
    policy_version: str
    target: TargetId
    ledger: LedgerMode
    metrics: Metrics
    gate: GateResult
    trials: list[dict[str, Any]]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.gate.status]


def _trial_id(loaded: LoadedEval, sample: Sample, target: str, repetition: int) -> str:
    short = loaded.spec.policy_version.removeprefix("sha256:")[:12]
    return f"{short}.{sample.id}.{target}.r{repetition}"


def _make_target(
    target: TargetId,
    loaded: LoadedEval,
    sandbox: PaymentSandbox,
    trace: Trace,
    keypair: tuple[bytes, bytes] | None,
    store: Store | None = None,
    *,
    queue: SQLApprovalQueue | None = None,
    sample: Sample | None = None,
    trial_id: str = "",
) -> Target:
    if target == "buggy":
        return BuggyTarget(sandbox, trace)
    if target == "fixed":
        return FixedTarget(loaded, sandbox, trace, keypair=keypair, store=store)
    if target == "approval" and queue is not None and sample is not None:
        # the trial id is the principal, so one trial's approval never applies in another
        return ApprovalTarget(
            loaded, sandbox, trace, queue=queue, principal=trial_id, review=sample.review, keypair=keypair
        )
    raise ConfigError(f"unknown target {target!r}; the eval defines {sorted(loaded.spec.targets)}")


def _check_store_url(url: str) -> None:
    """Every trial needs an empty guard store: a private memory database, or a scratch schema on PostgreSQL."""
    if url != MEMORY_STORE and not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"--store: the refund eval needs an empty store per trial; use {MEMORY_STORE} (the default) "
            "or postgresql://... (each trial gets its own schema, dropped afterwards)"
        )
    if url != MEMORY_STORE:
        with _trial_store(url):  # fail before the first trial when the server cannot be reached
            pass


@contextmanager
def _trial_store(url: str) -> Iterator[Store | None]:
    """The fixed target's guard store for one trial (None: the target's private memory store)."""
    if url == MEMORY_STORE:
        yield None
        return
    from policyguard.enforcement.pgstore import PostgresStore, drop_schema

    schema = f"policyguard_refund_{uuid.uuid4().hex[:16]}"
    store = PostgresStore(url, schema=schema, max_size=2)  # creates the schema in its first transaction
    try:
        yield store
    finally:
        store.close()
        drop_schema(url, schema)


def run_eval(
    loaded: LoadedEval,
    target: TargetId,
    output: str | Path,
    *,
    ledger: LedgerMode = "available",
    repetitions: int | None = None,
    store: str = MEMORY_STORE,
) -> RunSummary:
    """Run, score and gate one target; writes the output directory (replacing an earlier run's files).

    ``store`` is the URL of the fixed target's guard store (nonces, denials,
    effect ledger): a private memory database per trial, or PostgreSQL with a
    scratch schema per trial.
    """
    if target not in loaded.spec.targets:
        raise ConfigError(f"target {target!r} is not in {loaded.path}")
    if target == "fixed":
        _check_store_url(store)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "trace.jsonl", "ledger.sqlite", APPROVALS_FILE):
        for suffix in ("", "-wal", "-shm"):
            (out / (name + suffix)).unlink(missing_ok=True)
    shutil.rmtree(out / "trials", ignore_errors=True)
    (out / "trials").mkdir()
    sandbox_ledger = SandboxLedger(out / "ledger.sqlite")
    # With --ledger unavailable the verifier's connection to the ledger fails (the file it is
    # pointed at cannot be opened), which is what an unreachable ledger looks like to it.
    verifier_path = out / "ledger.sqlite" if ledger == "available" else out / "unreachable" / "ledger.sqlite"
    keypair = None
    if target in ("fixed", "approval"):
        from policyguard.enforcement.grants import generate_keypair

        keypair = generate_keypair()
    queue: SQLApprovalQueue | None = None
    if target == "approval":
        from policyguard.approvals.url import open_approvals

        queue = open_approvals(f"sqlite:///{out / APPROVALS_FILE}")
    threshold = _threshold(loaded)
    reps = repetitions or loaded.spec.repetitions
    samples: list[Sample] = []
    scores: list[Scores] = []
    rows: list[dict[str, Any]] = []
    errors = 0
    with Trace(out / "trace.jsonl", keep=True) as trace, _closing(queue):
        for repetition in range(1, reps + 1):
            for sample in loaded.dataset.samples:
                trial_id = _trial_id(loaded, sample, target, repetition)
                sandbox = PaymentSandbox(loaded.dataset, sandbox_ledger, trial_id, fault=sample.fault)
                try:
                    with _trial_store(store if target == "fixed" else MEMORY_STORE) as guard_store:
                        agent = _make_target(
                            target, loaded, sandbox, trace, keypair, guard_store,
                            queue=queue, sample=sample, trial_id=trial_id,
                        )  # fmt: skip
                        run = run_agent(sample, agent, call_prefix=trial_id)
                except Exception as exc:  # a harness failure is counted, never scored as a pass
                    run = AgentRun(decision=None, reply="", reads=[], attempts=[], error=f"{type(exc).__name__}: {exc}")
                mismatch = _trace_against_ledger(trace, trial_id, sandbox)
                if mismatch is not None and run.error is None:
                    run = run.model_copy(update={"error": mismatch})
                if run.error is not None:
                    errors += 1
                spent = _spent(queue, trial_id)
                try:
                    approved = {r.used_call_id or "": r for r in spent()}
                except LedgerUnavailable:  # no approval can be shown: every large request is judged without one
                    approved = {}
                problems = score_tool_arguments(sample, run, sandbox, threshold, target=target, approved=approved)
                trial_scores = Scores(
                    decision_correct=score_decision(sample, run, target),
                    tool_arguments_ok=None if problems is None else not problems,
                    tool_argument_problems=problems or [],
                    ledger=score_ledger(sample, verifier_path, trial_id, target=target, approvals=spent),
                )
                identity = TrialIdentity(
                    trial_id=trial_id,
                    eval=loaded.spec.name,
                    policy_version=loaded.spec.policy_version,
                    sample_id=sample.id,
                    transaction_id=sample.transaction_id,
                    target=target,
                    repetition=repetition,
                )
                record = TrialRecord(
                    identity=identity,
                    input=sample.model_dump(exclude={"expected"}),
                    expected=sample.expected_for(target).model_dump(),
                    output=run,
                    scores=trial_scores,
                )
                (out / "trials" / f"{trial_id}.json").write_text(record.model_dump_json(indent=2), encoding="utf-8")
                samples.append(sample)
                scores.append(trial_scores)
                rows.append(_row(identity, sample, run, trial_scores))
    metrics = compute_metrics(samples, scores, errors, target)
    summary = RunSummary(
        eval=loaded.spec.name,
        policy_version=loaded.spec.policy_version,
        target=target,
        ledger=ledger,
        metrics=metrics,
        gate=evaluate_gate(loaded.spec.release_gate, metrics),
        trials=rows,
    )
    (out / "summary.json").write_text(summary.model_dump_json(indent=2), encoding="utf-8")
    return summary


@contextmanager
def _closing(queue: SQLApprovalQueue | None) -> Iterator[None]:
    try:
        yield
    finally:
        if queue is not None:
            queue.close()


def _spent(queue: SQLApprovalQueue | None, trial_id: str) -> Callable[[], list[ApprovalRequest]]:
    """Reads the supervisor approvals spent in this trial (none without a queue)."""

    def read() -> list[ApprovalRequest]:
        if queue is None:
            return []
        return queue.all(status="used", principal=trial_id)

    return read


def _trace_against_ledger(trace: Trace, trial_id: str, sandbox: PaymentSandbox) -> str | None:
    """The trace must record what the ledger did: one ``effect`` event per refund row of the trial."""
    prefix = f"{trial_id}."
    effects = sum(
        1 for e in trace.events if e.get("event") == "effect" and str(e.get("call_id", "")).startswith(prefix)
    )
    if effects == len(sandbox.rows):
        return None
    return f"the trace records {effects} effect(s) but the payment ledger has {len(sandbox.rows)} refund row(s)"


def _threshold(loaded: LoadedEval) -> float:
    spec = loaded.checklist.tool_spec("issue_refund")
    effect = spec.effect if spec is not None else None
    if effect is None or effect.approval_threshold is None:
        raise ConfigError(f"{loaded.spec.checklist}: issue_refund needs effect.approval_threshold")
    return effect.approval_threshold


def _row(identity: TrialIdentity, sample: Sample, run: AgentRun, scores: Scores) -> dict[str, Any]:
    ledger = scores.ledger
    return {
        "trial_id": identity.trial_id,
        "sample": sample.id,
        "fault": sample.fault,
        "expected": sample.expected_for(identity.target).decision,
        "decision": run.decision,
        "decision_ok": scores.decision_correct,
        "tool_requests": sum(1 for a in run.attempts if a.reached_tool),
        "tool_args_ok": scores.tool_arguments_ok,
        "ledger": ledger.status,
        "ledger_refunds": ledger.refunds,
        "unauthorized": ledger.unauthorized,
        "duplicates": ledger.duplicates,
        "error": run.error,
    }


def load_summary(output: str | Path) -> RunSummary:
    path = Path(output) / "summary.json"
    try:
        return RunSummary.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the run summary: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: not a refund run summary: {exc}") from exc


def format_summary(summary: RunSummary) -> str:
    """The run's table: one row per trial, then metrics and the gate."""

    def show(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return str(value)

    header = (
        f"{'sample':38s} {'expected':9s} {'decision':9s} {'ok':4s} {'tool':4s} {'args':4s} "
        f"{'ledger':12s} {'unauth':6s} {'dup':3s}"
    )
    lines = [
        f"eval {summary.eval}  target {summary.target}  policy {summary.policy_version[:19]}..."
        f"  ledger {summary.ledger}",
        "",
        header,
        "-" * len(header),
    ]
    for row in summary.trials:
        name = row["sample"] + (f" [{row['fault']}]" if row.get("fault") else "")
        lines.append(
            f"{name[:38]:38s} {row['expected']:9s} {show(row['decision']):9s} {show(row['decision_ok']):4s} "
            f"{row['tool_requests']:<4d} {show(row['tool_args_ok']):4s} "
            f"{row['ledger'] + ':' + show(row['ledger_refunds']):12s} {show(row['unauthorized']):6s} "
            f"{show(row['duplicates']):3s}"
        )
    m = summary.metrics
    legit = None if m.legitimate_refund_success is None else round(m.legitimate_refund_success, 2)
    lines += [
        "",
        f"decision accuracy          {m.decision_accuracy:.2f}",
        f"unauthorized refunds       {show(m.unauthorized_refunds)}",
        f"legitimate refund success  {show(legit)}",
        f"duplicate side effects     {show(m.duplicate_side_effects)}",
        f"tool argument accuracy     {m.tool_argument_accuracy:.2f}",
        f"harness errors             {m.harness_errors}",
        f"ledgers unreadable         {m.ledger_unreadable}",
        "",
        f"release gate: {summary.gate.status.upper()}",
    ]
    lines += [f"  - {reason}" for reason in summary.gate.reasons]
    return "\n".join(lines)


def summary_json(summary: RunSummary) -> str:
    return json.dumps(summary.model_dump(mode="json"), indent=2)
