"""What the agent is told when the guard does not let a call run.

The guard's own remediation texts, and the tool result that stands in for a
blocked call's effect in the dialogue.
"""

from __future__ import annotations

from policyguard.decision import Decision
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

NO_VERIFIER_MESSAGE = (
    "This action needs a policy check that could not be run, so it was not performed. "
    "Do not retry it now; tell the user it cannot be completed at the moment or transfer them to a human agent."
)

SESSION_BUSY_MESSAGE = (
    "This action was not performed: another change in this conversation is still being checked. "
    "Send it again on its own once that one is done."
)

APPROVAL_UNAVAILABLE = (
    "This action needs a supervisor's approval, and the approval queue could not be reached, so it was not "
    "performed. Do not retry it now; tell the user it cannot be completed at the moment."
)


def remediation_message(call: ToolCall, decision: Decision) -> Message:
    """The error tool result that replaces a blocked call's effect for the agent."""
    text = decision.message or NO_VERIFIER_MESSAGE
    return Message(role="tool", tool_call_id=call.id, name=call.name, content=text, is_error=True)


def after_block(trajectory: Trajectory, call: ToolCall, decision: Decision) -> tuple[Trajectory, Trajectory]:
    """The two views of a dialogue after ``call`` was blocked.

    * the agent's view keeps the call and answers it with the remediation as an
      error tool result (providers require every call to be answered);
    * the environment's view drops the call entirely, so replaying or
      evaluating the trajectory never sees an effect that did not happen.
    """
    agent = Trajectory(messages=list(trajectory.messages))
    if not any(c.id == call.id for m in agent.messages for c in m.tool_calls):
        agent.append(Message(role="assistant", tool_calls=[call]))
    agent.append(remediation_message(call, decision))
    return agent, trajectory.without_call(call.id)
