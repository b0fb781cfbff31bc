"""``policyguard demo``: the guard on three real tau2 airline conversations, offline, in a few seconds.

The data is package data (``policyguard/_data/demo/``): the tau2 airline policy
(the text ``checklists/airline.yaml`` pins), an excerpt of tau2's airline
database and three conversations written after tau2 tasks, whose tool results
are what tau2's tools return (``tests/demo/tau2_source.py`` rebuilds them from
tau2). The shipped airline checklist is used unchanged, plus one rule the demo
adds as "your company's" (``company_rules.yaml``): a refund over $1,000 waits for
a supervisor. Airline has no approval step of its own.

Each conversation ends in one ``cancel_reservation`` call, sent through
:class:`~policyguard.integrations.openai_loop.GuardedTools` with a
:class:`~policyguard.enforcement.executor.GuardedExecutor`:

* allowed: the gate proves the data requirements, a *scripted* verifier (answers
  shipped in ``airline.json``; no model is called) the procedural ones, and the
  call runs with its single-use grant. The "tool" returns tau2's recorded
  result; nothing else changes.
* blocked: the gate disproves ``cancel-eligible``; the agent gets the remediation.
* escalated: only the company rule fails, and it is approvable: the call waits
  in the approval queue.

Store and queue share one SQLite file, and every decision goes to a JSONL trace,
both in the output folder; the trace is then audited for INV-1 with
:func:`policyguard.audit.inv1.audit_file`, as ``policyguard audit`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from policyguard.audit.inv1 import AuditReport
from policyguard.errors import ConfigError

Outcome = Literal["allow", "block", "escalate"]

MARKER = ".policyguard-demo"
"""The file that marks a folder as a demo's output, which a later run may overwrite."""

STORE = "approvals.db"
TRACE = "trace.jsonl"
OWNED = (MARKER, TRACE, STORE, f"{STORE}-wal", f"{STORE}-shm", f"{STORE}-journal")
"""Every file the demo writes, and the only files it ever deletes."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FailedRequirement(_Model):
    """A requirement the call failed, with the policy sentence it quotes."""

    id: str
    text: str
    source: str
    check: str | None
    judged_by: str
    approvable: bool
    company_rule: bool


class CallReport(_Model):
    """What happened to one conversation's write."""

    conversation: str
    task_id: str
    title: str
    tool: str
    arguments: dict[str, Any]
    expected: Outcome
    outcome: Outcome | Literal["halt"]
    stage: str
    as_expected: bool
    gate_met: int
    verifier_judged: int
    failed: list[FailedRequirement]
    message: str | None
    approval_id: str | None
    executed: bool
    result: Any = None


class DemoReport(_Model):
    """The demo's result: ``ok`` when every call came out as expected and the audit is clean."""

    out: str
    trace: str
    store_url: str
    policy_version: str
    calls: list[CallReport]
    audit: AuditReport
    audit_ok: bool
    ok: bool


def prepare_out(out: Path) -> None:
    """Make ``out`` ready: created when missing; an earlier demo's output loses only the files the demo owns.

    Refuses (:class:`ConfigError`) a path that is a file, or a non-empty folder
    without the demo's marker: the demo never deletes what it did not write.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ConfigError(f"--out {out}: exists and is not an earlier demo output (no {MARKER} in it); choose another")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in OWNED:
            (out / name).unlink(missing_ok=True)
        (out / MARKER).write_text("written by `policyguard demo`; a later run overwrites only its own files\n")
    except OSError as exc:
        raise ConfigError(f"--out {out}: {exc.strerror or exc}") from None


def demo_checklist() -> tuple[Any, set[str]]:
    """The shipped airline checklist with the company rule's requirements appended to their tools, and their ids."""
    import yaml

    from policyguard.checklist.schema import parse_checklist
    from policyguard.resources import demo_file, shipped_checklist

    base = yaml.safe_load(shipped_checklist("airline").read_text(encoding="utf-8"))
    extra = yaml.safe_load(demo_file("company_rules.yaml").read_text(encoding="utf-8"))
    for tool, spec in extra["tools"].items():
        base["tools"][tool]["requirements"].extend(spec["requirements"])
    company = {req["id"] for spec in extra["tools"].values() for req in spec["requirements"]}
    return parse_checklist(yaml.safe_dump(base, sort_keys=False), file="airline.yaml + company_rules.yaml"), company


