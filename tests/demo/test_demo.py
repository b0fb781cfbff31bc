"""``policyguard demo``: a newcomer's first command, run as they would run it (a subprocess, core install only)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from policyguard.checklist.schema import load_checklist
from policyguard.resources import demo_file, shipped_checklist
from policyguard.trajectory.canonical import policy_version

ROOT = Path(__file__).resolve().parents[2]
APPROVAL_ID = re.compile(r"apr-[0-9a-f]+")

# The top-level modules of every extra: the core install has none of them.
EXTRAS = (
    "litellm", "openai", "anthropic", "tau2", "starlette", "uvicorn", "httpx", "mcp", "langchain",
    "langchain_core", "agents", "psycopg", "psycopg_pool", "nacl", "playwright",
)  # fmt: skip
HEAVY = ("litellm", "openai", "anthropic", "tau2", "starlette")

BLOCKER = """\
import importlib.abc, os, sys

BLOCKED = set(os.environ["DEMO_BLOCKED"].split(","))


class _CoreInstallOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            with open(os.environ["DEMO_BLOCK_LOG"], "a") as log:
                log.write(name + "\\n")
            raise ImportError(f"{name} is not installed (core install only)")
        return None


sys.meta_path.insert(0, _CoreInstallOnly())
"""


def _run(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "policyguard", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("demo") / "out"
    return out, _run("demo", "--out", str(out), cwd=out.parent)


def test_demo_allows_blocks_and_escalates(demo: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, done = demo
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "ALLOWED (stage: verifier)" in text
    assert "BLOCKED (stage: gate)" in text
    assert "ESCALATED (stage: approver)" in text
    assert "All three outcomes came out as expected" in text
    for task in ("task 19", "task 0", "task 42"):
        assert f"tau2 airline task {task.split()[1]}:" in text


def test_the_block_shows_its_requirement_policy_sentence_and_remediation(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    text = " ".join(demo[1].stdout.split())  # undo the wrapping
    assert "failed cancel-eligible: A reservation can be cancelled only if it was booked within the last 24" in text
    assert 'policy "Otherwise, flight can be cancelled if any of the following is true"' in text
    assert "agent gets This action is blocked: it does not meet requirement cancel-eligible, which says" in text
    assert 'to a human agent)." Explain this to the user and do not retry the same call.' in text


def test_the_escalation_names_the_company_rule_and_its_approval_id(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    text = " ".join(demo[1].stdout.split())
    assert "YOUR COMPANY'S EXTRA RULE" in text
    assert "company-refund-approval (your company's extra rule, approvable)" in text
    assert "Company rule (not in the tau2 airline policy)" in text
    [approval] = set(APPROVAL_ID.findall(text))
    assert f"waiting in the approval queue for a person: {approval}" in text


def test_the_verifier_is_labelled_scripted_and_no_model_is_claimed(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    text = " ".join(demo[1].stdout.split())
    assert "SCRIPTED" in text and "No model is called; no model judged anything here." in text
    assert "the scripted verifier judged" in text
    assert "model judged" not in text.replace("no model judged", "")


def test_the_trace_is_written_and_its_audit_is_clean(demo: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, done = demo
    trace = out / "trace.jsonl"
    assert trace.is_file()
    assert f"{trace}: " in done.stdout and "1 executes, 1 effects, 0 violations" in done.stdout
    audit = _run("audit", str(trace), cwd=out)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_the_printed_approvals_command_lists_the_waiting_call(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = demo
    command = next(line.split() for line in done.stdout.splitlines() if "approvals list --store" in line)
    assert command[:4] == ["policyguard", "approvals", "list", "--store"]
    assert command[4] == f"sqlite:///{out}/approvals.db"
    listed = _run(*command[1:], "--json", cwd=out.parent)
    assert listed.returncode == 0, listed.stderr
    [request] = json.loads(listed.stdout)
    assert request["id"] == APPROVAL_ID.search(done.stdout).group(0)  # type: ignore[union-attr]
    assert request["tool"] == "cancel_reservation" and request["arguments"] == {"reservation_id": "FDZ0T5"}
    assert request["principal"] == "sophia_martin_4574"


def test_json_summary(tmp_path: Path) -> None:
    done = _run("demo", "--out", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["audit_ok"] is True
    assert [(c["conversation"], c["outcome"], c["as_expected"]) for c in report["calls"]] == [
        ("allowed", "allow", True),
        ("blocked", "block", True),
        ("escalated", "escalate", True),
    ]
    allowed, blocked, escalated = report["calls"]
    assert allowed["executed"] is True and allowed["result"]["status"] == "cancelled"
    assert [f["id"] for f in blocked["failed"]] == ["cancel-eligible"]
    assert blocked["message"].startswith("This action is blocked: it does not meet requirement cancel-eligible")
    assert APPROVAL_ID.fullmatch(escalated["approval_id"])
    assert [(f["id"], f["approvable"], f["company_rule"]) for f in escalated["failed"]] == [
        ("company-refund-approval", True, True)
    ]
    assert report["audit"]["executes"] == 1 and report["audit"]["violations"] == []
    assert report["store_url"] == f"sqlite:///{tmp_path / 'out' / 'approvals.db'}"


def test_runs_with_the_core_install_only(tmp_path: Path) -> None:
    """No extra is importable (a meta-path finder refuses them all), and the demo still exits 0."""
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "tried.txt"
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocker"), str(ROOT)]),
        "DEMO_BLOCKED": ",".join(EXTRAS),
        "DEMO_BLOCK_LOG": str(log),
    }
    probe = subprocess.run(
        [sys.executable, "-c", "import openai"], capture_output=True, text=True, env={**os.environ, **env}
    )
    assert probe.returncode != 0 and "core install only" in probe.stderr  # the blocker is active
    log.unlink()
    done = _run("demo", "--out", str(tmp_path / "out"), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All three outcomes came out as expected" in done.stdout
    tried = set(log.read_text().split()) if log.exists() else set()
    assert not {name.split(".")[0] for name in tried} & set(HEAVY), tried


def test_a_folder_the_demo_did_not_write_is_refused_with_one_line(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    done = _run("demo", "--out", str(mine), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"policyguard: error: --out {mine}: exists and is not an earlier demo output (no .policyguard-demo in it); "
        "choose another"
    ]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    done = _run("demo", "--out", str(a_file), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "not a folder" in done.stderr


def test_a_second_run_replaces_only_the_demos_own_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _run("demo", "--out", str(out), cwd=tmp_path).returncode == 0
    (out / "notes.txt").write_text("keep me")
    again = _run("demo", "--out", str(out), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (out / "notes.txt").read_text() == "keep me"
    listed = _run("approvals", "list", "--store", f"sqlite:///{out}/approvals.db", "--json", cwd=tmp_path)
    assert [r["id"] for r in json.loads(listed.stdout)] == [json.loads(again.stdout)["calls"][2]["approval_id"]]


def test_default_out_is_policyguard_demo_in_the_working_folder(tmp_path: Path) -> None:
    done = _run("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "policyguard-demo" / "trace.jsonl").is_file()
    assert "policyguard approvals list --store sqlite:///policyguard-demo/approvals.db" in done.stdout
    # the next step installs from the checkout, pinned as CI is, and names no unpublished package
    assert "  pip install -c constraints.txt -e '.[tau2]' && policyguard bench replay --domain airline" in done.stdout


def test_the_demo_policy_is_the_version_the_airline_checklist_pins() -> None:
    pinned = load_checklist(shipped_checklist("airline")).policy.version
    assert policy_version(demo_file("policy.md").read_text(encoding="utf-8")) == pinned


def test_the_demo_data_cites_tau2_and_ships_its_notice() -> None:
    data = json.loads(demo_file("airline.json").read_text(encoding="utf-8"))
    assert [c["task_id"] for c in data["conversations"]] == ["19", "0", "42"]
    notice = demo_file("NOTICE").read_text(encoding="utf-8")
    assert "Copyright (c) 2025 Sierra Research" in notice and "MIT License" in notice
