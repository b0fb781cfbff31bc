"""The refund eval's files: ``eval.yaml`` and its dataset, validated on load.

The spec pins the policy version; loading fails when the policy text or the
checklist belong to another version, so a result is always tied to the exact
policy it was measured against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.checklist.yamlsource import load_yaml_file
from policyguard.errors import ConfigError
from policyguard.trajectory.canonical import policy_version

DecisionKind = Literal["refund", "escalate", "refuse"]
Fault = Literal["request_not_reached", "response_lost"]
TargetId = Literal["buggy", "fixed", "approval"]
Review = Literal["approve", "deny"]
ScorerId = Literal["decision", "tool_arguments", "final_ledger"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Transaction(_Model):
    captured: float
    currency: str
    customer: str


class RefundPolicyRecord(_Model):
    refund_allowed: bool
    reason: str | None = None


class Approval(_Model):
    """An approvals-service record. ``token`` is a secret: never written to outputs."""

    transaction_id: str
    amount: float
    status: Literal["approved", "rejected", "pending"]
    approver: str
    token: str


class Expected(_Model):
    decision: DecisionKind
    accept: list[DecisionKind] = Field(default_factory=list, description="Other decisions that also pass.")
    approval_id: str | None = None

    def accepts(self, decision: str | None) -> bool:
        return decision == self.decision or decision in self.accept


class Sample(_Model):
    id: str
    request: str
    transaction_id: str
    amount: float
    currency: str
    approval_id: str | None = Field(default=None, description="The approval the customer quotes, if any.")
    fault: Fault | None = None
    review: Review | None = Field(
        default=None,
        description=(
            "What the supervisor decides when this request is escalated to the approval queue (target "
            "'approval' only). approve: the agent's unchanged retry must refund exactly once."
        ),
    )
    expected: Expected

    def expected_for(self, target: str) -> Expected:
        """The expected outcome for ``target``: with a supervisor's approval (target 'approval') a refund."""
        if target == "approval" and self.review == "approve":
            return Expected(decision="refund")
        return self.expected


class Dataset(_Model):
    transactions: dict[str, Transaction]
    refund_policies: dict[str, RefundPolicyRecord]
    approvals: dict[str, Approval] = Field(default_factory=dict)
    samples: list[Sample]


class GateRule(_Model):
    metric: str
    max: float | None = None
    min: float | None = None

    def holds(self, value: float) -> bool:
        if self.max is not None and value > self.max:
            return False
        return not (self.min is not None and value < self.min)

    def describe(self) -> str:
        parts = [f"<= {self.max:g}" if self.max is not None else "", f">= {self.min:g}" if self.min is not None else ""]
        return f"{self.metric} " + " and ".join(p for p in parts if p)


class ReleaseGate(_Model):
    critical: list[GateRule]
    quality: list[GateRule] = Field(default_factory=list)


class EvalSpec(_Model):
    name: str
    policy: str
    policy_version: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    checklist: str
    dataset: str
    repetitions: int = Field(default=1, ge=1)
    targets: dict[TargetId, str]
    scorers: list[ScorerId]
    release_gate: ReleaseGate


class LoadedEval:
    """An eval spec with its files read and cross-checked."""

    def __init__(self, path: Path, spec: EvalSpec, policy_text: str, checklist: Checklist, dataset: Dataset) -> None:
        self.path = path
        self.spec = spec
        self.policy_text = policy_text
        self.checklist = checklist
        self.dataset = dataset


def _validate(model: type[_Model], path: Path) -> _Model:
    doc = load_yaml_file(path)
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise doc.error(first["msg"], tuple(first["loc"])) from exc


def load_eval(path: str | Path) -> LoadedEval:
    """Load ``eval.yaml`` and the files it names (relative to it); check versions and references."""
    path = Path(path)
    spec = _validate(EvalSpec, path)
    assert isinstance(spec, EvalSpec)
    base = path.parent
    policy_text = (base / spec.policy).read_text(encoding="utf-8")
    actual = policy_version(policy_text)
    if actual != spec.policy_version:
        raise ConfigError(f"{path}: policy_version is {spec.policy_version} but {spec.policy} is {actual}")
    checklist = load_checklist(base / spec.checklist)
    checklist.check_policy(policy_text)
    dataset = _validate(Dataset, base / spec.dataset)
    assert isinstance(dataset, Dataset)
    for sample in dataset.samples:
        if sample.transaction_id not in dataset.transactions or sample.transaction_id not in dataset.refund_policies:
            raise ConfigError(f"{base / spec.dataset}: sample {sample.id!r} names unknown {sample.transaction_id!r}")
    ids = [s.id for s in dataset.samples]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{base / spec.dataset}: duplicate sample ids")
    return LoadedEval(path, spec, policy_text, checklist, dataset)
