"""averify mirrors verify; one verifier serves many threads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from policyguard import Message, ModelError, ModelRequest, ModelResponse, ScriptedModel, ToolCall, Trajectory
from policyguard.stages import CheckContext
from policyguard.verifier.llm import LLMVerifier

ALL_MET = {"CR-1": "MET", "CR-2": "MET", "G-CONFIRM": "MET"}


def test_averify_pass_and_block(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    model = ScriptedModel([answer(ALL_MET, "PASS"), answer({**ALL_MET, "CR-1": "NOT_MET"}, "BLOCK", "Look it up.")])
    verifier = LLMVerifier(model)
    first = asyncio.run(verifier.averify(cancel_call, trajectory, context))
    second = asyncio.run(verifier.averify(cancel_call, trajectory, context))
    assert first.outcome == "allow" and first.stage == "verifier"
    assert second.outcome == "block" and second.message == "Look it up."


def test_averify_retries_then_fails_closed(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel([ModelError("rate_limit")] * 3)
    decision = asyncio.run(LLMVerifier(model, retries=2, backoff_s=0).averify(cancel_call, trajectory, context))
    assert len(model.calls) == 3
    assert decision.stage == "verifier_error" and decision.outcome == "block"


def test_averify_malformed_output_fails_closed(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    decision = asyncio.run(LLMVerifier(ScriptedModel(["not json"])).averify(cancel_call, trajectory, context))
    assert decision.stage == "verifier_error"


class SlowAsyncModel:
    """A model whose async call never answers in time."""

    name = "slow"

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("sync path not expected")

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(10)
        raise AssertionError("should have been cancelled")


def test_averify_enforces_timeout_with_wait_for(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    verifier = LLMVerifier(SlowAsyncModel(), retries=1, backoff_s=0, timeout_s=0.05)
    decision = asyncio.run(verifier.averify(cancel_call, trajectory, context))
    assert decision.stage == "verifier_error"
    assert decision.error is not None and "timeout" in decision.error
    assert decision.usage is not None and decision.usage.calls == 2


def test_one_verifier_judges_many_threads_correctly(context: CheckContext) -> None:
    """Each thread's decision matches its own call, whatever order answers come in."""

    def respond(request: ModelRequest) -> str:
        per_call = request.parts[-1].content
        status = "NOT_MET" if "BAD" in per_call else "MET"
        items = [{"id": rid, "status": status, "evidence": "2", "evidence_messages": [2]} for rid in ALL_MET]
        verdict = "BLOCK" if status == "NOT_MET" else "PASS"
        return json.dumps({"requirements": items, "verdict": verdict, "remediation": "Ask first."})

    n = 40
    verifier = LLMVerifier(ScriptedModel([respond] * n))

    def run(i: int) -> tuple[int, str, str | None]:
        reservation = f"{'BAD' if i % 3 == 0 else 'OK'}{i}"
        call = ToolCall(id=f"c{i}", name="cancel_reservation", arguments={"reservation_id": reservation})
        dialogue = Trajectory(
            messages=[
                Message(role="user", content=f"cancel {reservation}"),
                Message(role="assistant", content=f"Cancel {reservation}, refund to the card. Proceed?"),
                Message(role="user", content="yes"),
            ]
        )
        decision = verifier.verify(call, dialogue, context)
        return i, decision.outcome, decision.call_id

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(n)))
    for i, outcome, call_id in results:
        assert call_id == f"c{i}"
        assert outcome == ("block" if i % 3 == 0 else "allow")
    verifier.model.assert_complete()  # type: ignore[attr-defined]
