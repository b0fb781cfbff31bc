"""Shared wiring for the refund tests: the shipped eval, and one trial's sandbox and targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from policyguard.approvals.queue import SQLiteApprovalQueue
from policyguard.audit.trace import Trace
from policyguard.bench.refund.sandbox import PaymentSandbox, SandboxLedger
from policyguard.bench.refund.spec import LoadedEval, Review, Sample, load_eval
from policyguard.bench.refund.targets import ApprovalTarget, BuggyTarget, FixedTarget
from policyguard.enforcement.grants import generate_keypair

EVAL = Path(__file__).resolve().parents[2] / "benchmarks" / "refund" / "eval.yaml"
KEYS = generate_keypair()


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """One trial (id ``t1``): its sandbox and ledger, a trace, a clock the test moves."""

    loaded: LoadedEval
    sandbox: PaymentSandbox
    ledger: SandboxLedger
    trace: Trace
    clock: Clock

    def sample(self, sample_id: str) -> Sample:
        return next(s for s in self.loaded.dataset.samples if s.id == sample_id)

    def fixed(self) -> FixedTarget:
        return FixedTarget(self.loaded, self.sandbox, self.trace, clock=self.clock, keypair=KEYS)

    def approval(self, queue: SQLiteApprovalQueue, review: Review | None = None) -> ApprovalTarget:
        return ApprovalTarget(
            self.loaded, self.sandbox, self.trace, queue=queue, principal="t1", review=review, keypair=KEYS
        )

    def buggy(self) -> BuggyTarget:
        return BuggyTarget(self.sandbox, self.trace)


@pytest.fixture(scope="session")
def eval_path() -> Path:
    return EVAL


@pytest.fixture(scope="session")
def loaded() -> LoadedEval:
    return load_eval(EVAL)


@pytest.fixture
def rig(loaded: LoadedEval, tmp_path: Path) -> Rig:
    ledger = SandboxLedger(tmp_path / "ledger.sqlite")
    return Rig(loaded, PaymentSandbox(loaded.dataset, ledger, "t1"), ledger, Trace(), Clock())
