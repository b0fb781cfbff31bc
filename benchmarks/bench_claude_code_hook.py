"""p50 of the ``policyguard hook claude-code`` process on a read and on a write (target: <= 200 ms).

Each sample is one whole process, as Claude Code runs it: interpreter start, the
CLI, loading the refund desk's policy and checklist, opening the project's SQLite
session store, reading a transcript, deciding, and printing the answer. The write
is judged after the reads it needs (find_customer, get_order), recorded through
PostToolUse, and is denied by the gate's CEL check (within-captured). For scale
it also times, as fresh processes, the interpreter's own start (``python -c
pass``), ``import pydantic``, and what any gate-only process must load before
the library's own code runs: pydantic with one model, PyYAML and the CEL engine.
With ``--history N`` it also times the read and the write in a second session that N earlier reads
(each with its result, recorded as the hook records them) have made long: the in-process hook reads
the whole transcript and replays the whole session record on every call, so this is what a long
session costs it (with ``--server`` as well, the long session is recorded through the server and the thin
client is timed in it too). With ``--server`` it also times the thin client (``hook claude-code --server URL``), which
forwards each event to a ``policyguard serve`` started here on loopback with the same policy
and checklist (its session record in SQLite): the process then imports no guard at all.
Run from the checkout::

    python benchmarks/bench_claude_code_hook.py [--runs 20] [--server] [--history 1000]

Bytecode is compiled once into a scratch folder (even where PYTHONDONTWRITEBYTECODE
is set), as an installed package has it; the reads recorded first warm it up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import refund_desk as desk  # noqa: E402
from policyguard.cli.cmd_hook import SESSIONS_DB  # noqa: E402
from tests.integrations.claude_code.shapes import Transcript, post, pre, use  # noqa: E402

FLOOR = (
    "import yaml\nfrom pydantic import BaseModel, Field\nclass M(BaseModel):\n    x: int = Field(0)\nM(x=1)\n"
    "from policyguard.gate.cel import engine\nengine()"
)


Sample = tuple[float, float, str]  # wall seconds, CPU seconds of the child, its stdout


def _env(project: Path, pycache: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLAUDE_PROJECT_DIR": str(project)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _timed(command: Sequence[str], env: dict[str, str], stdin: str = "") -> tuple[float, float, str]:
    """(wall s, CPU s of the child, stdout) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[1:3]} exited {done.returncode}: {done.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu, done.stdout.strip()


def hook(event: dict[str, object], env: dict[str, str], server: str | None = None) -> tuple[float, float, str]:
    files = ["--server", server] if server else ["--policy", str(desk.POLICY), "--checklist", str(desk.CHECKLIST)]
    command = [sys.executable, "-m", "policyguard", "hook", "claude-code", *files]
    return _timed(command, env, json.dumps(event))


def _record_reads(t: Transcript, env: dict[str, str], server: str | None = None) -> None:
    """The reads the write needs, as Claude Code runs them: PreToolUse, the result, PostToolUse."""
    for call_id, name, result, call_args in [
        ("toolu_01", "find_customer", desk.CUSTOMERS["ada@example.com"], {"email": "ada@example.com"}),
        ("toolu_02", "get_order", desk.ORDERS["O1"], {"order_id": "O1"}),
    ]:
        t.assistant(use(call_id, name, **call_args))
        hook(pre(t, call_id, name, **call_args), env, server)
        t.result(call_id, result)
        hook(post(t, call_id, name, json.dumps(result), **call_args), env, server)


def _serve(folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A gate-only ``policyguard serve`` on a free loopback port, reading transcripts under ``folder``."""
    command = [sys.executable, "-m", "policyguard", "serve", "--port", "0", "--log-level", "warning",
               "--policy", str(desk.POLICY), "--checklist", str(desk.CHECKLIST),
               "--store", f"sqlite:///{folder / 'server-sessions.db'}"]  # fmt: skip
    server_env = {**env, "POLICYGUARD_HOOK_TRANSCRIPTS": str(folder)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=server_env)
    assert process.stdout is not None
    for line in process.stdout:
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].split()[0].replace("0.0.0.0", "127.0.0.1")
            threading.Thread(target=process.stdout.read, daemon=True).start()  # never let its output fill the pipe
            return process, url
    raise SystemExit(f"serve exited ({process.wait()}) before listening")


def _thin_client(folder: Path, env: dict[str, str], runs: int, history: int) -> list[list[Sample]]:
    """The same read and write through ``--server``, in a session of their own on the server's record; with
    ``history``, also in a session that many earlier reads, posted to the server, made long."""
    from policyguard.cli.hookclient import forward

    process, url = _serve(folder, env)
    try:
        t = Transcript(folder / "project" / "thin.jsonl", session="thin-client-session")
        t.user("I'm ada@example.com. Please refund order O1, 80 dollars. Yes, go ahead with 80.")
        _record_reads(t, env, url)
        timed = _timed_in(t, env, runs, url)
        if history:
            long = _long_session(folder / "project" / "thin-long.jsonl", "thin-long-session", history,
                                 lambda event: forward(url, json.dumps(event).encode(), 60.0))  # fmt: skip
            timed += _timed_in(long, env, runs, url)
        return timed
    finally:
        process.terminate()
        process.wait(timeout=10)


def _long_session(path: Path, session: str, earlier: int, send: Callable[[dict[str, Any]], object]) -> Transcript:
    """A session of ``earlier`` reads with their results, then the reads the write needs, at ``path``.

    Each read is sent as Claude Code sends it (PreToolUse, the result in the transcript, PostToolUse), through
    ``send``, which answers in this process: spawning a process for each would take minutes."""
    t = Transcript(path, session=session)
    t.user("I'm ada@example.com. Please refund order O1, 80 dollars. Yes, go ahead with 80.")
    customer, order = desk.CUSTOMERS["ada@example.com"], desk.ORDERS["O1"]
    reads: list[tuple[str, str, Any, dict[str, str]]] = [
        (f"toolu_old{i}", "find_customer", customer, {"email": "ada@example.com"}) for i in range(earlier)
    ]
    reads += [("toolu_01", "find_customer", customer, {"email": "ada@example.com"}),
              ("toolu_02", "get_order", order, {"order_id": "O1"})]  # fmt: skip
    for call_id, name, result, call_args in reads:
        t.assistant(use(call_id, name, **call_args))
        send(pre(t, call_id, name, **call_args))
        t.result(call_id, result)
        send(post(t, call_id, name, json.dumps(result), **call_args))
    return t


def _in_process(project: Path) -> tuple[Callable[[dict[str, Any]], object], Callable[[], None]]:
    """An in-process hook on the project's session store (where the hook's CLAUDE_PROJECT_DIR puts it): a send
    function and its closing."""
    from policyguard.enforcement.storeurl import open_store
    from policyguard.guard.build import from_files
    from policyguard.guard.core import Guard
    from policyguard.integrations.claude_code import ClaudeCodeHook, HookEvent

    (project / SESSIONS_DB).parent.mkdir(parents=True, exist_ok=True)
    store = open_store(f"sqlite:///{(project / SESSIONS_DB).absolute()}")
    guard = from_files(Guard, policy=desk.POLICY, checklist=desk.CHECKLIST, model="none", mode="enforce",
                       verifier_mode="checklist", use_gate=True, trace_path=None, sessions=store)  # fmt: skip
    recorder = ClaudeCodeHook(guard)
    return (lambda event: recorder.answer(HookEvent.read(json.dumps(event).encode()))), store.close


def _timed_in(
    t: Transcript, env: dict[str, str], runs: int, server: str | None = None, first: int = 0
) -> list[list[Sample]]:
    """``runs`` reads and writes of session ``t`` (each a fresh process), interleaved; call ids from ``first``."""
    reads, writes = [], []
    for i in range(first, first + runs):
        reads.append(hook(pre(t, f"toolu_read{i}", "find_customer", email="ada@example.com"), env, server))
        writes.append(hook(pre(t, f"toolu_write{i}", "issue_refund", order_id="O1", amount=500), env, server))
        assert "within-captured" in writes[-1][2], writes[-1][2]
    return [reads, writes]


def _row(name: str, samples: list[tuple[float, float, str]]) -> str:
    walls = [s[0] * 1000 for s in samples]
    cpus = [s[1] * 1000 for s in samples]
    return (f"{name:38s} p50 {statistics.median(walls):5.0f} ms  (min {min(walls):4.0f}, max {max(walls):4.0f}; "
            f"CPU p50 {statistics.median(cpus):4.0f} ms)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--server", action="store_true", help="also time the thin client against a local serve")
    parser.add_argument("--history", type=int, default=0, metavar="N",
                        help="also time both in a session with N earlier reads")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder) / "project"
        project.mkdir()
        env = _env(project, Path(folder) / "pycache")
        t = Transcript(project / "session.jsonl")
        t.user("I'm ada@example.com. Please refund order O1, 80 dollars. Yes, go ahead with 80.")
        _record_reads(t, env)
        python = [sys.executable, "-c"]
        _timed([*python, FLOOR], env)  # compiles the floor's bytecode too
        long = None
        if args.history:
            send, close = _in_process(project)
            long = _long_session(project / "long.jsonl", "long-session", args.history, send)
            close()
        reads, writes, bare, pydantic, floor, long_reads, long_writes = [], [], [], [], [], [], []
        for i in range(args.runs):
            (read,), (write,) = _timed_in(t, env, 1, first=i)
            reads.append(read)
            writes.append(write)
            if long is not None:
                (read,), (write,) = _timed_in(long, env, 1, first=i)
                long_reads.append(read)
                long_writes.append(write)
            bare.append(_timed([*python, "pass"], env))
            pydantic.append(_timed([*python, "import pydantic"], env))
            floor.append(_timed([*python, FLOOR], env))
        thin = _thin_client(Path(folder), env, args.runs, args.history) if args.server else []
    print(f"fresh processes, {args.runs} runs each, interleaved")
    print(_row("hook, read (find_customer, passes)", reads))
    print(_row("hook, write (issue_refund, denied)", writes))
    if long_reads:
        print(_row(f"hook, read, {args.history} earlier calls", long_reads))
        print(_row(f"hook, write, {args.history} earlier calls", long_writes))
    print(_row("python -c pass", bare))
    print(_row("python -c 'import pydantic'", pydantic))
    print(_row("pydantic + 1 model + yaml + CEL engine", floor))
    if thin:
        print(_row("thin client --server, read", thin[0]))
        print(_row("thin client --server, write (denied)", thin[1]))
    if len(thin) > 2:
        print(_row(f"thin client, read, {args.history} earlier", thin[2]))
        print(_row(f"thin client, write, {args.history} earlier", thin[3]))


if __name__ == "__main__":
    main()
