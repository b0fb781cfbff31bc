"""`policyguard review` refuses to start in a way that would expose the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policyguard.cli import main

from .conftest import TOKEN


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_no_token_no_console(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.delenv("POLICYGUARD_REVIEW_TOKEN", raising=False)
    code, err = _run(["review", "--store", "sqlite:///:memory:"], capsys)
    assert code == 2 and "POLICYGUARD_REVIEW_TOKEN" in err and err.count("\n") == 1


def test_a_short_token_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", "hunter2")
    code, err = _run(["review", "--store", "sqlite:///:memory:"], capsys)
    assert code == 2 and "at least 16" in err


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.org", "::"])
def test_a_non_loopback_address_needs_allow_remote(
    host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    code, err = _run(["review", "--store", "sqlite:///:memory:", "--host", host], capsys)
    assert code == 2 and "--allow-remote" in err


def test_a_missing_trace_file_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    code, err = _run(["review", "--store", "sqlite:///:memory:", "--trace", "/nonexistent/run.jsonl"], capsys)
    assert code == 2 and "/nonexistent/run.jsonl" in err


def test_a_missing_trace_file_says_what_writes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's `--trace runs/guard.jsonl` names a file a guard writes; a newcomer is told so, not just 'no file'."""
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    code, err = _run(["review", "--store", "sqlite:///:memory:", "--trace", "runs/none.jsonl"], capsys)
    [line] = err.strip().splitlines()
    assert code == 2 and "runs/none.jsonl" in line and "a guard writes it" in line and "without --trace" in line


def test_a_mistyped_store_path_is_refused_and_not_created(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: None)  # were the store opened, nothing would listen
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    missing = tmp_path / "gaurd.db"
    code, err = _run(["review", "--store", f"sqlite:///{missing}", "--port", "0"], capsys)
    assert code == 2 and "no such store" in err and str(missing) in err
    assert not missing.exists()


def test_a_bad_store_url_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    code, err = _run(["review", "--store", "mysql://db/queue", "--port", "0"], capsys)
    assert code == 2 and "unknown scheme 'mysql'" in err and err.count("\n") == 1


def _served_app(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The app `policyguard review argv` would serve (uvicorn.run is replaced; nothing listens)."""
    uvicorn = pytest.importorskip("uvicorn")
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    monkeypatch.setenv("POLICYGUARD_REVIEW_TOKEN", TOKEN)
    assert main(["review", "--store", "sqlite:///:memory:", "--port", "0", *argv]) == 0
    return served[0]


def _login_cookie(app: Any) -> str:
    from starlette.testclient import TestClient

    with TestClient(app, base_url="https://127.0.0.1") as client:
        response = client.post("/login", data={"reviewer": "Dana", "token": TOKEN}, follow_redirects=False)
    assert response.status_code == 303
    return response.headers["set-cookie"].lower()


@pytest.mark.parametrize(
    ("argv", "secure"),
    [
        ([], False),
        (["--secure-cookie"], True),
        (["--host", "0.0.0.0", "--allow-remote"], True),
        (["--host", "0.0.0.0", "--allow-remote", "--no-secure-cookie"], False),
    ],
)
def test_the_session_cookie_is_secure_whenever_the_console_may_be_reached_remotely(
    argv: list[str], secure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--allow-remote means TLS in front, so the cookie gets Secure unless --no-secure-cookie says otherwise."""
    cookie = _login_cookie(_served_app(argv, monkeypatch))
    assert ("; secure" in cookie) is secure, cookie
