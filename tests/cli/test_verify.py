"""`policyguard verify`: exit 0 PASS, 1 BLOCK, 2 bad input; the Decision is printed as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.cli import main
from policyguard.trajectory.canonical import policy_version

POLICY = (
    "Refund only orders that belong to the authenticated user.\n"
    "A refund may never exceed what was captured.\n"
    "Obtain explicit confirmation (yes) before any refund.\n"
)

CHECKLIST = """\
policy: {{name: refunds, version: "{version}"}}
principal: {{tool: get_user_details, field: user_id}}
facts:
  order: {{tool: get_order, match: {{order_id: args.order_id}}}}
tools:
  get_user_details: {{mutating: false}}
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: refund.within_captured
        text: The refund must not exceed the amount captured for the order.
        kind: data
        source: A refund may never exceed what was captured.
        prerequisites: [get_order]
        check: args.amount <= facts.order.captured
      - id: refund.owner
        text: Only the order's owner may receive a refund.
        kind: data
        source: Refund only orders that belong to the authenticated user.
        check: facts.order.user_id == principal
      - id: refund.confirmed
        text: The user explicitly confirmed the refund.
        kind: procedural
        source: Obtain explicit confirmation (yes) before any refund.
"""


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


DIALOGUE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "I am u1. Please refund 50 on order O1."},
    {"role": "assistant", "content": None, "tool_calls": [_call("r1", "get_user_details", {"user_id": "u1"})]},
    {"role": "tool", "tool_call_id": "r1", "content": json.dumps({"user_id": "u1", "name": "Ada"})},
    {"role": "assistant", "content": None, "tool_calls": [_call("r2", "get_order", {"order_id": "O1"})]},
    {"role": "tool", "tool_call_id": "r2", "content": json.dumps({"order_id": "O1", "user_id": "u1", "captured": 80})},
    {"role": "assistant", "content": "Refund 50 USD on O1 to your card. Confirm?"},
    {"role": "user", "content": "yes"},
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    policy = tmp_path / "policy.md"
    policy.write_text(POLICY)
    checklist = tmp_path / "checklist.yaml"
    checklist.write_text(CHECKLIST.format(version=policy_version(POLICY)))
    trajectory = tmp_path / "trajectory.json"
    trajectory.write_text(json.dumps(DIALOGUE))
    return {"policy": policy, "checklist": checklist, "trajectory": trajectory, "dir": tmp_path}


def run(files: dict[str, Path], call: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any]]:
    call_path = files["dir"] / "call.json"
    call_path.write_text(json.dumps(call))
    argv = ["verify", "--policy", str(files["policy"]), "--checklist", str(files["checklist"])]
    argv += ["--trajectory", str(files["trajectory"]), "--call", str(call_path), *extra]
    return main(argv), {}


def verify(files: dict[str, Path], capsys: pytest.CaptureFixture[str], call: dict[str, Any], *extra: str):  # type: ignore[no-untyped-def]
    code, _ = run(files, call, *extra)
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else None)


def scripted(files: dict[str, Path], steps: list[Any]) -> str:
    path = files["dir"] / "model.json"
    path.write_text(json.dumps(steps))
    return f"scripted:{path}"


def verdict(statuses: dict[str, str], verdict: str, remediation: str = "") -> dict[str, Any]:
    # 5 is the order's tool result, 7 the user's yes after the agent's summary
    items = [{"id": i, "status": s, "evidence": "5, 7", "evidence_messages": [5, 7]} for i, s in statuses.items()]
    return {"response": {"requirements": items, "verdict": verdict, "remediation": remediation}}


REFUND_50 = _call("c1", "issue_refund", {"order_id": "O1", "amount": 50})
REFUND_90 = _call("c1", "issue_refund", {"order_id": "O1", "amount": 90})
ALL_MET = {"refund.within_captured": "MET", "refund.owner": "MET", "refund.confirmed": "MET"}


def test_gate_only_passes_a_compliant_call_and_lists_what_it_could_not_judge(files, capsys):  # type: ignore[no-untyped-def]
    code, decision = verify(files, capsys, REFUND_50, "--model", "none")
    assert code == 0
    assert decision["verdict"] == "PASS"
    assert decision["unverified"] == ["refund.confirmed"]


def test_gate_only_blocks_a_call_whose_check_fails(files, capsys):  # type: ignore[no-untyped-def]
    code, decision = verify(files, capsys, REFUND_90, "--model", "none")
    assert code == 1
    assert decision["stage"] == "gate"
    failed = [r["id"] for r in decision["requirements"] if r["status"] == "NOT_MET"]
    assert failed == ["refund.within_captured"]


def test_scripted_verifier_pass(files, capsys):  # type: ignore[no-untyped-def]
    model = scripted(files, [verdict(ALL_MET, "PASS")])
    code, decision = verify(files, capsys, REFUND_50, "--model", model)
    assert code == 0 and decision["stage"] == "verifier"


def test_scripted_verifier_not_met_blocks_even_when_it_says_pass(files, capsys):  # type: ignore[no-untyped-def]
    model = scripted(files, [verdict({**ALL_MET, "refund.confirmed": "NOT_MET"}, "PASS", "Ask the user to confirm.")])
    code, decision = verify(files, capsys, REFUND_50, "--model", model)
    assert code == 1 and decision["verdict"] == "BLOCK"
    assert decision["inconsistency"]


def test_verifier_timeouts_block(files, capsys):  # type: ignore[no-untyped-def]
    model = scripted(files, [{"error": "timeout"}] * 3)
    code, decision = verify(files, capsys, REFUND_50, "--model", model)
    assert code == 1 and decision["stage"] == "verifier_error"


def test_gate_block_never_reaches_the_model(files, capsys):  # type: ignore[no-untyped-def]
    model = scripted(files, [])  # any model call would be unexpected and block with verifier_error
    code, decision = verify(files, capsys, REFUND_90, "--model", model)
    assert code == 1 and decision["stage"] == "gate"


def test_anthropic_trajectory_is_detected(files, capsys):  # type: ignore[no-untyped-def]
    anthropic = {
        "system": "You are a support agent.",
        "messages": [
            {"role": "user", "content": "I am u1. Refund 50 on O1."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "r1", "name": "get_user_details", "input": {"user_id": "u1"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "r1", "content": json.dumps({"user_id": "u1"})}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "r2", "name": "get_order", "input": {"order_id": "O1"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "r2", "content": json.dumps({"order_id": "O1", "user_id": "u1", "captured": 80})}]},
        ],
    }  # fmt: skip
    files["trajectory"].write_text(json.dumps(anthropic))
    call = {"type": "tool_use", "id": "c1", "name": "issue_refund", "input": {"order_id": "O1", "amount": 90}}
    code, decision = verify(files, capsys, call, "--model", "none")
    assert code == 1 and decision["tool"] == "issue_refund"


def test_bad_inputs_exit_2_and_name_the_file(files, capsys):  # type: ignore[no-untyped-def]
    files["trajectory"].write_text("{not json")
    code, _ = run(files, REFUND_50, "--model", "none")
    assert code == 2
    assert "trajectory.json" in capsys.readouterr().err


def test_checklist_error_names_file_and_line(files, capsys):  # type: ignore[no-untyped-def]
    text = files["checklist"].read_text().replace("kind: procedural", "kind: vibes")
    files["checklist"].write_text(text)
    code, _ = run(files, REFUND_50, "--model", "none")
    err = capsys.readouterr().err
    assert code == 2
    assert "checklist.yaml:23" in err and "kind" in err


def test_policy_text_that_does_not_match_the_checklist_is_bad_input(files, capsys):  # type: ignore[no-untyped-def]
    files["policy"].write_text(POLICY + "Also, refunds are free for all.\n")
    code, _ = run(files, REFUND_50, "--model", "none")
    assert code == 2
    assert "policy version mismatch" in capsys.readouterr().err


def _chat_call_text(arguments: str) -> str:
    return json.dumps({"id": "c1", "type": "function", "function": {"name": "issue_refund", "arguments": arguments}})


BAD_CALLS = {
    "chat NaN": _chat_call_text('{"order_id": "O1", "amount": NaN}'),
    "chat Infinity": _chat_call_text('{"order_id": "O1", "amount": Infinity}'),
    "chat 1e999": _chat_call_text('{"order_id": "O1", "amount": 1e999}'),
    "chat 2**64+1": _chat_call_text('{"order_id": "O1", "amount": 18446744073709551617}'),
    "own shape -Infinity": '{"id": "c1", "name": "issue_refund", "arguments": {"order_id": "O1", "amount": -Infinity}}',
    "anthropic NaN": '{"type": "tool_use", "id": "c1", "name": "issue_refund", "input": {"amount": NaN}}',
    "responses 1e999": json.dumps(
        {"type": "function_call", "call_id": "c1", "name": "issue_refund", "arguments": '{"amount": 1e999}'}
    ),
    "responses without name": '{"type": "function_call", "call_id": "c1", "arguments": "{}"}',
    "deep call": '{"id": "c1", "name": "issue_refund", "arguments": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "own shape with a number id": '{"id": 1, "name": "issue_refund"}',
}


def _one_line_error(code: int, err: str, path: Path) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    [line] = err.strip().splitlines()
    assert str(path) in line
    return line


@pytest.mark.parametrize("text", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_a_call_with_unreadable_or_out_of_limit_arguments_exits_2_with_one_line(files, capsys, text):  # type: ignore[no-untyped-def]
    """NaN or 1e999 once raised ValueError inside the guard: a traceback and exit 1, the BLOCK code."""
    call_path = files["dir"] / "call.json"
    call_path.write_text(text)
    argv = ["verify", "--policy", str(files["policy"]), "--checklist", str(files["checklist"])]
    code = main([*argv, "--trajectory", str(files["trajectory"]), "--call", str(call_path)])
    _one_line_error(code, capsys.readouterr().err, call_path)


def _history_call(call_id: str, arguments: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "get_order", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


BAD_TRAJECTORIES = {
    "NaN in an earlier call": json.dumps([*DIALOGUE[:2], _history_call("r9", '{"order_id": NaN}')]),
    "1e999 in an earlier call": json.dumps([*DIALOGUE[:2], _history_call("r9", '{"order_id": 1e999}')]),
    "one call id for two reads": json.dumps(
        [*DIALOGUE[:3], _history_call("r1", '{"order_id": "O2"}')]  # r1's get_user_details is not answered yet
    ),
    "deep JSON": "[" * 100_000 + "]" * 100_000,
    "not UTF-8": "\udcff",
    "empty file": "",
}


@pytest.mark.parametrize("text", BAD_TRAJECTORIES.values(), ids=BAD_TRAJECTORIES.keys())
def test_an_unreadable_trajectory_exits_2_with_one_line_naming_the_file(files, capsys, text):  # type: ignore[no-untyped-def]
    files["trajectory"].write_bytes(text.encode("utf-8", "surrogateescape"))
    code, _ = run(files, REFUND_50, "--model", "none")
    _one_line_error(code, capsys.readouterr().err, files["trajectory"])


@pytest.mark.parametrize("which", ["policy", "trajectory", "checklist"])
def test_a_missing_input_file_exits_2_with_one_line_naming_it(files, capsys, which):  # type: ignore[no-untyped-def]
    missing = files[which]
    missing.unlink()
    code, _ = run(files, REFUND_50, "--model", "none")
    _one_line_error(code, capsys.readouterr().err, missing)


def test_duplicate_call_ids_name_both_messages(files, capsys):  # type: ignore[no-untyped-def]
    files["trajectory"].write_text(BAD_TRAJECTORIES["one call id for two reads"])
    code, _ = run(files, REFUND_50, "--model", "none")
    line = _one_line_error(code, capsys.readouterr().err, files["trajectory"])
    assert "call id 'r1'" in line and "message 2 and message 3" in line


# ---------------------------------------------------------------- errors and exit codes that tell the truth


def test_a_model_without_its_key_exits_2_naming_the_variable_and_prints_no_json(files, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    """Once: LiteLLM banners on stdout, three retried 'server' errors, then BLOCK exit 1 like a policy block."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, _ = run(files, REFUND_50, "--model", "openai/gpt-4.1-mini")
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert "OPENAI_API_KEY" in line and line.startswith("policyguard: error:")


