"""The refund sandbox served over HTTP: dialogues that the gate allows, in-process apps and real processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from policyguard.enforcement.grants import generate_keypair  # noqa: E402
from policyguard.serve import ServeConfig, build_service, create_app  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REFUND = ROOT / "benchmarks" / "refund"
POLICY = REFUND / "policy.md"
CHECKLIST = REFUND / "checklist.yaml"
START_TIMEOUT_S = 60.0


def tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI Chat tool call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def refund_dialogue(transaction: str, *, captured: float = 200, allowed: bool = True) -> list[dict[str, Any]]:
    """The reads the refund checklist needs before issue_refund, answered by the sandbox (OpenAI Chat)."""
    return [
        {"role": "user", "content": f"Please refund 120 USD for {transaction}, the item arrived damaged."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                tool_call("r1", "get_refund_policy", {"transaction_id": transaction}),
                tool_call("r2", "get_transaction", {"transaction_id": transaction}),
                tool_call("r3", "get_approval", {"approval_id": ""}),
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "r1",
            "content": json.dumps({"transaction_id": transaction, "refund_allowed": allowed}),
        },
        {
            "role": "tool",
            "tool_call_id": "r2",
            "content": json.dumps({"transaction_id": transaction, "captured": captured, "currency": "USD"}),
        },
        {"role": "tool", "tool_call_id": "r3", "content": json.dumps({"approval_id": "", "status": "none"})},
    ]


def refund_call(call_id: str, transaction: str, amount: float = 120) -> dict[str, Any]:
    args = {
        "transaction_id": transaction,
        "amount": amount,
        "currency": "USD",
        "idempotency_key": f"refund:{transaction}",
    }
    return tool_call(call_id, "issue_refund", args)


def check_body(transaction: str, call_id: str = "c1", **extra: Any) -> dict[str, Any]:
    return {"trajectory": refund_dialogue(transaction), "call": refund_call(call_id, transaction), **extra}


@pytest.fixture
def grant_key(tmp_path: Path) -> Path:
    private, _ = generate_keypair()
    path = tmp_path / "grant.pem"
    path.write_bytes(private)
    return path


@pytest.fixture
def make_client(tmp_path: Path, grant_key: Path) -> Iterator[Callable[..., Any]]:
    """An in-process app over the refund sandbox; keyword arguments override ServeConfig fields."""
    from starlette.testclient import TestClient

    clients: list[Any] = []

    def make(**overrides: Any) -> Any:
        settings: dict[str, Any] = {
            "policy": POLICY,
            "checklist": CHECKLIST,
            "grant_key": grant_key,
            "store": f"sqlite:///{tmp_path / 'store.db'}",
            "trace": tmp_path / "trace.jsonl",
            "replica": "test",
        }
        settings.update(overrides)
        service = build_service(ServeConfig(**settings))
        client = TestClient(create_app(service), base_url="http://127.0.0.1:8700", raise_server_exceptions=False)
        client.service = service  # type: ignore[attr-defined]
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
        client.service.trace.close()


def store_urls() -> list[Any]:
    """The shared stores the replica tests run on: a SQLite file, and PostgreSQL (the suite's server)."""
    return [pytest.param("sqlite", id="sqlite"), pytest.param("postgresql", id="postgresql")]


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a fresh schema on the session's PostgreSQL server (tests/conftest.py: pg_url)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return str(request.getfixturevalue("pg_url"))


@dataclass
class Replica:
    """One `python -m policyguard serve` process on a free port."""

    name: str
    process: subprocess.Popen[str]
    url: str
    output: list[str] = field(default_factory=list)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _limit_open_files(count: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def _pump(stream: Any, lines: queue.Queue[str | None], keep: list[str]) -> None:
    for line in stream:
        keep.append(line)
        lines.put(line)
    lines.put(None)


def start_replica(
    name: str,
    args: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    open_files: int | None = None,
) -> Replica:
    """Start a replica and wait (bounded) until it says where it listens and answers /healthz.

    ``open_files`` sets the process's open-file limit (soft and hard), as ``ulimit -n`` would.
    """
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH", "")) if p)
    full_env.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "policyguard",
            "serve",
            "--port",
            "0",
            "--replica",
            name,
            "--log-level",
            "warning",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
        preexec_fn=None if open_files is None else lambda: _limit_open_files(open_files),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    kept: list[str] = []
    threading.Thread(target=_pump, args=(process.stdout, lines, kept), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    url = None
    while url is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            process.kill()
            process.wait(timeout=10)
            raise AssertionError(f"replica {name} did not start in {START_TIMEOUT_S:.0f} s: {''.join(kept)}")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            process.wait(timeout=10)
            raise AssertionError(f"replica {name} exited ({process.returncode}): {''.join(kept)}")
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].split()[0]
    replica = Replica(name, process, url, kept)
    probe = url.replace("0.0.0.0", "127.0.0.1")
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{probe}/healthz", timeout=2).status_code == 200:
                return replica
        except httpx.HTTPError:
            time.sleep(0.05)
    replica.stop()
    raise AssertionError(f"replica {name} never answered /healthz")


@pytest.fixture
def replicas() -> Iterator[Callable[..., Replica]]:
    """Start replicas with `start(name, args)`; every one is stopped at the end of the test."""
    started: list[Replica] = []

    def start(
        name: str, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, **options: Any
    ) -> Replica:
        replica = start_replica(name, args, env, cwd, **options)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


def unique(prefix: str = "T") -> str:
    """A transaction id no other test (or earlier run on a shared database) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
