"""The front refusals: a mutating call that no stage may judge as it stands is blocked before the gate.

In this order: a tool the checklist does not name (or a name that is not
plain: ``Cancel_reservation``, a zero-width space, a ``functions.`` prefix),
unless the integrator opted in with ``unknown_tools="check"``; arguments
outside the limits of :mod:`policyguard.trajectory.limits` (NaN, Infinity,
integers beyond 64 bits, deep nesting); a dialogue whose call ids pair
ambiguously; a call id already used or answered; a declared money effect
whose amount is not a positive finite number within the tool's ``ceiling``
(:mod:`policyguard.gate.effects`).
"""

from __future__ import annotations

from policyguard.decision import Decision, RequirementResult
from policyguard.gate.effects import effect_problem
from policyguard.stages import PAIRED_VIEW, CheckContext
from policyguard.trajectory.limits import call_problem
from policyguard.trajectory.messages import DuplicateCallId, ToolCall, ToolResultsView, Trajectory, last_mention
from policyguard.trajectory.toolnames import unknown_tool_message

from .calls import context_ids, plain_name
from .settings import GuardSettings


class FrontRefusals:
    """The front checks of one guard, a :class:`~policyguard.stages.FrontCheck`.

    ``check_id_reuse`` is False for calls checked in a session: the session
    checks the call id on its own record instead of the dialogue's.
    """

    __slots__ = ("settings", "check_id_reuse")

    def __init__(self, settings: GuardSettings, check_id_reuse: bool = True) -> None:
        self.settings = settings
        self.check_id_reuse = check_id_reuse

    def refuse(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision | None:
        ids = context_ids(call, context)
        checklist = self.settings.checklist
        if not plain_name(call.name) or checklist.tool_spec(call.name) is None:
            if self.settings.unknown_tools == "block" or not plain_name(call.name):
                return Decision.block(
                    "unknown_tool",
                    unknown_tool_message(call.name, checklist.tools),
                    error="the checklist does not name this tool",
                    **ids,
                )
        problem = call_problem(call.arguments)
        if problem is not None:
            return Decision.block(
                "bad_call",
                f"The call could not be checked because its arguments are not plain JSON values ({problem}), "
                "so it was not performed. Send it again with ordinary numbers and values.",
                error=problem,
                **ids,
            )
        duplicate = _pair_once(trajectory, context)
        if duplicate is not None:
            return Decision.block(
                "bad_call",
                f"The dialogue is ambiguous ({duplicate}), so no fact in it can be trusted and this call was not "
                "performed. Tool call ids must be unique.",
                error=str(duplicate),
                **ids,
            )
        reuse = _id_reuse(call, trajectory) if self.check_id_reuse else None
        if reuse is not None:
            return Decision.block(
                "bad_call",
                f"The call id {call.id!r} {reuse}, so this call was not performed. Make the call again with a new id.",
                error=f"call id {reuse}",
                **ids,
            )
        spec = checklist.tool_spec(call.name)
        if spec is not None and spec.effect is not None:
            found = effect_problem(spec.effect, call.arguments)
            if found is not None:
                requirement, message = found
                result = RequirementResult(id=requirement, status="NOT_MET", evidence=message, judged_by="gate")
                return Decision.block("gate", message, requirements=[result], **ids)
        return None


def _pair_once(trajectory: Trajectory, context: CheckContext) -> DuplicateCallId | None:
    """The dialogue's duplicate-id problem, or None. A dialogue paired here (not a session record, which is
    paired as it grows) is kept in ``context.extra[PAIRED_VIEW]`` with its trajectory, for the gate."""
    if getattr(trajectory, "paired", False):
        return trajectory.duplicate_call_id()
    try:
        view = ToolResultsView(trajectory)
    except DuplicateCallId as exc:
        return exc
    context.extra[PAIRED_VIEW] = (trajectory, view)
    return None


def _id_reuse(call: ToolCall, trajectory: Trajectory) -> str | None:
    """Why the pending call's id cannot be trusted to name this call, or None.

    The trajectory may already carry the pending call, unanswered, as the newest
    call with its id (a loop checks the message it just received). An id may be
    reused once the earlier call with it was answered; it may not name another
    call that is still unanswered, and the pending call may not be answered already.
    A tool message with the id counts as an answer even when no call before it has the id.

    Read from the newest message back: from the newest message naming the id, when the list carries its pairing.
    """
    messages = trajectory.messages
    newest: ToolCall | None = None
    answered = False  # a result with the id after the newest call with it
    for index in range(last_mention(messages, call.id), -1, -1):
        message = messages[index]
        calls = [other for other in message.tool_calls if other.id == call.id]
        if calls:
            newest = calls[-1]  # a result in the same message came before its calls: it answers an earlier one
            break
        if message.role == "tool" and message.tool_call_id == call.id:
            answered = True
    if newest is not None and (newest.name, newest.arguments) != (call.name, call.arguments):
        return None if answered else "is used by another call in the dialogue"  # answered: the pending is new
    return "was already answered by a tool result" if answered else None
