"""The LLM verifier: a sub-agent that judges a pending mutating call against the policy.

It reads what the agent saw (the dialogue, tool calls and tool results), the raw
policy and the tool's checklist requirements, and returns MET / NOT_MET /
NOT_APPLICABLE per requirement, PASS or BLOCK, and a short remediation for the
agent's next turn (the PolicyGuard paper, arXiv 2606.29225).

The prompt is ordered for provider prompt caching: the parts that are the same
for every call of a tool in a deployment (instructions and policy, then the
tool's requirements) come first and are marked ``cache=True``; the dialogue and
the pending action follow.

No text from the dialogue can forge structure in the prompt: the conversation is
a JSON array with one message per line, the requirements and the pending action
are JSON objects, all encoded by :func:`policyguard.verifier.dialogue.safe_json` (no line
break, no ``</`` inside), and the policy sits between tags carrying a checksum
of the policy (``<policy-XXXXXXXXXXXXXXXX>``), so a ``</policy>`` inside it is
text. The instructions tell the model how to read this.

Budget: when the estimated prompt (UTF-8 bytes / 4) is over
``max_prompt_tokens``, the dialogue keeps the newest result of every read the
requirements name as prerequisites or the checklist's facts come from, the calls
that made them and the last ``keep_last_messages`` messages; the rest is
replaced by markers saying how many messages were elided. If that is still over
the budget, the verifier blocks (``verifier_error``, the error says by how much).

The answer is checked, not only parsed: every MET must cite, in
``evidence_messages``, messages the model was shown, and a confirmation
requirement (``confirmation: true``, or worded like one) must cite a user
message after the agent's last message to the user (:mod:`policyguard.verifier.evidence`).
A MET that fails this counts as NOT_MET; the decision's ``inconsistency``
records it as ``verifier_evidence: ...``.

Modes (the input regimes PG-CHECKLIST, PG-RAW, PG-RAW-TRAJ and PG-CHECKLIST-ONLY of the paper):

* ``checklist`` - policy + checklist + dialogue (the headline configuration);
* ``raw`` - policy + dialogue, no checklist;
* ``raw_traj`` - policy + only the tool calls and results (no user/agent text);
* ``checklist_only`` - checklist + dialogue, no policy text.

Without a checklist (``raw``, ``raw_traj``) the model must judge one synthetic
requirement, ``policy`` (the whole policy); it may add items with ids of its
own, and any of those NOT_MET blocks too. In the checklist modes every id of
the tool's requirements and the general rules must be judged; a tool with no
requirements at all is judged as the synthetic ``policy`` requirement.

Decision rules, all failing closed:

* any NOT_MET blocks, even when the model said PASS (``inconsistency`` records it);
* a BLOCK with nothing NOT_MET still blocks (recorded as well);
* a MET whose citations fail the evidence check counts as NOT_MET (recorded);
* ids the model invents in the checklist modes are recorded (in ``requirements``
  and ``inconsistency``) and count for nothing, except that a NOT_MET on one
  still blocks;
* a missing required id, unreadable or off-menu output, a timeout, a provider
  error after retries, or any other exception gives a ``verifier_error`` BLOCK.
  No setting turns an error into PASS.

An empty remediation on BLOCK is replaced by :data:`DEFAULT_REMEDIATION`; a
remediation longer than three sentences is passed on unchanged (cutting it
could drop the one instruction that matters).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from policyguard.checklist.schema import Requirement
from policyguard.decision import Decision, RequirementResult, Usage
from policyguard.errors import ConfigError, ModelError
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import ToolCall, Trajectory

from .dialogue import (
    DialogueView,
    PromptBudgetError,
    build_rows,
    conversation_json,
    estimate_tokens,
    last_statement,
    pending_index,
    safe_json,
    select_rows,
)
from .evidence import citation_problem, is_confirmation
from .models.base import Model, ModelRequest, ModelResponse, PromptPart
from .prompts import Prompts, default_prompts
from .verdict import RequirementJudgement, VerifierOutput, parse_verifier_output, verifier_output_schema

Mode = Literal["checklist", "raw", "raw_traj", "checklist_only"]
MODES: tuple[Mode, ...] = ("checklist", "raw", "raw_traj", "checklist_only")

SYNTHETIC_ID = "policy"
"""The requirement id judged when there is no checklist (or the tool has no requirements)."""

SYNTHETIC_TEXT = (
    "the action is exactly what the user asked for and explicitly confirmed in the conversation, "
    "and every fact it relies on is shown by a tool result."
)

DEFAULT_REMEDIATION = (
    "This action does not meet the policy yet, so do not perform it now. "
    "Look up any missing information with the read-only tools, and confirm the exact details with the user "
    "before trying again, or explain to the user why the request cannot be done."
)

FAILURE_MESSAGE = (
    "Verification was not possible for this action right now; do not perform this action now. "
    "Tell the user the action could not be completed at the moment and offer to try again later."
)

CONFIRM_REMEDIATION = (
    "Do not perform this action yet. List the exact details of this action to the user and ask for an explicit "
    "yes; perform it only after the user agrees."
)

RETRYABLE: frozenset[str] = frozenset({"rate_limit", "server", "timeout"})

DEFAULT_MAX_PROMPT_TOKENS = 100_000
"""The default prompt budget, in estimated tokens (UTF-8 bytes / 4): within a 128k context with room to answer."""

DEFAULT_KEEP_LAST_MESSAGES = 40
"""Messages always kept at the end of the dialogue when it must be shortened."""


@dataclass(frozen=True)
class _ModeSpec:
    include_policy: bool
    include_checklist: bool
    dialogue_kind: Literal["full", "tools_only"]


_MODE_SPECS: dict[str, _ModeSpec] = {
    "checklist": _ModeSpec(True, True, "full"),
    "raw": _ModeSpec(True, False, "full"),
    "raw_traj": _ModeSpec(True, False, "tools_only"),
    "checklist_only": _ModeSpec(False, True, "full"),
}


class _Failure(Exception):
    """Internal: the answer could not be turned into a verdict."""


@dataclass(frozen=True)
class PreparedRequest:
    """The request for one call and the view of the dialogue it shows (what citations may refer to)."""

    request: ModelRequest
    view: DialogueView
    estimated_tokens: int


class LLMVerifier:
    """A :class:`policyguard.stages.Verifier` backed by a chat model.

    Thread-safe: an instance keeps no per-call state, so one verifier may serve
    many simulations running on threads.
    """

    def __init__(
        self,
        model: Model,
        *,
        mode: Mode = "checklist",
        retries: int = 2,
        backoff_s: float = 0.5,
        timeout_s: float = 60.0,
        max_output_tokens: int = 2048,
        prompts: Prompts | None = None,
        max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
        keep_last_messages: int = DEFAULT_KEEP_LAST_MESSAGES,
    ) -> None:
        if mode not in _MODE_SPECS:
            raise ConfigError(f"unknown verifier mode {mode!r}; expected one of {', '.join(MODES)}")
        if retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ConfigError("retries and backoff_s must be >= 0 and timeout_s > 0")
        if max_prompt_tokens <= 0 or keep_last_messages < 0:
            raise ConfigError("max_prompt_tokens must be > 0 and keep_last_messages >= 0")
        self.model = model
        self.mode: Mode = mode
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.max_output_tokens = max_output_tokens
        self._prompts = prompts
        self.max_prompt_tokens = max_prompt_tokens
        self.keep_last_messages = keep_last_messages
        # The static parts depend only on (policy, checklist, tool): render them once.
        self._static: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._static_lock = threading.Lock()

    # ------------------------------------------------------------------ prompt

    @property
    def prompts(self) -> Prompts:
        return self._prompts if self._prompts is not None else default_prompts()

    def required_ids(self, call: ToolCall, context: CheckContext) -> list[str]:
        """The requirement ids the model must judge for ``call``."""
        if not _MODE_SPECS[self.mode].include_checklist:
            return [SYNTHETIC_ID]
        ids = [r.id for r in context.checklist.requirements_for(call.name)]
        return ids or [SYNTHETIC_ID]

    def build_request(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> ModelRequest:
        """The exact request the model gets for ``call`` (static parts first, cached).

        Raises :class:`policyguard.verifier.dialogue.PromptBudgetError` when the dialogue
        cannot be fitted into ``max_prompt_tokens``.
        """
        return self.prepare(call, trajectory, context).request

    def prepare(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> PreparedRequest:
        """The request for ``call``, with the dialogue view it shows and its estimated size in tokens."""
        spec = _MODE_SPECS[self.mode]
        system, checklist = self._static_parts(call, context)
        fixed = estimate_tokens(system) + estimate_tokens(checklist)
        rows = build_rows(trajectory, call.id, tools_only=spec.dialogue_kind == "tools_only")
        shown, elided, kept_reads = rows, 0, 0
        # a lower bound first: a dialogue clearly over the budget is never encoded whole
        whole = fixed + sum(row.size_hint for row in rows) // 4
        if whole <= self.max_prompt_tokens:
            per_call = self._per_call(call, context, conversation_json(row.line for row in rows))
            whole = fixed + estimate_tokens(per_call)
        total = whole
        if whole > self.max_prompt_tokens:
            selection = select_rows(
                rows, keep_last=self.keep_last_messages, evidence_tools=self._evidence_tools(call, context)
            )
            shown, elided, kept_reads = selection.shown, selection.elided, selection.kept_reads
            per_call = self._per_call(call, context, conversation_json(selection.lines))
            total = fixed + estimate_tokens(per_call)
            if total > self.max_prompt_tokens:
                raise PromptBudgetError(
                    f"the verifier prompt does not fit its budget of {self.max_prompt_tokens:,} estimated tokens: "
                    f"at least {whole:,} with the whole dialogue ({len(trajectory.messages):,} messages), "
                    f"{total:,} with {elided:,} messages elided (kept: {kept_reads} prerequisite/fact reads, "
                    f"the calls that made them and the last {self.keep_last_messages} messages)"
                )
        pending = pending_index(trajectory, call.id)
        view = DialogueView(
            citable={row.index: row.role for row in shown if row.role != "system"},
            total_messages=len(trajectory.messages),
            pending_index=pending,
            last_statement=last_statement(trajectory, pending),
            elided=elided,
            kept_reads=kept_reads,
        )
        request = ModelRequest(
            parts=[
                PromptPart(role="system", content=system, cache=True),
                PromptPart(role="system", content=checklist, cache=True),
                PromptPart(role="user", content=per_call, cache=False),
            ],
            response_schema=verifier_output_schema(),
            schema_name="verifier_output",
            purpose="verify",
            max_output_tokens=self.max_output_tokens,
            timeout_s=self.timeout_s,
        )
        return PreparedRequest(request=request, view=view, estimated_tokens=total)

    def _per_call(self, call: ToolCall, context: CheckContext, conversation: str) -> str:
        return self.prompts.render(
            "verifier_call.j2",
            dialogue_kind=_MODE_SPECS[self.mode].dialogue_kind,
            conversation_json=conversation,
            pending_json=safe_json({"tool": call.name, "call_id": call.id, "arguments": call.arguments}),
            now=context.now.isoformat(),
            principal_json=safe_json(context.principal) if context.principal else "",
        )

    def _evidence_tools(self, call: ToolCall, context: CheckContext) -> set[str]:
        """Reads whose results the requirements rest on: prerequisites, fact sources, the principal's source."""
        checklist = context.checklist
        tools = {tool for r in checklist.requirements_for(call.name) for tool in r.prerequisites}
        for source in checklist.facts.values():
            tools.add(source.tool)
            tools.update(source.refreshed_by)
        if checklist.principal is not None:
            tools.add(checklist.principal.tool)
        return tools

    def confirmation_ids(self, call: ToolCall, context: CheckContext) -> set[str]:
        """The requirement ids that need the user's confirmation (:func:`.evidence.is_confirmation`).

        In the checklist modes, the synthetic requirement of a tool without
        requirements is one too (it says the user explicitly confirmed).
        """
        if not _MODE_SPECS[self.mode].include_checklist:
            return set()
        requirements = context.checklist.requirements_for(call.name)
        if not requirements:
            return {SYNTHETIC_ID}
        return {r.id for r in requirements if is_confirmation(r)}

    def _static_parts(self, call: ToolCall, context: CheckContext) -> tuple[str, str]:
        key = (context.policy_text, context.checklist.version, call.name)
        with self._static_lock:
            cached = self._static.get(key)
        if cached is not None:
            return cached
        spec = _MODE_SPECS[self.mode]
        system = self.prompts.render(
            "verifier_system.j2",
            dialogue_kind=spec.dialogue_kind,
            include_policy=spec.include_policy,
            policy_text=context.policy_text if spec.include_policy else "",
            policy_id=policy_tag_id(context.policy_text),
        )
        checklist = self.prompts.render("verifier_checklist.j2", **self._checklist_vars(call, context))
        with self._static_lock:
            if len(self._static) > 1024:  # a bound, in case policies or checklists keep changing
                self._static.clear()
            self._static[key] = (system, checklist)
        return system, checklist

    def _checklist_vars(self, call: ToolCall, context: CheckContext) -> dict[str, Any]:
        base: dict[str, Any] = {
            "tool_json": safe_json(call.name),
            "synthetic_id": SYNTHETIC_ID,
            "synthetic_text": SYNTHETIC_TEXT,
            "tool_requirements_json": "",
            "general_rules_json": "",
        }
        if not _MODE_SPECS[self.mode].include_checklist:
            return {**base, "synthetic": True, "own_ids_allowed": True}
        spec = context.checklist.tool_spec(call.name)
        own = spec.requirements if spec is not None else []
        general = context.checklist.general_rules
        if not own and not general:
            return {**base, "synthetic": True, "own_ids_allowed": False}
        return {
            **base,
            "synthetic": False,
            "own_ids_allowed": False,
            "tool_requirements_json": _requirements_json(own),
            "general_rules_json": _requirements_json(general),
        }

    # ------------------------------------------------------------------ verify

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        """Judge ``call``; every failure is a ``verifier_error`` BLOCK."""
        usage = Usage()
        answered_by: str | None = None  # the model (a scripted file's step) whose answer is being judged
        try:
            prepared = self.prepare(call, trajectory, context)
            request = prepared.request
            for attempt in range(self.retries + 1):
                started = time.perf_counter()
                try:
                    response = _complete_with_deadline(self.model, request, self.timeout_s)
                except ModelError as exc:
                    usage = usage + Usage(calls=1, latency_s=time.perf_counter() - started)
                    delay = self._retry_delay(exc, attempt)
                    if delay is None:
                        raise
                    _backoff(delay)
                    continue
                usage = usage + _response_usage(response, time.perf_counter() - started)
                answered_by = response.model
                return self._decide(response.text, call, context, usage, prepared.view)
            raise AssertionError("unreachable: the retry loop always returns or raises")
        except Exception as exc:  # fail closed: nothing below this line may become PASS
            return self._failure(call, exc, usage, answered_by)

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        """Async :meth:`verify`, with ``timeout_s`` enforced by ``asyncio.wait_for``."""
        usage = Usage()
        answered_by: str | None = None  # the model (a scripted file's step) whose answer is being judged
        try:
            prepared = self.prepare(call, trajectory, context)
            request = prepared.request
            for attempt in range(self.retries + 1):
                started = time.perf_counter()
                try:
                    try:
                        response = await asyncio.wait_for(self.model.acomplete(request), self.timeout_s)
                    except asyncio.TimeoutError as exc:
                        raise ModelError("timeout", f"no answer within {self.timeout_s}s") from exc
                except ModelError as exc:
                    usage = usage + Usage(calls=1, latency_s=time.perf_counter() - started)
                    delay = self._retry_delay(exc, attempt)
                    if delay is None:
                        raise
                    await asyncio.sleep(delay)
                    continue
                usage = usage + _response_usage(response, time.perf_counter() - started)
                answered_by = response.model
                return self._decide(response.text, call, context, usage, prepared.view)
            raise AssertionError("unreachable: the retry loop always returns or raises")
        except Exception as exc:  # fail closed
            return self._failure(call, exc, usage, answered_by)

    def _retry_delay(self, exc: ModelError, attempt: int) -> float | None:
        if exc.kind not in RETRYABLE or attempt >= self.retries:
            return None
        return float(self.backoff_s * (2**attempt))

    # ---------------------------------------------------------------- decision

    def _decide(self, text: str, call: ToolCall, context: CheckContext, usage: Usage, view: DialogueView) -> Decision:
        output: VerifierOutput = parse_verifier_output(text)
        required = self.required_ids(call, context)
        notes: list[str] = []
        rejected: list[str] = []
        judged = _merge_duplicates(output.requirements, notes)
        missing = [rid for rid in required if rid not in judged]
        if missing:
            raise _Failure(f"the answer does not judge requirement(s): {', '.join(missing)}")
        extra = [rid for rid in judged if rid not in required]
        if extra and self.mode in ("checklist", "checklist_only"):
            notes.append(f"unknown requirement id(s) ignored: {', '.join(extra)}")
        confirmations = self.confirmation_ids(call, context)
        results: list[RequirementResult] = []
        rejected_confirmation = False
        for rid in [*required, *extra]:
            item = judged[rid]
            problem = citation_problem(item, confirmation=rid in confirmations, view=view)
            if problem is not None:
                rejected.append(f"{rid} judged MET but {problem}; counted as NOT_MET")
                notes.append(f"verifier_evidence: {rejected[-1]}")
                rejected_confirmation = rejected_confirmation or rid in confirmations
            results.append(_result(item, problem))
        not_met = [r.id for r in results if r.status == "NOT_MET"]
        fields: dict[str, object] = {
            "requirements": results,
            "call_id": call.id,
            "tool": call.name,
            "args_sha256": call.args_sha256,
            "usage": usage,
            "verifier_evidence": rejected,
        }
        if not_met and output.verdict == "PASS":
            notes.append(f"model said PASS but requirement(s) NOT_MET: {', '.join(not_met)}")
        if not not_met and output.verdict == "BLOCK":
            notes.append("model said BLOCK although no requirement is NOT_MET")
        inconsistency = "; ".join(notes) or None
        if not_met or output.verdict == "BLOCK":
            remediation = output.remediation.strip() if output.verdict == "BLOCK" or not rejected_confirmation else ""
            remediation = remediation or (CONFIRM_REMEDIATION if rejected_confirmation else DEFAULT_REMEDIATION)
            return Decision.block("verifier", remediation, inconsistency=inconsistency, **fields)
        return Decision.allow("verifier", inconsistency=inconsistency, **fields)

    def _failure(self, call: ToolCall, exc: BaseException, usage: Usage, answered_by: str | None = None) -> Decision:
        source = f" (answer from {answered_by})" if answered_by else ""
        return Decision.block(
            "verifier_error",
            FAILURE_MESSAGE,
            error=_describe(exc) + source,
            call_id=call.id,
            tool=call.name,
            args_sha256=call.args_sha256,
            usage=usage,
        )


