"""What :meth:`Guard.check` accepts besides its own types, read once at the call.

A plain list of provider messages (OpenAI Chat dicts, OpenAI Responses items,
Anthropic messages; the format is detected) becomes a :class:`Trajectory`, and
a provider tool call dict becomes a :class:`ToolCall`, through
:mod:`policyguard.trajectory.formats`, so a list passed by mistake is judged like the same
dialogue wrapped in a ``Trajectory``. Anything else raises a ``TypeError``
naming what to pass; a list or call that cannot be read faithfully raises
:class:`~policyguard.errors.FormatError` naming the message. Never a silent
BLOCK: a wrong argument is the integrator's bug, not the agent's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .messages import Message, ToolCall, Trajectory

TRAJECTORY_HINT = (
    "pass a policyguard.Trajectory, or a list of OpenAI Chat messages, OpenAI Responses items or Anthropic "
    "messages (read with policyguard.trajectory.formats.to_trajectory)"
)
CALL_HINT = (
    "pass a policyguard.ToolCall, or one tool call dict: OpenAI Chat {'id', 'function': {...}}, "
    "Responses {'type': 'function_call', ...} or Anthropic {'type': 'tool_use', ...}"
)


def as_trajectory(value: Any) -> Trajectory:
    """``value`` as a :class:`Trajectory`: itself, a list of :class:`Message`, or a provider message list."""
    if isinstance(value, Trajectory):
        return value
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, Message) for item in value):
            return Trajectory(messages=list(value))
        from .formats import to_trajectory

        return to_trajectory(list(value))
    raise TypeError(f"Guard.check: trajectory is a {type(value).__name__}; {TRAJECTORY_HINT}")


def as_call(value: Any) -> ToolCall:
    """``value`` as a :class:`ToolCall`: itself, or one provider tool call dict."""
    if isinstance(value, ToolCall):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"Guard.check: call is a {type(value).__name__}; {CALL_HINT}")
    data = dict(value)
    if "function" in data:
        from .formats.openai_chat import tool_call_from_openai

        return tool_call_from_openai(data)
    if data.get("type") == "tool_use":
        from .formats.anthropic import tool_call_from_anthropic

        return tool_call_from_anthropic(data)
    if data.get("type") == "function_call":
        from .formats.openai_responses import tool_call_from_openai as from_responses

        return from_responses(data)
    try:
        return ToolCall.model_validate(data)
    except ValueError:
        raise TypeError(f"Guard.check: call {sorted(data)!r} is not a tool call; {CALL_HINT}") from None
