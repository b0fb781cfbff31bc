"""The review console in a real browser: a reviewer logs in, approves one request and denies another.

Debian's Chromium, driven headless by Playwright (the system browser, never a
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

from policyguard.storeurl import open_approvals

from .conftest import TOKEN, make_request

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("POLICYGUARD_TEST_ARTIFACTS", "test-artifacts"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[review]' or '.[dev]')"
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

    base, store = console
    queue = open_approvals(store)
    big = queue.submit(make_request(900.0, order="ORD-1", created_at=time.time() - 600))
    other = queue.submit(make_request(2500.0, order="ORD-2"))
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
            assert big.id in rows.nth(0).inner_text()  # oldest first

            page.click(f"a[href='/requests/{big.id}']")
            page.wait_for_url(f"{base}/requests/{big.id}")
            assert "NOT_MET" in page.inner_text("#requirements")
            page.screenshot(path=str(ARTIFACTS / "review-detail.png"), full_page=True)
            page.fill("#approve-form input[name=reason]", "customer verified by phone")
            page.click("#approve-form button")
            page.wait_for_url(f"{base}/requests/{big.id}")
            assert page.inner_text("#status") == "approved"

            page.goto(f"{base}/requests/{other.id}")
            page.fill("#deny-form input[name=reason]", "above the exception limit")
            page.click("#deny-form button")
            page.wait_for_url(f"{base}/requests/{other.id}")
            assert page.inner_text("#status") == "denied"

            page.goto(f"{base}/queue")
            assert "Nothing is waiting." in page.inner_text("main")
        finally:
            browser.close()
    approved, denied = queue.get(big.id), queue.get(other.id)
    assert approved is not None and denied is not None
    assert (approved.status, approved.reviewer, approved.reason) == ("approved", "Dana", "customer verified by phone")
    assert (denied.status, denied.reason) == ("denied", "above the exception limit")
    queue.close()
    assert (ARTIFACTS / "review-detail.png").stat().st_size > 10_000