def run_demo(out: Path) -> DemoReport:
    """Run the three conversations into ``out`` (see :func:`prepare_out`) and audit the trace."""
    from policyguard.approvals.queue import SQLiteApprovalQueue
    from policyguard.audit.inv1 import audit_file
    from policyguard.audit.trace import Trace
    from policyguard.enforcement.executor import GuardedExecutor
    from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
    from policyguard.enforcement.store import SQLiteStore
    from policyguard.gate.hardgate import HardGate
    from policyguard.guard.core import Guard
    from policyguard.integrations.openai_loop import GuardedTools
    from policyguard.resources import demo_file
    from policyguard.trajectory.messages import Trajectory
    from policyguard.verifier.llm import LLMVerifier
    from policyguard.verifier.models.scripted import ScriptedModel

    prepare_out(out)
    data = json.loads(demo_file("airline.json").read_text(encoding="utf-8"))
    policy = demo_file("policy.md").read_text(encoding="utf-8")
    checklist, company = demo_checklist()
    steps: list[str] = [
        json.dumps(step["response"]) for conversation in data["conversations"] for step in conversation["verifier"]
    ]
    model = ScriptedModel(steps, name="scripted-demo", source="airline.json (scripted verifier answers)")
    trace = Trace(out / TRACE)
    store = SQLiteStore(str(out / STORE))
    private_pem, public_pem = generate_keypair()  # this run's key: never written anywhere
    try:
        guard = Guard(
            checklist,
            policy,
            gate=HardGate(checklist),
            verifier=LLMVerifier(model),
            trace=trace,
            grants=GrantIssuer(private_pem),
            denials=store,
            approvals=SQLiteApprovalQueue(store),
        )
        reports = []
        for conversation in data["conversations"]:
            trajectory = Trajectory.model_validate({"messages": conversation["messages"]})
            call = trajectory.messages[-1].tool_calls[-1]
            executor = GuardedExecutor(
                {call.name: _recorded(json.loads(conversation["write_result"]))},
                verifier=GrantVerifier(
                    public_pem, nonces=store, current_policy_version=lambda: checklist.policy.version
                ),
                ledger=store,
                checklist=checklist,
                trace=trace,
            )
            outcome = GuardedTools(guard, executor=executor).run(call, trajectory)
            reports.append(_report(conversation, outcome, checklist, company))
    finally:
        store.close()
    audit = audit_file(out / TRACE)
    return DemoReport(
        out=str(out),
        trace=str(out / TRACE),
        store_url=f"sqlite:///{out / STORE}",
        policy_version=checklist.policy.version,
        calls=reports,
        audit=audit,
        audit_ok=audit.ok,
        ok=audit.ok and all(r.as_expected for r in reports),
    )


def _recorded(result: Any) -> Callable[..., Any]:
    """The demo's stand-in for the tool: it returns tau2's recorded result for this call and changes nothing."""

    def tool(**_arguments: Any) -> Any:
        return result

    return tool


def _report(conversation: dict[str, Any], outcome: Any, checklist: Any, company: set[str]) -> CallReport:
    decision = outcome.decision
    requirements = {r.id: r for r in checklist.requirements_for(outcome.tool)}
    failed = [
        FailedRequirement(
            id=r.id,
            text=requirements[r.id].text,
            source=requirements[r.id].source,
            check=requirements[r.id].check,
            judged_by=r.judged_by,
            approvable=requirements[r.id].approvable,
            company_rule=r.id in company,
        )
        for r in decision.requirements
        if r.status == "NOT_MET" and r.id in requirements
    ]
    result = None
    if outcome.executed and not outcome.is_error:
        result = json.loads(outcome.content)
    call = conversation["messages"][-1]["tool_calls"][-1]
    return CallReport(
        conversation=conversation["name"],
        task_id=conversation["task_id"],
        title=conversation["title"],
        tool=outcome.tool,
        arguments=call["arguments"],
        expected=conversation["expect"],
        outcome=decision.outcome,
        stage=decision.stage,
        as_expected=decision.outcome == conversation["expect"]
        and (decision.outcome != "allow" or outcome.executed)
        and (decision.outcome != "escalate" or decision.approval_id is not None),
        gate_met=sum(1 for r in decision.requirements if r.status == "MET" and r.judged_by == "gate"),
        verifier_judged=sum(1 for r in decision.requirements if r.judged_by == "verifier"),
        failed=failed,
        message=None if decision.outcome == "allow" else decision.message,
        approval_id=decision.approval_id,
        executed=outcome.executed,
        result=result,
    )
