"""``policyguard hook claude-code --server URL``: the command hook as a thin client of a running ``serve``.

What it promises:

* the answer is the server's, decided with the server's checklist and session record;
* the process imports no pydantic, PyYAML, CEL engine or guard: the standard library's HTTP client only;
* everything that is not a 200 with a JSON object - a server that is down, a status, a body that is
  not JSON, a timeout - is exit 2 with one line on stderr (Claude Code blocks the call); never exit 1;
* ``--server`` with ``--policy``/``--checklist``, or neither, is exit 2 naming the fix.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.claude_code.shapes import Transcript, post, pre, use

from .conftest import CHECKLIST, POLICY, ROOT, Replica
from .test_hooks_claude_code import READS, TRANSACTION


def hook(
    event: Any, *flags: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    data = event if isinstance(event, str) else json.dumps(event)
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-m", "policyguard", "hook", "claude-code", *flags]
    return subprocess.run(command, input=data, capture_output=True, text=True, env=full, timeout=timeout, check=False)


def decision(done: subprocess.CompletedProcess[str]) -> str | None:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout).get("hookSpecificOutput", {}).get("permissionDecision")


@pytest.fixture
def transcripts(tmp_path: Path) -> Path:
    folder = tmp_path / "projects"
    folder.mkdir()
    return folder


@pytest.fixture
def server(replicas: Callable[..., Replica], transcripts: Path, tmp_path: Path) -> Replica:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    args = ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--store", store]
    return replicas("hooks", args, env={"POLICYGUARD_HOOK_TRANSCRIPTS": str(transcripts)})


def test_the_thin_client_answers_with_the_servers_decisions_and_record(server: Replica, transcripts: Path) -> None:
    t = Transcript(transcripts / "session.jsonl")
    t.user(f"Please refund 120 USD for {TRANSACTION}, the item arrived damaged.")
    url = ["--server", server.url.replace("0.0.0.0", "127.0.0.1")]
    for call_id, name, args, result in READS:
        t.assistant(use(call_id, name, **args))
        assert decision(hook(pre(t, call_id, name, **args), *url)) is None
        t.result(call_id, result)
        recorded = hook(post(t, call_id, name, json.dumps(result), **args), *url)
        assert (recorded.returncode, json.loads(recorded.stdout)) == (0, {})
    refund = {"transaction_id": TRANSACTION, "currency": "USD", "idempotency_key": f"refund:{TRANSACTION}"}
    t.assistant(use("toolu_w1", "issue_refund", amount=500, **refund))
    assert decision(hook(pre(t, "toolu_w1", "issue_refund", amount=500, **refund), *url)) == "deny"
    t.assistant(use("toolu_w2", "issue_refund", amount=120, **refund))
    assert decision(hook(pre(t, "toolu_w2", "issue_refund", amount=120, **refund), *url)) is None


def test_the_thin_client_imports_no_guard_and_no_pydantic(tmp_path: Path) -> None:
    code = (
        "import sys, io\n"
        "from policyguard.cli import main\n"
        "sys.stdin = io.TextIOWrapper(io.BytesIO(b'{}'))\n"
        "code = main(['hook', 'claude-code', '--server', 'http://127.0.0.1:9', '--timeout', '2'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'cel', 'litellm')"
        " or m.startswith(('policyguard.guard', 'policyguard.gate', 'policyguard.integrations')))\n"
        "print(code, heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the class's status and body, after its delay, and keeps what it saw."""

    status = 200
    body = b"{}"
    delay = 0.0
    seen: list[tuple[str, str | None, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append((self.path, self.headers.get("Authorization"), self.rfile.read(length)))
        if self.delay:
            threading.Event().wait(self.delay)
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


class Canned:
    """A stand-in server on loopback: its URL and the requests it saw."""

    def __init__(self, url: str, handler: type[_Canned]) -> None:
        self.url, self.handler = url, handler

    def __str__(self) -> str:
        return self.url


@pytest.fixture
def canned() -> Iterator[Callable[..., Canned]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int = 200, body: bytes = b"{}", delay: float = 0.0) -> Canned:
        handler = type("Handler", (_Canned,), {"status": status, "body": body, "delay": delay, "seen": []})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        servers.append(httpd)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return Canned(f"http://127.0.0.1:{httpd.server_address[1]}", handler)

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_it_posts_the_event_as_it_came_with_the_servers_bearer_token(canned: Callable[..., Canned]) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    server = canned(body=json.dumps(answer).encode())
    event = json.dumps({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "issue_refund"})
    done = hook(event, "--server", server.url + "/base/", env={"POLICYGUARD_SERVE_TOKEN": "s3cret"})
    assert (done.returncode, json.loads(done.stdout)) == (0, answer)
    assert server.handler.seen == [("/base/v1/hooks/claude-code", "Bearer s3cret", event.encode())]


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (500, b'{"error": "boom"}', "answered HTTP 500"),
        (401, b"{}", "answered HTTP 401"),
        (200, b"<html>proxy</html>", "not JSON"),
        (200, b"[]", "not a JSON object"),
    ],
    ids=["server-error", "status", "not-json", "not-an-object"],
)
def test_any_answer_but_a_json_object_blocks_with_exit_2(
    canned: Callable[..., Canned], status: int, body: bytes, says: str
) -> None:
    done = hook("{}", "--server", canned(status=status, body=body).url)
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


def test_a_server_that_is_down_blocks_with_exit_2() -> None:
    done = hook("{}", "--server", f"http://127.0.0.1:{_closed_port()}")
    assert done.returncode == 2
    assert "did not answer" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_server_slower_than_the_timeout_blocks_with_exit_2(canned: Callable[..., Canned]) -> None:
    done = hook("{}", "--server", canned(delay=5.0).url, "--timeout", "1")
    assert done.returncode == 2
    assert "policyguard: blocked:" in done.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--server", "http://127.0.0.1:9", "--policy", str(POLICY), "--checklist", str(CHECKLIST)], "drop --policy"),
        ([], "give --policy and --checklist, or --server URL"),
        (["--server", "ftp://example.org"], "must be an http:// or https:// URL"),
        (["--server", "http://127.0.0.1:9", "--allow", "--mcp-name", "desk=keep"], "drop --allow, --mcp-name"),
    ],
    ids=["server-and-files", "neither", "not-http", "local-settings"],
)
def test_a_wrong_combination_of_flags_blocks_naming_the_fix(flags: list[str], says: str) -> None:
    done = hook("{}", *flags)
    assert done.returncode == 2
    assert says in done.stderr
