"""Several gateway processes on one SQLite file, and processes that die mid-effect.

Side effects are counted by the tool itself (one appended line per invocation),
independently of the ledger, so "exactly once" is checked against reality.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from policyguard.checklist import Checklist
from policyguard.executor import PENDING_REASON, GuardedExecutor
from policyguard.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.messages import ToolCall
from policyguard.store import SQLiteStore

WORKER = str(Path(__file__).with_name("store_worker.py"))
KEYS = generate_keypair()
pytestmark = pytest.mark.slow


def _spawn(job: dict[str, Any]) -> multiprocessing.process.BaseProcess:
    ctx = multiprocessing.get_context("spawn")
    kwargs = {"init_globals": {"JOB": job}, "run_name": "__main__"}
    process = ctx.Process(target=runpy.run_path, args=(WORKER,), kwargs=kwargs)
    process.start()
    return process


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _call(call_id: str, key: str) -> ToolCall:
    return ToolCall(id=call_id, name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": key})


def _run_four(tmp_path: Path, calls: list[ToolCall], grants: list[str]) -> tuple[list[str], list[str]]:
    db, effects, outcomes = tmp_path / "gate.db", tmp_path / "effects.txt", tmp_path / "outcomes.txt"
    setup = SQLiteStore(str(db))
    setup.set_captured("O1", 1000)
    setup.close()
    barrier = multiprocessing.get_context("spawn").Barrier(len(calls))
    jobs = [
        {
            "kind": "execute",
            "db": str(db),
            "effects": str(effects),
            "outcomes": str(outcomes),
            "public_pem": KEYS[1],
            "call": call.model_dump(),
            "grant": grant,
            "barrier": barrier,
        }
        for call, grant in zip(calls, grants, strict=True)
    ]
    processes = [_spawn(job) for job in jobs]
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    return _lines(effects), _lines(outcomes)


def _issue(call: ToolCall) -> str:
    return GrantIssuer(KEYS[0]).issue(call, principal="alice", resource="O1", policy_version="v1")


def test_four_processes_one_grant_one_effect(tmp_path: Path) -> None:
    call = _call("c1", "k1")
    grant = _issue(call)
    effects, outcomes = _run_four(tmp_path, [call] * 4, [grant] * 4)
    assert len(effects) == 1
    assert sorted(outcomes) == ["0 replayed"] * 3 + ["1 executed"]


def test_four_processes_one_idempotency_key_one_effect(tmp_path: Path) -> None:
    calls = [_call(f"c{i}", "same-key") for i in range(4)]
    effects, outcomes = _run_four(tmp_path, calls, [_issue(c) for c in calls])
    assert len(effects) == 1
    assert [o for o in outcomes if o.startswith("1 ")] == ["1 executed"]
    assert {o.split(" ", 1)[1] for o in outcomes} <= {"executed", "replayed_from_ledger", PENDING_REASON}
    store = SQLiteStore(str(tmp_path / "gate.db"))
    assert store.total("O1") == 50 and len(store.entries()) == 1


@pytest.mark.parametrize("kind", ["crash_after_tool", "crash_before_deferred_completion"])
def test_a_crash_between_effect_and_commit_leaves_a_pending_claim_never_resent(tmp_path: Path, kind: str) -> None:
    """Also when the completion was handed to group commit as a deferred write that no batch carried yet."""
    db, effects = tmp_path / "gate.db", tmp_path / "effects.txt"
    call = _call("c1", "k1")
    job = {"kind": kind, "db": str(db), "effects": str(effects), "key": "k1", "sha": call.args_sha256}
    process = _spawn(job)
    process.join(60)
    assert process.exitcode == 1 and len(_lines(effects)) == 1

    restarted = SQLiteStore(str(db))  # the "restart": a new store on the same file
    restarted.set_captured("O1", 1000)
    record = restarted.lookup("k1")
    assert record is not None and record.status == "pending"
    assert restarted.total("O1") == 0

    calls: list[dict[str, Any]] = []
    checklist = Checklist.model_validate(
        {
            "policy": {"name": "refunds", "version": "sha256:" + "1" * 64},
            "tools": {"issue_refund": {"effect": {"transaction_arg": "order_id"}}},
        }
    )
    verifier = GrantVerifier(KEYS[1], nonces=restarted, current_policy_version=lambda: "v1")
    executor = GuardedExecutor(
        {"issue_refund": lambda **kw: calls.append(kw)}, verifier=verifier, ledger=restarted, checklist=checklist
    )
    retry = _call("c2", "k1")
    result = executor.execute(retry, _issue(retry), principal="alice", resource="O1")
    assert not result.executed and result.reason == PENDING_REASON
    assert calls == [] and len(_lines(effects)) == 1


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_sigkill_during_commits_loses_and_duplicates_nothing(tmp_path: Path, synchronous: str) -> None:
    db, effects = tmp_path / "gate.db", tmp_path / "effects.txt"
    process = _spawn({"kind": "commit_forever", "db": str(db), "effects": str(effects), "synchronous": synchronous})
    deadline = time.monotonic() + 30
    while len(_lines(effects)) < 40 and time.monotonic() < deadline and process.is_alive():
        time.sleep(0.01)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL

    invoked = [line.split()[1] for line in _lines(effects)]
    entries = SQLiteStore(str(db)).entries()
    keys = [e.idempotency_key for e in entries]
    committed = [e.idempotency_key for e in entries if e.status == "committed"]
    pending = [e.idempotency_key for e in entries if e.status == "pending"]

    assert len(invoked) >= 40
    assert len(set(invoked)) == len(invoked), "a key's effect ran twice"
    assert keys == [f"k{i:06d}" for i in range(len(keys))], "a ledger entry was lost or duplicated"
    assert set(invoked) <= set(keys), "an effect happened with no ledger claim"
    assert set(committed) <= set(invoked), "a committed entry whose effect never ran"
    assert len(pending) <= 1 and set(pending) <= {keys[-1]}, "only the claim in flight may be pending"


def test_sigkill_during_group_commits_loses_no_acknowledged_claim(tmp_path: Path) -> None:
    """Eight threads share batches under synchronous=FULL; a claim its caller saw is in the file after a kill."""
    db, acked = tmp_path / "gate.db", tmp_path / "acked.txt"
    process = _spawn({"kind": "group_claims_forever", "db": str(db), "acked": str(acked)})
    deadline = time.monotonic() + 60
    while len(_lines(acked)) < 200 and time.monotonic() < deadline and process.is_alive():
        time.sleep(0.01)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL

    acknowledged = _lines(acked)
    keys = {e.idempotency_key for e in SQLiteStore(str(db)).entries()}
    assert len(acknowledged) >= 200
    assert set(acknowledged) <= keys, "an acknowledged claim was lost"
    per_thread: dict[str, list[int]] = {}
    for key in sorted(keys):
        thread, number = key.split("-")
        per_thread.setdefault(thread, []).append(int(number))
    for numbers in per_thread.values():  # each thread claims in order: a gap would be a lost commit
        assert numbers == list(range(len(numbers)))
