"""Several gateway processes on one store, and processes that die mid-effect or mid-transaction.

Each test runs against a SQLite file and a PostgreSQL schema (``store_url``).
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

from policyguard.checklist.schema import Checklist
from policyguard.enforcement.executor import PENDING_REASON, GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore, Store
from policyguard.enforcement.storeurl import open_store
from policyguard.trajectory.messages import ToolCall

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


def _open(url: str) -> Store:
    """A second view of the store the workers use (the "restart" or the auditor)."""
    return open_store(url)


def _run_four(url: str, tmp_path: Path, calls: list[ToolCall], grants: list[str]) -> tuple[list[str], list[str]]:
    effects, outcomes = tmp_path / "effects.txt", tmp_path / "outcomes.txt"
    setup = _open(url)
    setup.set_captured("O1", 1000)
    setup.close()
    barrier = multiprocessing.get_context("spawn").Barrier(len(calls))
    jobs = [
        {
            "kind": "execute",
            "url": url,
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


def test_four_processes_one_grant_one_effect(store_url: str, tmp_path: Path) -> None:
    call = _call("c1", "k1")
    grant = _issue(call)
    effects, outcomes = _run_four(store_url, tmp_path, [call] * 4, [grant] * 4)
    assert len(effects) == 1
    assert sorted(outcomes) == ["0 replayed"] * 3 + ["1 executed"]


def test_four_processes_one_idempotency_key_one_effect(store_url: str, tmp_path: Path) -> None:
    calls = [_call(f"c{i}", "same-key") for i in range(4)]
    effects, outcomes = _run_four(store_url, tmp_path, calls, [_issue(c) for c in calls])
    assert len(effects) == 1
    assert [o for o in outcomes if o.startswith("1 ")] == ["1 executed"]
    assert {o.split(" ", 1)[1] for o in outcomes} <= {"executed", "replayed_from_ledger", PENDING_REASON}
    store = _open(store_url)
    assert store.total("O1") == 50 and len(store.entries()) == 1
    store.close()


def _pending_and_never_resent(url: str, effects: Path) -> None:
    """After the crash: the claim is pending, counts nothing, and a retry with the same key is refused."""
    restarted = _open(url)  # the "restart": a new store on the same file or database
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
    restarted.close()


def test_a_crash_between_effect_and_commit_leaves_a_pending_claim_never_resent(store_url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    call = _call("c1", "k1")
    job = {"kind": "crash_after_tool", "url": store_url, "effects": str(effects), "key": "k1", "sha": call.args_sha256}
    process = _spawn(job)
    process.join(60)
    assert process.exitcode == 1 and len(_lines(effects)) == 1

    _pending_and_never_resent(store_url, effects)


@pytest.fixture(params=["sqlite-NORMAL", "sqlite-FULL", "postgres"])
def committing(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(store URL, SQLite synchronous setting): both SQLite durability modes, and PostgreSQL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url")), "FULL"
    return f"sqlite:///{tmp_path / 'gate.db'}", request.param.split("-")[1]


def test_sigkill_during_commits_loses_and_duplicates_nothing(committing: tuple[str, str], tmp_path: Path) -> None:
    store_url, synchronous = committing
    effects = tmp_path / "effects.txt"
    process = _spawn({"kind": "commit_forever", "url": store_url, "effects": str(effects), "synchronous": synchronous})
    deadline = time.monotonic() + 30
    while len(_lines(effects)) < 40 and time.monotonic() < deadline and process.is_alive():
        time.sleep(0.01)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL

    invoked = [line.split()[1] for line in _lines(effects)]
    after = _open(store_url)
    entries = after.entries()
    keys = [e.idempotency_key for e in entries]
    committed = [e.idempotency_key for e in entries if e.status == "committed"]
    pending = [e.idempotency_key for e in entries if e.status == "pending"]

    assert len(invoked) >= 40
    assert len(set(invoked)) == len(invoked), "a key's effect ran twice"
    assert keys == [f"k{i:06d}" for i in range(len(keys))], "a ledger entry was lost or duplicated"
    assert set(invoked) <= set(keys), "an effect happened with no ledger claim"
    assert set(committed) <= set(invoked), "a committed entry whose effect never ran"
    assert len(pending) <= 1 and set(pending) <= {keys[-1]}, "only the claim in flight may be pending"

    # The claimed sum moved with each claim and with nothing else: room for exactly one more unit.
    after.set_captured("O1", len(keys) + 1)
    assert (
        after.begin_effect(
            "probe-2",
            tool="issue_refund",
            transaction_id="O1",
            amount=2,
            currency=None,
            args_sha256="x",
            enforce_captured=True,
        ).refusal
        is not None
    )
    assert after.begin_effect(
        "probe-1",
        tool="issue_refund",
        transaction_id="O1",
        amount=1,
        currency=None,
        args_sha256="x",
        enforce_captured=True,
    ).created
    after.close()


def test_a_process_killed_inside_a_claim_transaction_leaves_nothing_and_blocks_no_one(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILL while the claim holds its locks: the claim is absent, and the next claim goes through."""
    effects = tmp_path / "effects.txt"
    setup = _open(store_url)
    setup.set_captured("O1", 5)
    process = _spawn({"kind": "hang_inside_claim", "url": store_url, "effects": str(effects)})
    deadline = time.monotonic() + 30
    while not _lines(effects) and time.monotonic() < deadline and process.is_alive():
        time.sleep(0.01)
    assert _lines(effects) == ["inside"], "the worker never reached the inside of its claim"
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL

    started = time.monotonic()
    claim = setup.begin_effect(
        "after",
        tool="issue_refund",
        transaction_id="O1",
        amount=5,
        currency=None,
        args_sha256="x",
        enforce_captured=True,
    )
    assert claim.created, claim.refusal  # the whole ceiling is free: the killed claim counted nothing
    assert time.monotonic() - started < 5, "the killed transaction's locks outlived it"
    assert setup.lookup("stuck") is None and [e.idempotency_key for e in setup.entries()] == ["after"]
    setup.close()


# -- SQLite group commit (policyguard/enforcement/groupcommit.py) ------------------------------------------


def test_a_crash_before_a_deferred_completion_leaves_a_pending_claim_never_resent(tmp_path: Path) -> None:
    """SQLite group commit: the completion was handed over as a deferred write that no batch carried yet."""
    kind = "crash_before_deferred_completion"
    db, effects = tmp_path / "gate.db", tmp_path / "effects.txt"
    call = _call("c1", "k1")
    job = {"kind": kind, "db": str(db), "effects": str(effects), "key": "k1", "sha": call.args_sha256}
    process = _spawn(job)
    process.join(60)
    assert process.exitcode == 1 and len(_lines(effects)) == 1

    _pending_and_never_resent(f"sqlite:///{db}", effects)


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