# ---------------------------------------------------------------------- helpers


def policy_tag_id(policy_text: str) -> str:
    """The checksum in the policy's tags: 16 hex digits of the policy's sha256 (no text can guess its own)."""
    return hashlib.sha256(policy_text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _requirements_json(requirements: list[Requirement]) -> str:
    """Requirements as a JSON array, one requirement per line (no text in them can forge a line)."""
    if not requirements:
        return ""
    return conversation_json(safe_json(_requirement_view(r)) for r in requirements)


def _requirement_view(req: Requirement) -> dict[str, Any]:
    view: dict[str, Any] = {"id": req.id, "kind": req.kind, "text": req.text, "policy_source": req.source}
    if req.prerequisites:
        view["prerequisite_reads"] = list(req.prerequisites)
    if is_confirmation(req):
        view["user_confirmation"] = True
    return view


def _merge_duplicates(items: list[RequirementJudgement], notes: list[str]) -> dict[str, RequirementJudgement]:
    """One judgement per id; a repeated id keeps its most severe status (NOT_MET wins)."""
    severity = {"NOT_MET": 2, "MET": 1, "NOT_APPLICABLE": 0}
    merged: dict[str, RequirementJudgement] = {}
    repeated: list[str] = []
    for item in items:
        seen = merged.get(item.id)
        if seen is None:
            merged[item.id] = item
            continue
        repeated.append(item.id)
        if severity[item.status] > severity[seen.status]:
            merged[item.id] = item
    if repeated:
        ids = ", ".join(sorted(set(repeated)))
        notes.append(f"requirement id(s) judged more than once, the most severe kept: {ids}")
    return merged


def _result(item: RequirementJudgement, problem: str | None) -> RequirementResult:
    cites = f" (messages {', '.join(str(i) for i in item.evidence_messages)})" if item.evidence_messages else ""
    if problem is None:
        return RequirementResult(id=item.id, status=item.status, evidence=item.evidence + cites, judged_by="verifier")
    evidence = f"verifier_evidence: the MET was rejected, it {problem}. The model's evidence: {item.evidence}{cites}"
    return RequirementResult(id=item.id, status="NOT_MET", evidence=evidence, judged_by="verifier")


def _response_usage(response: ModelResponse, latency_s: float) -> Usage:
    reported = response.usage
    return reported.model_copy(update={"latency_s": latency_s, "calls": max(reported.calls, 1)})


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ModelError):
        return f"ModelError({exc.kind}): {exc}"
    if isinstance(exc, _Failure):
        return f"unusable answer: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _backoff(seconds: float) -> None:
    """Wait ``seconds`` between attempts (its own name, so a test can replace this wait alone)."""
    time.sleep(seconds)


def _complete_with_deadline(model: Model, request: ModelRequest, timeout_s: float) -> ModelResponse:
    """``model.complete(request)``, abandoned after ``timeout_s`` seconds.

    The backend gets the timeout too and normally gives up first; the thread is
    the guarantee for backends that do not. An abandoned call keeps running in
    its daemon thread until the backend returns; its answer is dropped.
    """
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["response"] = context.run(model.complete, request)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, name="policyguard-verifier", daemon=True)
    worker.start()
    if not done.wait(timeout_s):
        raise ModelError("timeout", f"no answer within {timeout_s}s")
    if "error" in box:
        raise box["error"]
    response: ModelResponse = box["response"]
    return response
