"""Two real `policyguard serve` processes sharing one store: exactly one effect, and SIGKILL loses nothing.

What runs is real: each replica decides with its own guard, signs grants with
the shared key, and executes through its own GuardedExecutor (``--demo-effects``).
The only shared state is the store (nonces, denials, the effect ledger), and
the demo tool appends one line per invocation to one file, so the effects are
counted independently of the ledger the replicas write.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from policyguard.enforcement.storeurl import open_store

from .conftest import CHECKLIST, POLICY, Replica, check_body, refund_call, store_urls, unique

CLIENTS = 16
TIMEOUT = httpx.Timeout(30.0)
pytestmark = pytest.mark.slow


def _effects(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def pair(
    tmp_path: Path, grant_key: Path, replicas: Any, store_url: str
) -> Iterator[tuple[Replica, Replica, Path, Any]]:
    """Replicas a and b on one store and one effects file (each with its own trace)."""
    effects = tmp_path / "effects.jsonl"
    common = ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--store", store_url,
              "--grant-key", str(grant_key), "--demo-effects", str(effects)]  # fmt: skip
    a = replicas("a", [*common, "--trace", str(tmp_path / "a.jsonl")])
    b = replicas("b", [*common, "--trace", str(tmp_path / "b.jsonl")])
    store = open_store(store_url)
    yield a, b, effects, store
    close = getattr(store, "close", None)
    if close is not None:
        close()


def _check(client: httpx.Client, url: str, transaction: str, call_id: str) -> dict[str, Any]:
    response = client.post(f"{url}/v1/check", json=check_body(transaction, call_id, principal="C-1"))
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()
    assert decision["outcome"] == "allow", decision
    return decision


def _execute(client: httpx.Client, url: str, transaction: str, call_id: str, grant: str) -> dict[str, Any]:
    body = {"call": refund_call(call_id, transaction), "grant": grant, "principal": "C-1"}
    response = client.post(f"{url}/v1/execute", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_one_grant_sent_by_16_clients_to_both_replicas_runs_once(pair: Any) -> None:
    a, b, effects, store = pair
    transaction = unique()
    store.set_captured(transaction, 200)
    with httpx.Client(timeout=TIMEOUT) as client:
        grant = _check(client, a.url, transaction, "c1")["grant"]
    barrier = threading.Barrier(CLIENTS, timeout=30)

    def submit(index: int) -> dict[str, Any]:
        with httpx.Client(timeout=TIMEOUT) as client:
            barrier.wait()
            return _execute(client, (a, b)[index % 2].url, transaction, "c1", grant)

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(submit, range(CLIENTS)))
    reasons = Counter(r["reason"] for r in results)
    assert reasons == {"executed": 1, "replayed": CLIENTS - 1}, reasons
    assert [e["arguments"]["transaction_id"] for e in _effects(effects)] == [transaction]
    assert [(r.status, r.amount) for r in store.entries() if r.transaction_id == transaction] == [("committed", 120.0)]


@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_one_idempotency_key_under_16_grants_across_replicas_has_one_effect(pair: Any) -> None:
    """16 separate allows (16 call ids, 16 nonces) for the same refund key: the ledger admits one."""
    a, b, effects, store = pair
    transaction = unique()
    store.set_captured(transaction, 200)
    barrier = threading.Barrier(CLIENTS, timeout=60)

    def submit(index: int) -> dict[str, Any]:
        call_id = f"c{index}"
        with httpx.Client(timeout=TIMEOUT) as client:
            grant = _check(client, (a, b)[index % 2].url, transaction, call_id)["grant"]
            barrier.wait()
            return _execute(client, (b, a)[index % 2].url, transaction, call_id, grant)  # executed on the other replica

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(submit, range(CLIENTS)))
    reasons = Counter(r["reason"] for r in results)
    assert reasons["executed"] == 1, reasons
    assert set(reasons) <= {"executed", "replayed_from_ledger", "effect_pending: look up by key before retrying"}
    assert len(_effects(effects)) == 1
    committed = [r for r in store.entries() if r.transaction_id == transaction]
    assert [(r.status, r.idempotency_key) for r in committed] == [("committed", f"refund:{transaction}")]


@pytest.mark.parametrize("store_url", store_urls(), indirect=True)
def test_sigkill_of_one_replica_under_load_loses_and_duplicates_no_effect(pair: Any) -> None:
    """16 clients refund 48 transactions through both replicas; replica a is SIGKILLed a third of the way in.

    A client whose replica dies retries on the survivor with the same idempotency
    key (a new call id and grant: the old grant may be spent). Afterwards every
    refund the clients saw succeed was applied exactly once, no key was applied
    twice, and a refund whose claim a died holding is ``pending`` in the ledger
    (its outcome is the effects file's to tell, never re-run blindly).
    """
    a, b, effects, store = pair
    transactions = [unique() for _ in range(48)]
    for transaction in transactions:
        store.set_captured(transaction, 200)
    outcomes: dict[str, str] = {}
    done = threading.Semaphore(0)
    lock = threading.Lock()
    retries = Counter[str]()

    def refund(index: int) -> None:
        transaction = transactions[index]
        order = [(a, b), (b, a)][index % 2]
        with httpx.Client(timeout=TIMEOUT) as client:
            for attempt in range(6):
                replica = order[0] if attempt == 0 else b  # after any failure: the survivor
                call_id = f"c{index}-{attempt}"
                try:
                    grant = _check(client, replica.url, transaction, call_id)["grant"]
                    result = _execute(client, replica.url, transaction, call_id, grant)
                except httpx.TransportError:
                    with lock:
                        retries[replica.name] += 1
                    continue
                with lock:
                    outcomes[transaction] = result["reason"]
                done.release()
                return
        raise AssertionError(f"{transaction}: no replica answered in 6 attempts")

    def killer() -> None:
        for _ in range(len(transactions) // 3):
            assert done.acquire(timeout=120)
        a.kill()

    with ThreadPoolExecutor(CLIENTS + 1) as pool:
        kill = pool.submit(killer)
        futures = [pool.submit(refund, i) for i in range(len(transactions))]
        for future in futures:
            future.result(timeout=300)
        kill.result(timeout=60)

    assert a.process.returncode == -9
    applied = Counter(e["arguments"]["transaction_id"] for e in _effects(effects))
    ledger = {r.transaction_id: r for r in store.entries() if r.transaction_id in set(transactions)}
    assert max(applied.values()) == 1, "an effect was applied twice"
    assert set(outcomes) == set(transactions), "a client never got an answer"
    for transaction, reason in outcomes.items():
        record = ledger.get(transaction)
        if reason in ("executed", "replayed_from_ledger"):
            assert applied[transaction] == 1 and record is not None and record.status == "committed", transaction
        else:  # a died between claiming the key and recording the result: pending, never re-run
            assert reason.startswith("effect_pending") and record is not None and record.status == "pending"
            assert applied[transaction] <= 1
    for transaction, record in ledger.items():  # the ledger and the effects agree on every committed refund
        assert record.status == "pending" or applied[transaction] == 1
    with httpx.Client(timeout=TIMEOUT) as client:  # the survivor keeps serving
        assert client.get(f"{b.url}/readyz").json()["ready"] is True
        fresh = unique()
        store.set_captured(fresh, 200)
        grant = _check(client, b.url, fresh, "after")["grant"]
        assert _execute(client, b.url, fresh, "after", grant)["reason"] == "executed"
    print(f"outcomes {Counter(outcomes.values())}, transport retries {dict(retries)}")  # shown with -s


def test_a_grant_from_one_replica_verifies_with_pyjwks_client_against_the_other(
    tmp_path: Path, grant_key: Path, replicas: Any
) -> None:
    """A JOSE client (PyJWT's PyJWKClient, fetching the JWKS over HTTP) verifies a grant any replica issued."""
    import jwt

    common = ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--grant-key", str(grant_key)]
    a = replicas("a", common)
    b = replicas("b", common)
    with httpx.Client(timeout=TIMEOUT) as client:
        grant = _check(client, a.url, unique(), "c1")["grant"]
    jwks_client = jwt.PyJWKClient(f"{b.url}/.well-known/jwks.json", cache_keys=False, timeout=10)
    key = jwks_client.get_signing_key_from_jwt(grant)
    claims = jwt.decode(grant, key=key, algorithms=["EdDSA"], options={"require": ["exp", "iat"]})
    assert claims["principal"] == "C-1" and claims["tool"] == "issue_refund" and claims["exp"] > time.time()


def test_the_workers_of_one_server_share_the_store_like_replicas(
    tmp_path: Path, grant_key: Path, replicas: Any
) -> None:
    """`serve --workers 2`: two processes on one socket; one grant sent 16 times still runs once."""
    import psutil

    effects = tmp_path / "effects.jsonl"
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    server = replicas("w", ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--store", store_url,
                            "--grant-key", str(grant_key), "--demo-effects", str(effects), "--workers", "2",
                            "--trace", str(tmp_path / "trace.jsonl")])  # fmt: skip

    def workers() -> int:  # spawned workers, not multiprocessing's resource tracker
        children = psutil.Process(server.process.pid).children()
        return sum("spawn_main" in " ".join(child.cmdline()) for child in children)

    deadline = time.monotonic() + 60
    while workers() < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers() == 2
    store = open_store(store_url)
    transaction = unique()
    store.set_captured(transaction, 200)
    with httpx.Client(timeout=TIMEOUT) as client:
        grant = _check(client, server.url, transaction, "c1")["grant"]

    def submit(index: int) -> str:
        with httpx.Client(timeout=TIMEOUT) as client:  # a new connection each: either worker may take it
            return str(_execute(client, server.url, transaction, "c1", grant)["reason"])

    with ThreadPoolExecutor(CLIENTS) as pool:
        reasons = Counter(pool.map(submit, range(CLIENTS)))
    assert reasons == {"executed": 1, "replayed": CLIENTS - 1}
    assert len(_effects(effects)) == 1
    assert sorted(p.name for p in tmp_path.glob("trace.*.jsonl")) != []  # one trace file per worker


def test_workers_with_a_private_memory_store_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from policyguard.cli import main

    code = main(["serve", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--workers", "2", "--port", "0"])
    assert code == 2 and "shared --store" in capsys.readouterr().err


def test_on_all_interfaces_the_real_server_requires_the_token(tmp_path: Path, replicas: Any) -> None:
    token = "a-long-enough-test-token-4242"
    server = replicas(
        "open",
        ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--host", "0.0.0.0"],
        env={"POLICYGUARD_SERVE_TOKEN": token},
    )
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    body = check_body(unique())
    with httpx.Client(timeout=TIMEOUT) as client:
        assert client.post(f"{url}/v1/check", json=body).status_code == 401
        granted = client.post(f"{url}/v1/check", json=body, headers={"authorization": f"Bearer {token}"})
        assert granted.status_code == 200 and granted.json()["outcome"] == "allow"
    assert "token required" in server.output[0]