def test_an_unknown_model_spec_exits_2_with_one_line_not_a_block(files, capsys):  # type: ignore[no-untyped-def]
    """Once: `--model bogus` ran the verifier for 28 s and answered BLOCK, exit 1, with nothing on stderr."""
    code, _ = run(files, REFUND_50, "--model", "bogus")
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith("policyguard: error: model 'bogus'") and "PROVIDER/MODEL" in line


def test_a_missing_scripted_model_file_exits_2_naming_it(files, capsys):  # type: ignore[no-untyped-def]
    missing = files["dir"] / "no-such-model.json"
    code, _ = run(files, REFUND_50, "--model", f"scripted:{missing}")
    _one_line_error(code, capsys.readouterr().err, missing)


def test_a_policy_mismatch_names_the_checklist_and_policy_files(files, capsys):  # type: ignore[no-untyped-def]
    files["policy"].write_text(POLICY + "Also, refunds are free for all.\n")
    code, _ = run(files, REFUND_50, "--model", "none")
    line = _one_line_error(code, capsys.readouterr().err, files["checklist"])
    assert "<checklist>" not in line and str(files["policy"]) in line


def test_version_prints_the_package_version(capsys):  # type: ignore[no-untyped-def]
    from policyguard import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"policyguard {__version__}"


