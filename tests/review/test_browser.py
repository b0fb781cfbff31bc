"""The review console in a real browser: a reviewer logs in, approves one request and denies another.

The requests come from the real path: the guard escalates two large refunds
into the queue; after the reviewer's clicks, both calls are retried through the
guard and a grant-checking executor. The approved one refunds exactly once, the
denied one never. Debian's Chromium, driven headless by Playwright (the system browser, never a
downloaded one), against ``policyguard review`` running as its own process on
loopback. Skips, with the reason, only where no browser is installed; under CI
($CI set) a missing browser fails instead, since .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from policyguard.approvals.flow import QueueApprovals
from policyguard.approvals.queue import SQLiteApprovalQueue
from policyguard.approvals.url import open_approvals
from policyguard.checklist.schema import Checklist
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.gate.hardgate import HardGate
from policyguard.guard.core import Guard
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .conftest import TOKEN

POLICY = "A refund above 500 needs a supervisor's approval. Every refund names its order.\n"
CHECKLIST = Checklist.model_validate(
    {
        "policy": {"name": "refunds", "version": policy_version(POLICY)},
        "tools": {
            "issue_refund": {
                "effect": {"transaction_arg": "order_id", "ceiling": 5000, "approval_threshold": 500},
                "requirements": [
                    {"id": "refund.names_order", "text": "The refund names its order.", "kind": "data",
                     "source": "Every refund names its order.", "check": 'args.order_id != ""'},
                ],
            }
        },
    }
)  # fmt: skip


def _refund(call_id: str, order: str, amount: float) -> ToolCall:
    arguments = {"order_id": order, "amount": amount, "idempotency_key": f"refund:{order}"}
    return ToolCall(id=call_id, name="issue_refund", arguments=arguments)


def _dialogue(call: ToolCall) -> Trajectory:
    return Trajectory(
        messages=[Message(role="user", content=f"Please refund order {call.arguments['order_id']}."),
                  Message(role="assistant", tool_calls=[call])]
    )  # fmt: skip


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("POLICYGUARD_TEST_ARTIFACTS", "test-artifacts"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -c constraints.txt -e '.[review]' or '.[dev]')"
    if not os.path.exists(CHROMIUM):
        return "no Chromium at /usr/bin/chromium (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser_ready() -> None:
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test: {missing}")
        pytest.skip(missing)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def console(tmp_path: Path, browser_ready: None) -> Iterator[tuple[str, str]]:
    store = f"sqlite:///{tmp_path / 'guard.db'}"
    open_approvals(store).close()  # tables exist before the console opens the file
    port = _free_port()
    env = dict(os.environ, POLICYGUARD_REVIEW_TOKEN=TOKEN, LITELLM_LOCAL_MODEL_COST_MAP="True")
    process = subprocess.Popen(
        [sys.executable, "-m", "policyguard", "review", "--store", store, "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = process.stdout.read().decode() if process.stdout else ""
                    pytest.fail(f"policyguard review did not start: {output}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", store
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_a_reviewer_approves_one_request_and_denies_another_in_the_browser(
    console: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    base, url = console
    store = SQLiteStore(url.removeprefix("sqlite:///"))
    queue = SQLiteApprovalQueue(store)
    private_pem, public_pem = generate_keypair()
    guard = Guard(CHECKLIST, POLICY, gate=HardGate(CHECKLIST), principal="agent-1", grants=GrantIssuer(private_pem),
                  denials=store, approvals=queue)  # fmt: skip
    executed: list[dict[str, object]] = []
    executor = GuardedExecutor(
        {"issue_refund": lambda **arguments: executed.append(arguments) or {"status": "issued"}},
        verifier=GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: CHECKLIST.policy.version),
        ledger=store, checklist=CHECKLIST, approvals=QueueApprovals(queue, CHECKLIST),
    )  # fmt: skip
    for order in ("O1", "O2"):
        store.set_captured(order, 5000)

    first, second = _refund("c1", "O1", 800), _refund("c2", "O2", 2500)
    waiting = [guard.check(call, _dialogue(call)) for call in (first, second)]
    assert all(d.awaiting_approval for d in waiting), waiting
    approve_id, deny_id = (d.approval_id for d in waiting)
    assert approve_id and deny_id

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{base}/queue")
            assert page.url.endswith("/login")
            page.fill("input[name=reviewer]", "Dana")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/queue")
            rows = page.locator("#pending tbody tr")
            assert rows.count() == 2
            assert approve_id in rows.nth(0).inner_text()  # oldest first
            assert "amount = 800" in rows.nth(0).inner_text()

            page.click(f"a[href='/requests/{approve_id}']")
            page.wait_for_url(f"{base}/requests/{approve_id}")
            assert "NOT_MET" in page.inner_text("#requirements")
            page.screenshot(path=str(ARTIFACTS / "review-detail.png"), full_page=True)
            page.fill("#approve-form input[name=reason]", "customer verified by phone")
            page.click("#approve-form button")
            page.wait_for_url(f"{base}/requests/{approve_id}")
            assert page.inner_text("#status") == "approved"

            page.goto(f"{base}/requests/{deny_id}")
            page.fill("#deny-form input[name=reason]", "above the exception limit")
            page.click("#deny-form button")
            page.wait_for_url(f"{base}/requests/{deny_id}")
            assert page.inner_text("#status") == "denied"

            page.goto(f"{base}/queue")
            assert "Nothing is waiting." in page.inner_text("main")
        finally:
            browser.close()

    # The agent retries both calls unchanged, through the guard and the executor, twice each.
    for attempt in ("r1", "r2"):
        for call in (first, second):
            retry = ToolCall(id=f"{call.id}-{attempt}", name=call.name, arguments=call.arguments)
            decision = guard.check(retry, _dialogue(retry))
            if decision.allowed:
                executor.execute(retry, decision.grant, principal="agent-1", resource=None)
    assert executed == [{"order_id": "O1", "amount": 800, "idempotency_key": "refund:O1"}]
    approved, denied = queue.get(approve_id), queue.get(deny_id)
    assert approved is not None and denied is not None
    assert (approved.status, approved.reviewer, approved.reason) == ("used", "Dana", "customer verified by phone")
    assert (denied.status, denied.reason) == ("denied", "above the exception limit")
    store.close()
    assert (ARTIFACTS / "review-detail.png").stat().st_size > 10_000
