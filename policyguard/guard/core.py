"""The guard: the one object an integration talks to, the order of its stages and how their decisions combine.

``Guard.check(call, trajectory)`` allows a read-only tool; for a mutating call
it runs, in order: the front refusals (:mod:`.front`: unknown tool, limits,
reused call id, money effect), the gate (:mod:`.gatestage`), then the verifier
on what the gate escalated (:mod:`.verifierstage`). The decisions combine by
:mod:`.rules` (any block wins; an unjudged escalate blocks unless
``allow_unverified``). Then a block only a person may lift goes to the approval
queue (:mod:`.approver`), a denied call id stays denied (:mod:`.denials`),
advisory mode (``strict=False``) turns a block into a flagged allow, the
session's record takes the decision (:mod:`.sessions`), an allow gets its grant
(:mod:`.granter`), and the decision is counted and traced (:mod:`.recorder`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from policyguard.audit.counters import CounterSnapshot
from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision, RequirementResult, Stage
from policyguard.stages import Approver, CheckContext, FrontCheck, Gate, Granter, Verifier
from policyguard.trajectory.formats import Format, to_trajectory
from policyguard.trajectory.formats.history_cache import HistoryCache
from policyguard.trajectory.inputs import as_call, as_trajectory
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from . import rules
from .approver import PersonApprover
from .build import from_files
from .calls import call_ids, call_place, plain_name
from .denials import DenyWins
from .front import FrontRefusals
from .gatestage import GateStage
from .granter import CallGranter
from .offloop import off_loop
from .recorder import Recorder
from .remediation import (
    APPROVAL_UNAVAILABLE,
    NO_VERIFIER_MESSAGE,
    SESSION_BUSY_MESSAGE,
    after_block,
    remediation_message,
)
from .sessions import SessionBridge
from .settings import checked_mode, checked_settings
from .shadow import GuardMode, lifted, shadowed_ids, would_block
from .verifierstage import VerifierStage

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalQueue
    from policyguard.enforcement.grants import GrantIssuer
    from policyguard.enforcement.store import NonceStore
    from policyguard.session import Session, SessionStore

    from .fetching import Fetcher

# What this module exported before its helpers moved out; `policyguard.guard.core.after_block` stays a valid path.
__all__ = ["APPROVAL_UNAVAILABLE", "NO_VERIFIER_MESSAGE", "SESSION_BUSY_MESSAGE", "Guard", "after_block", "off_loop"]
__all__ += ["remediation_message"]

_log = logging.getLogger("policyguard")

HISTORY_ENTRIES = 32  # message lists (by session, or by their first messages) whose conversion a guard keeps
HISTORY_MESSAGES = 20_000  # their messages in total; a list of over a quarter of that is converted, not kept


class UnverifiedLog:
    """Logs "not checked, no verifier" once per set of requirements (at most 1,024 sets); thread-safe.

    A guard has its own; guards made per request (``policyguard serve``) share one, so the warning is
    logged once per process: a line per decision grows the log with the traffic, and once a
    supervisor's unread pipe is full every decision that logs waits on it.
    """

    LIMIT = 1024

    def __init__(self) -> None:
        self._seen: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()

    def warn(self, unverified: Sequence[str]) -> bool:
        """Log the warning for these requirement ids unless it was logged already; True when logged now."""
        key = tuple(sorted(unverified))
        with self._lock:
            if key in self._seen or len(self._seen) >= self.LIMIT:
                return False
            self._seen.add(key)
        _log.warning("policyguard: %s", rules.unverified_warning(list(key)))
        return True


class Guard:
    """Checks pending tool calls against a policy and its checklist.

    ``principal`` is the authenticated END USER the agent acts for (the
    customer whose account the tools touch), as the integrator's login
    established it; it is not the agent's own id. When given, it replaces the
    checklist's ``principal`` lookup in the dialogue for every call: checks
    that read ``principal`` (``facts.order.user_id == principal``) compare
    against it, approvals are bound to it, and a grant names it. Leave it None
    to let the checklist read the user from the dialogue; pass a fixed value
    only when one guard serves one authenticated user.
    """

    def __init__(
        self,
        checklist: Checklist,
        policy_text: str,
        *,
        gate: Gate | None = None,
        verifier: Verifier | None = None,
        strict: bool = True,
        allow_unverified: bool = False,
        trace: Trace | None = None,
        principal: str | None = None,
        clock: Callable[[], datetime] | None = None,
        grants: GrantIssuer | None = None,
        decision_ttl_s: float = 300.0,
        unknown_tools: Literal["block", "check"] = "block",
        denials: NonceStore | None = None,
        approvals: ApprovalQueue | None = None,
        approval_ttl_s: float = 24 * 3600.0,
        sessions: SessionStore | None = None,
        session_wait_s: float = 30.0,
        session_result_wait_s: float | None = None,
        mode: GuardMode = "enforce",
        max_fetches: int = 4,
        fetch_timeout_s: float = 10.0,
        unverified_log: UnverifiedLog | None = None,
    ) -> None:
        checklist.check_policy(policy_text)
        checked_mode(mode)
        checked_settings(
            unknown_tools=unknown_tools, approval_ttl_s=approval_ttl_s, session_wait_s=session_wait_s,
            session_result_wait_s=session_result_wait_s,
        )  # fmt: skip
        self.unknown_tools = unknown_tools
        self.checklist = checklist
        self.policy_text = policy_text
        self.gate = gate
        self.verifier = verifier
        self.strict = strict
        self.allow_unverified = allow_unverified
        self.mode: GuardMode = mode  # "shadow": no checklist requirement blocks, each records what it would block
        self.trace = trace if trace is not None else Trace()
        self.principal = principal
        self.grants = grants
        self.decision_ttl_s = decision_ttl_s
        self._clock = clock
        self.denials = denials  # deny wins: shared with the executor's GrantVerifier (nonces=)
        self.approvals = approvals
        self.approval_ttl_s = float(approval_ttl_s)
        self.max_fetches = int(max_fetches)  # reads the guard may make itself per decision (check(fetch=...))
        self.fetch_timeout_s = float(fetch_timeout_s)
        self.session_wait_s = float(session_wait_s)  # how long a check waits for its session's turn
        # ... and for the results of the session's earlier allowed writes (default: as long)
        self.session_result_wait_s = None if session_result_wait_s is None else float(session_result_wait_s)
        # The stages read these settings on every call (policyguard.guard.settings): reassigning one takes effect.
        # "not checked, no verifier" is logged once per set of requirements by this log: pass one log to every
        # guard of a process (serve builds a guard per request) to log it once per process, not per request
        self.unverified_log = unverified_log if unverified_log is not None else UnverifiedLog()
        self._sessions = SessionBridge(self, sessions)
        # Message lists converted once per message: a loop sends its whole history with every call
        self._histories = HistoryCache(max_entries=HISTORY_ENTRIES, max_weight=HISTORY_MESSAGES)
        self._front: FrontCheck = FrontRefusals(self)
        self._front_in_session: FrontCheck = FrontRefusals(self, check_id_reuse=False)  # the record checks ids
        self._gate_stage: Gate = GateStage(self)
        self._verifier_stage: Verifier = VerifierStage(self)
        self._denials = DenyWins(self)
        self._recorder = Recorder(self, self._denials)
        granter = CallGranter(self)
        self._granter: Granter = granter
        self._approver: Approver = PersonApprover(self, self._recorder, self._denials, granter)

    @classmethod
    def from_files(
        cls,
        *,
        policy: str | Path,
        checklist: str | Path,
        model: str = "none",
        mode: str = "enforce",
        verifier_mode: str = "checklist",
        use_gate: bool = True,
        strict: bool = True,
        trace_path: str | Path | None = None,
        principal: str | None = None,
        unknown_tools: Literal["block", "check"] = "block",
        approvals: ApprovalQueue | None = None,
        grants: GrantIssuer | None = None,
        denials: NonceStore | None = None,
        sessions: SessionStore | None = None,
        on_unverified: Literal["allow", "block"] = "allow",
    ) -> Guard:
        """Build a guard from a policy file, a checklist file and a model spec (``"none"``: the gate only).

        ``mode`` is the guard's (``"enforce"`` or ``"shadow"``, as for :class:`Guard`); ``verifier_mode``
        what the verifier model is shown (``"checklist"``, ``"raw"``, ``"raw_traj"``, ``"checklist_only"``).
        A verifier mode passed as ``mode``, as before the guard had modes, is still read as one.

        ``on_unverified`` (with ``model="none"``): ``"allow"`` (default) lets a call run when the gate proved
        every requirement it can check and only requirements a verifier would judge are left, naming them in
        the decision's ``warnings`` and once in a ``policyguard`` log warning; ``"block"`` blocks such calls.

        Any other ``model`` goes through :func:`policyguard.resolve_model`, which
        refuses an unknown name or a provider model whose key is not set. The
        other settings are passed to :class:`Guard` unchanged. A problem with a
        file raises a :class:`PolicyGuardError` subclass naming the file.
        """
        return from_files(
            cls, policy=policy, checklist=checklist, model=model, mode=mode, verifier_mode=verifier_mode,
            use_gate=use_gate,
            trace_path=trace_path, strict=strict, principal=principal, unknown_tools=unknown_tools,
            approvals=approvals, grants=grants, denials=denials, sessions=sessions, on_unverified=on_unverified,
        )  # fmt: skip

    @property
    def counters(self) -> CounterSnapshot:
        return self._recorder.counters.snapshot()

    def context(self) -> CheckContext:
        return CheckContext(
            checklist=self.checklist,
            policy_text=self.policy_text,
            now=self._now(),
            principal=self.principal,
        )

    @property
    def sessions(self) -> SessionStore:
        """Where this guard keeps session records (an in-memory store unless ``sessions=`` was given)."""
        return self._sessions.store

    def session(self, session_id: str | None = None) -> Session:
        """The record of conversation ``session_id`` (a new random id when None), kept in :attr:`sessions`:
        the same object while this guard keeps it in memory (the newest 4,096), else rebuilt from the store."""
        return self._sessions.session(session_id)

    def check(
        self,
        call: ToolCall | Mapping[str, Any],
        trajectory: Trajectory | Sequence[Any],
        *,
        session: Session | str | None = None,
        format: Format = "auto",
        fetch: Fetcher | None = None,
    ) -> Decision:
        """Decide one pending call. Thread-safe.

        ``trajectory``: a :class:`Trajectory` or a list of provider messages
        (:func:`policyguard.trajectory.formats.to_trajectory`); ``call``: a
        :class:`ToolCall` or one provider tool call dict. A wrong type raises
        ``TypeError``, an unreadable list :class:`~policyguard.errors.FormatError`:
        never a silent BLOCK. ``session`` (a :class:`~policyguard.session.Session`
        or its id): judge on the guard's own record of the conversation merged
        with ``trajectory``, and record the decision there; without it the
        trajectory is all the guard knows. ``format``: the provider format of a message list
        (``openai_chat``, ``openai_responses``, ``anthropic``, ``langchain``), for a list that reads alike in
        several (one plain user message); detected by default. ``fetch``: the host's read tools
        (:class:`~policyguard.guard.fetching.Fetcher`): when the gate blocks only for evidence the dialogue
        lacks, the guard makes those reads itself (at most ``max_fetches``, each within ``fetch_timeout_s``)
        and judges again; never for an unauthenticated user, never a tool not declared ``mutating: false``.
        """
        call, trajectory = as_call(call), self._read_history(trajectory, format, session)
        record = self._sessions.as_session(session)
        turn = object()  # this check's hold on the session's write turn (Session.claim_writes)
        try:
            return self._check(call, trajectory, record, turn, fetch)
        finally:
            if record is not None:
                record.release(turn)

    def _check(
        self, call: ToolCall, trajectory: Trajectory, record: Session | None, turn: object, fetch: Fetcher | None = None
    ) -> Decision:
        started, ids = time.perf_counter(), call_ids(call)
        if record is None:
            early, facts = None, trajectory
        else:
            early, facts = self._sessions.from_record(call, trajectory, record, ids, turn)
        if early is not None:
            return self._finish(call, trajectory, early, started, ids, record, turn)
        context, first = self._begin(call, facts, ids, record, fetch)
        if self.verifier is None or not self._wants_verifier(first):
            return self._finish(call, trajectory, self._unverified(first, ids), started, ids, record, turn)
        second = self._verifier_stage.verify(call, trajectory, context)
        return self._finish(call, trajectory, rules.combine(first, second), started, ids, record, turn)

    def record_result(self, session: Session | str, call_id: str, content: str, *, is_error: bool = False) -> bool:
        """Tell session ``session`` the fate of call ``call_id``: it ran, with this result (``is_error``: the
        tool failed or refused). False when the session has no unanswered call of that id."""
        record = self._sessions.as_session(session)
        assert record is not None
        return record.record_result(call_id, content, is_error=is_error)

    def record_unknown(self, session: Session | str, call_id: str, why: str) -> bool:
        """Tell session ``session`` that call ``call_id`` may or may not have run (cancelled, timed out...):
        it counts as done for rules that limit repetition, and is no fact until its record is read again."""
        record = self._sessions.as_session(session)
        assert record is not None
        return record.record_unknown(call_id, why)

    async def acheck(
        self,
        call: ToolCall | Mapping[str, Any],
        trajectory: Trajectory | Sequence[Any],
        *,
        session: Session | str | None = None,
        format: Format = "auto",
        fetch: Fetcher | None = None,
    ) -> Decision:
        """Async :meth:`check` (same inputs): the verifier call is awaited; under asyncio the gate runs in a
        worker thread, so one costly check never holds up the event loop's other sessions."""
        call, trajectory = as_call(call), self._read_history(trajectory, format, session)
        record = self._sessions.as_session(session)
        turn = object()
        try:
            return await self._acheck(call, trajectory, record, turn, fetch)
        finally:
            if record is not None:
                record.release(turn)

    async def _acheck(
        self, call: ToolCall, trajectory: Trajectory, record: Session | None, turn: object, fetch: Fetcher | None = None
    ) -> Decision:
        started, ids = time.perf_counter(), call_ids(call)
        if record is None:
            early, facts = None, trajectory
        else:
            early, facts = await off_loop(self._sessions.from_record, call, trajectory, record, ids, turn)
        if early is not None:
            return self._finish(call, trajectory, early, started, ids, record, turn)
        context, first = await off_loop(self._begin, call, facts, ids, record, fetch)
        if self.verifier is None or not self._wants_verifier(first):
            return self._finish(call, trajectory, self._unverified(first, ids), started, ids, record, turn)
        second = await self._verifier_stage.averify(call, trajectory, context)
        return self._finish(call, trajectory, rules.combine(first, second), started, ids, record, turn)

    def refuse(
        self,
        call: ToolCall,
        stage: Stage,
        message: str,
        *,
        error: str | None = None,
        requirements: Sequence[RequirementResult] = (),
    ) -> Decision:
        """Block ``call`` for a reason only the integration can see (the user declined; the upstream has no
        such tool): counted, traced and denied like a :meth:`check` block, never softened by ``strict=False``."""
        started = time.perf_counter()
        ids = call_ids(call)
        self._recorder.submit(ids, None)
        decision = Decision.block(stage, message, error=error, requirements=list(requirements), **ids)
        self._recorder.decided(decision, False, started, ids, None)
        return decision

    def record_execution(
        self, decision: Decision, *, executed: bool, error: str | None = None, emit_event: bool = True
    ) -> None:
        """Tell the guard whether an allowed call reached the tool (runtime view); ``emit_event=False``:
        counters only, for executors that write their own ``execute`` event to the same trace."""
        self._recorder.execution(decision, executed=executed, error=error, emit_event=emit_event)

    # -- the order of the stages and the rules that combine them ---------------

    def _now(self) -> datetime:
        if self._clock is not None:
            return self._clock()
        return self.checklist.clock if self.checklist.clock is not None else datetime.now(timezone.utc)

    def _begin(
        self,
        call: ToolCall,
        trajectory: Any,
        ids: dict[str, Any],
        record: Session | None = None,
        fetch: Fetcher | None = None,
    ) -> tuple[CheckContext, Decision]:
        """Record the submission and run the first stage (read-only pass, refusals, or the gate)."""
        self._recorder.submit(ids, None if record is None else record.id)
        context = self.context()
        context.extra["args_sha256"] = ids["args_sha256"]  # hashed once per decision: the stages reuse it
        if fetch is not None:  # the host's read tools, for the reads the gate lacks (.fetching)
            context.extra["fetch"] = fetch
            if record is not None:  # the session record keeps the guard's reads, marked as its own
                context.extra["on_fetched"] = functools.partial(record.add_fetched, call)
        if not self.checklist.is_mutating(call.name) and plain_name(call.name):
            return context, Decision.allow("read_only", **ids)
        front = self._front if record is None else self._front_in_session
        refused = front.refuse(call, trajectory, context)
        return context, refused if refused is not None else self._gate_stage.check(call, trajectory, context)

    def _may_escalate(self, decision: Decision, *, allow_unverified: bool) -> bool:
        return rules.may_escalate(
            decision, self.checklist, has_queue=self.approvals is not None, strict=self.strict,
            allow_unverified=allow_unverified,
        )  # fmt: skip

    def _wants_verifier(self, first: Decision) -> bool:
        waiting = self._may_escalate(first, allow_unverified=True) or bool(self._shadowed(first, unjudged_ok=True))
        return rules.wants_verifier(first, approvable_block=waiting)

    def _shadowed(self, decision: Decision, *, unjudged_ok: bool = False) -> list[str]:
        """The shadowed requirements that alone block ``decision`` (empty: the block stands)."""
        if decision.outcome != "block" or decision.tool is None:
            return []
        shadowed = shadowed_ids(self.checklist, decision.tool, self.mode)
        return would_block(decision, shadowed, allow_unverified=unjudged_ok or self.allow_unverified)

    def _log_unverified(self, decision: Decision) -> None:
        """Name, once per set of requirements, what an allowed call had nobody check (the library's stderr)."""
        if not decision.allowed or self.verifier is not None or not decision.unverified:
            return
        self.unverified_log.warn(decision.unverified)

    def _unverified(self, first: Decision, ids: dict[str, Any]) -> Decision:
        return rules.without_verifier(first, ids, allow_unverified=self.allow_unverified)

    def _finish(
        self,
        call: ToolCall,
        trajectory: Trajectory,
        decision: Decision,
        started: float,
        ids: dict[str, Any],
        record: Session | None = None,
        turn: object = None,
    ) -> Decision:
        """The final decision: a person's say, deny wins, advisory mode, the session's record, the grant."""
        sha, session_id = ids["args_sha256"], None if record is None else record.id
        place = record.place_of(call) if record is not None else call_place(trajectory, call, sha)
        if decision.outcome == "escalate":  # a stage chain must never end undecided
            decision = Decision.block("guard", NO_VERIFIER_MESSAGE, error="decision chain ended on escalate")
        shadow_blocked = self._shadowed(decision.model_copy(update={"tool": call.name}))
        if shadow_blocked:  # before the approval queue: a shadowed rule asks no person
            decision = lifted(decision, shadow_blocked)
        elif self._may_escalate(decision, allow_unverified=self.allow_unverified):
            decision = self._approver.ask(
                call, trajectory, decision, args_sha256=sha, session_id=session_id, place=place
            )
        if decision.outcome == "allow" and decision.approval_id is None:
            decision = self._denials.check(call, decision, session_id, place)
        advisory = False
        if decision.outcome == "block" and not self.strict:
            advisory = True
            decision = decision.model_copy(update={"outcome": "allow"})
        warnings = [*decision.warnings, *rules.weakened(decision, advisory, gate=self.gate, verifier=self.verifier)]
        self._log_unverified(decision)
        decision = decision.model_copy(update={**ids, "warnings": warnings})
        if record is not None:
            decision = self._sessions.into_record(call, decision, record, ids, turn)
            decision = decision.model_copy(update={"session_id": record.id})
        if place:
            decision = decision.model_copy(update={"place": place})
        decision = self._granter.grant(call, decision, args_sha256=sha, session_id=session_id, place=place)
        self._recorder.decided(decision, advisory, started, ids, session_id, place)
        return decision

    def _read_history(
        self, value: Trajectory | Sequence[Any], format: Format, session: Session | str | None
    ) -> Trajectory:
        """``value`` as a trajectory. A Chat message list is converted through the guard's
        :class:`~policyguard.trajectory.formats.history_cache.HistoryCache`, keyed by the session or else by its
        first two message objects (the same for a list a loop appends to and for a new list it builds around the
        same messages, as ``messages + [reply]`` does): what the list shares with the last one of that key is not
        converted again (the answer is the same; a key only picks which list to compare with). A list that starts
        with a :class:`Message` is read by :func:`as_trajectory`; the package's messages further into a provider
        list are read by the cache as converting the whole list reads them, so no pass over the list looks for
        them."""
        if (
            isinstance(value, list)
            and value
            and format in ("auto", "openai_chat")
            and not isinstance(value[0], Message)
        ):
            if session is None:
                key = "list:" + ":".join(str(id(item)) for item in value[:2])
            else:
                key = f"session:{session if isinstance(session, str) else getattr(session, 'id', '')}"
            return self._histories.convert(key, value, format, weight=len(value))
        return _as_trajectory(value, format)


def _as_trajectory(value: Trajectory | Sequence[Any], format: Format) -> Trajectory:
    """``value`` as a trajectory; a provider message list read in ``format`` when one is named."""
    if format == "auto" or isinstance(value, (Trajectory, str)) or not isinstance(value, Sequence):
        return as_trajectory(value)
    if value and all(isinstance(item, Message) for item in value):
        return as_trajectory(value)
    return to_trajectory(list(value), format=format)
