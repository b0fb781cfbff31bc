"""p50 of the ``policyguard hook claude-code`` process on a read and on a write (issue 34 target: <= 200 ms).

Each sample is one whole process, as Claude Code runs it: interpreter start, the
CLI, loading the refund desk's policy and checklist, opening the project's SQLite
session store, reading a transcript, deciding, and printing the answer. The write
is judged after the reads it needs (find_customer, get_order), recorded through
PostToolUse. Run from the checkout::

    python benchmarks/bench_claude_code_hook.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import refund_desk as desk  # noqa: E402
from tests.integrations.claude_code.shapes import Transcript, post, pre, use  # noqa: E402


def hook(event: dict[str, object], project: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLAUDE_PROJECT_DIR": str(project)}
    command = [sys.executable, "-m", "policyguard", "hook", "claude-code", "--policy", str(desk.POLICY),
               "--checklist", str(desk.CHECKLIST)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, input=json.dumps(event), capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the hook exited {done.returncode}: {done.stderr}")
    return elapsed, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        t = Transcript(project / "session.jsonl")
        t.user("I'm ada@example.com. Please refund order O1, 80 dollars. Yes, go ahead with 80.")
        for call_id, name, result, call_args in [
            ("toolu_01", "find_customer", desk.CUSTOMERS["ada@example.com"], {"email": "ada@example.com"}),
            ("toolu_02", "get_order", desk.ORDERS["O1"], {"order_id": "O1"}),
        ]:
            t.assistant(use(call_id, name, **call_args))
            hook(pre(t, call_id, name, **call_args), project)
            t.result(call_id, result)
            hook(post(t, call_id, name, json.dumps(result), **call_args), project)
        reads, writes = [], []
        for i in range(args.runs):
            elapsed, _ = hook(pre(t, f"toolu_read{i}", "get_order", order_id="O1"), project)
            reads.append(elapsed)
            elapsed, answer = hook(pre(t, f"toolu_write{i}", "issue_refund", order_id="O1", amount=500), project)
            assert "deny" in answer, answer
            writes.append(elapsed)
    for name, samples in (("read (get_order, passes)", reads), ("write (issue_refund, denied)", writes)):
        print(f"{name}: p50 {statistics.median(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms, "
              f"{len(samples)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