def test_a_closed_stdout_ends_quietly_with_the_sigpipe_code(files, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    """`verify | head` once ended in a BrokenPipeError traceback."""
    import io
    import sys

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code, _ = run(files, REFUND_50, "--model", "none")
    assert code == 141
    assert "Traceback" not in capsys.readouterr().err


def test_verify_into_a_pipe_closed_early_prints_no_traceback(files):  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    call_path = files["dir"] / "call.json"
    call_path.write_text(json.dumps(REFUND_50))
    argv = [sys.executable, "-m", "policyguard", "verify", "--policy", str(files["policy"])]
    argv += ["--checklist", str(files["checklist"]), "--trajectory", str(files["trajectory"]), "--call", str(call_path)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader goes away before the JSON is written, as `| head -0` would
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_advisory_with_a_failed_verifier_warns_on_stderr_and_in_the_decision(files, capsys):  # type: ignore[no-untyped-def]
    model = scripted(files, [{"error": "timeout"}] * 3)
    code, _ = run(files, REFUND_50, "--model", model, "--advisory")
    captured = capsys.readouterr()
    decision = json.loads(captured.out)
    assert code == 1 and decision["outcome"] == "allow" and decision["stage"] == "verifier_error"
    assert decision["warnings"] and "nothing judged it" in decision["warnings"][0]
    assert "policyguard: WARNING: advisory mode" in captured.err


def test_no_gate_and_no_model_warns_that_nothing_was_checked(files, capsys):  # type: ignore[no-untyped-def]
    code, _ = run(files, REFUND_90, "--model", "none", "--no-gate")
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["outcome"] == "allow"
    assert "policyguard: WARNING: no gate and no verifier" in captured.err
