"""Fail closed: every failure becomes a ``verifier_error`` BLOCK, in every mode and setting."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from policyguard import ModelError, ModelRequest, ScriptedModel, ToolCall, Trajectory
from policyguard.stages import CheckContext
from policyguard.verifier.llm import FAILURE_MESSAGE, MODES, LLMVerifier, Mode
from policyguard.verifier.models.scripted import Step
from policyguard.verifier.prompts import Prompts


def _good(ids: list[str], cites: tuple[int, ...] = (3, 5)) -> str:
    items = [{"id": i, "status": "MET", "evidence": "3, 5", "evidence_messages": list(cites)} for i in ids]
    return json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})


def _edit(ids: list[str], change: Callable[[dict], None]) -> str:
    data = json.loads(_good(ids))
    change(data)
    return json.dumps(data)


def _raise(exc: Exception) -> Callable[[ModelRequest], str]:
    def step(request: ModelRequest) -> str:
        raise exc

    return step


# Each failure: (name, steps for the required ids). Every answer below says PASS where it can,
# so a parse that let anything through would show up as "allow".
FAILURES: dict[str, Callable[[list[str]], list[Step]]] = {
    "timeout": lambda ids: [ModelError("timeout")] * 3,
    "rate_limit": lambda ids: [ModelError("rate_limit")] * 3,
    "server": lambda ids: [ModelError("server")] * 3,
    "auth": lambda ids: [ModelError("auth")],
    "bad_request": lambda ids: [ModelError("bad_request")],
    "other_model_error": lambda ids: [ModelError("other")],
    "scripted_model_error": lambda ids: [],
    "unexpected_exception": lambda ids: [_raise(RuntimeError("boom"))],
    "malformed_json": lambda ids: ['{"requirements": [], "verdict": "PASS", "remediation": ""'],
    "prose_without_json": lambda ids: ["Everything looks fine, PASS."],
    "empty_output": lambda ids: [""],
    "json_array": lambda ids: ["[" + _good(ids) + "]"],
    "off_menu_verdict": lambda ids: [_edit(ids, lambda d: d.update(verdict="ALLOW"))],
    "lowercase_verdict": lambda ids: [_edit(ids, lambda d: d.update(verdict="pass"))],
    "off_menu_status": lambda ids: [_edit(ids, lambda d: d["requirements"][0].update(status="PARTIAL"))],
    "missing_requirement_id": lambda ids: [_edit(ids, lambda d: d["requirements"].pop(0))],
    "no_requirements": lambda ids: [_edit(ids, lambda d: d.update(requirements=[]))],
    "missing_evidence": lambda ids: [_edit(ids, lambda d: d["requirements"][0].pop("evidence"))],
    "extra_key": lambda ids: [_edit(ids, lambda d: d.update(confidence=0.9))],
    "null_verdict": lambda ids: [_edit(ids, lambda d: d.update(verdict=None))],
    "valid_draft_then_off_menu_final": lambda ids: [
        _good(ids) + "\nWait, revising:\n" + _edit(ids, lambda d: d.update(verdict="UNSURE"))
    ],
}


@pytest.mark.parametrize(
    ("mode", "failure", "retries"),
    list(itertools.product(MODES, sorted(FAILURES), (0, 2))),
)
def test_no_failure_ever_becomes_pass(
    mode: Mode,
    failure: str,
    retries: int,
    cancel_call: ToolCall,
    trajectory: Trajectory,
    context: CheckContext,
) -> None:
    verifier = LLMVerifier(ScriptedModel(), mode=mode, retries=retries, backoff_s=0.0)
    ids = verifier.required_ids(cancel_call, context)
    verifier.model = ScriptedModel(FAILURES[failure](ids))
    decision = verifier.verify(cancel_call, trajectory, context)
    assert decision.outcome == "block"
    assert decision.stage == "verifier_error"
    assert decision.verdict == "BLOCK"
    assert decision.message == FAILURE_MESSAGE
    assert decision.error
    assert decision.call_id == "call_9" and decision.args_sha256 == cancel_call.args_sha256


def test_the_good_answer_used_above_does_pass(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """Guards the table above: the failures differ from an allowed answer only by the failure."""
    for mode in MODES:
        verifier = LLMVerifier(ScriptedModel(), mode=mode)
        cites = (3,) if mode == "raw_traj" else (3, 5)  # raw_traj shows no user message
        verifier.model = ScriptedModel([_good(verifier.required_ids(cancel_call, context), cites)])
        assert verifier.verify(cancel_call, trajectory, context).outcome == "allow", mode


@pytest.mark.parametrize("kind", ["rate_limit", "server", "timeout"])
def test_transient_errors_are_retried_then_given_up(
    kind: str, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel([ModelError(kind)] * 3)  # type: ignore[arg-type]
    decision = LLMVerifier(model, retries=2, backoff_s=0.0).verify(cancel_call, trajectory, context)
    assert len(model.calls) == 3
    model.assert_complete()
    assert decision.stage == "verifier_error"
    assert decision.error is not None and kind in decision.error
    assert decision.usage is not None and decision.usage.calls == 3


@pytest.mark.parametrize("kind", ["auth", "bad_request", "other"])
def test_permanent_errors_are_not_retried(
    kind: str, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel([ModelError(kind)])  # type: ignore[arg-type]
    decision = LLMVerifier(model, retries=5, backoff_s=0.0).verify(cancel_call, trajectory, context)
    assert len(model.calls) == 1
    assert decision.stage == "verifier_error"


def test_a_retry_that_succeeds_is_judged_normally_and_usage_sums_attempts(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    ids = ["CR-1", "CR-2", "G-CONFIRM"]
    model = ScriptedModel([ModelError("rate_limit"), _good(ids)])
    decision = LLMVerifier(model, backoff_s=0.0).verify(cancel_call, trajectory, context)
    assert decision.outcome == "allow"
    assert decision.usage is not None and decision.usage.calls == 2


def test_backoff_doubles_between_attempts(
    monkeypatch: pytest.MonkeyPatch, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    slept: list[float] = []
    # The verifier's own wait, not time.sleep: that one is every thread's, and a background thread
    # of another library that sleeps in a loop would fill the list.
    monkeypatch.setattr("policyguard.verifier.llm._backoff", slept.append)
    model = ScriptedModel([ModelError("server")] * 3)
    LLMVerifier(model, retries=2, backoff_s=0.5).verify(cancel_call, trajectory, context)
    assert slept == [0.5, 1.0]


def test_a_model_that_hangs_is_cut_off_at_timeout_s(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    release = threading.Event()

    def hang(request: ModelRequest) -> str:
        release.wait(5)
        return _good(["CR-1", "CR-2", "G-CONFIRM"])

    model = ScriptedModel([hang])
    started = time.perf_counter()
    decision = LLMVerifier(model, retries=0, timeout_s=0.1).verify(cancel_call, trajectory, context)
    elapsed = time.perf_counter() - started
    release.set()
    assert decision.stage == "verifier_error"
    assert decision.error is not None and "timeout" in decision.error
    assert elapsed < 2


def test_the_timeout_is_passed_to_the_backend(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel([ModelError("timeout")])
    LLMVerifier(model, retries=0, timeout_s=7.5).verify(cancel_call, trajectory, context)
    assert model.calls[0].timeout_s == 7.5


def test_a_missing_template_blocks_instead_of_raising(
    tmp_path: Path, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel()
    decision = LLMVerifier(model, prompts=Prompts(tmp_path)).verify(cancel_call, trajectory, context)
    assert decision.stage == "verifier_error"
    assert decision.error is not None and "verifier_system.j2" in decision.error
    assert model.calls == []
