"""A dialogue replayed on a real tau2 environment, and the reads a call needs.

:class:`Transcript` keeps the dialogue as tau2 message objects (so tau2's own
evaluator can re-execute it) and executes every tool call on a real
environment, so each tool result in it is the one tau2 produces.

:func:`ensure_reads` plays the diligent agent: before a write it makes every
read the checklist's facts need that the dialogue lacks (and re-reads a fact
last read before an earlier write, since that write may have changed it). The
reads come from the checklist (``facts:`` and ``principal:``), not from a list
kept here, so the replay needs exactly what the gate needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from policyguard.checklist.schema import Checklist
from policyguard.gate.cel import compile_check
from policyguard.gate.facts import resolve_facts, resolve_principal, successful_results
from policyguard.trajectory.messages import ToolCall, Trajectory

from .domain import to_policyguard

if TYPE_CHECKING:  # pragma: no cover
    from tau2.environment.environment import Environment


class Transcript:
    """tau2 messages plus the environment that answered their tool calls."""

    def __init__(self, env: Environment, prefix: str = "c") -> None:
        self.env = env
        self.messages: list[Any] = []
        self.prefix = prefix
        self._count = 0
        self.last_write_index = -1

    def user(self, text: str) -> None:
        from tau2.data_model.message import UserMessage

        self.messages.append(UserMessage(role="user", content=text))

    def say(self, text: str) -> None:
        from tau2.data_model.message import AssistantMessage

        self.messages.append(AssistantMessage(role="assistant", content=text))

    def new_call(self, name: str, arguments: dict[str, Any]) -> Any:
        """A tau2 ToolCall with a fresh id (not yet in the dialogue)."""
        from tau2.data_model.message import ToolCall as Tau2ToolCall

        self._count += 1
        return Tau2ToolCall(id=f"{self.prefix}{self._count}", name=name, arguments=arguments)

    def execute(self, call: Any, *, write: bool = False) -> Any:
        """Append the call and the environment's real answer; returns the ToolMessage."""
        from tau2.data_model.message import AssistantMessage

        self.messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        result = self.env.get_response(call)
        self.messages.append(result)
        if write:
            self.last_write_index = len(self.messages) - 1
        return result

    def call(self, name: str, arguments: dict[str, Any], *, write: bool = False) -> Any:
        return self.execute(self.new_call(name, arguments), write=write)

    def user_call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The USER calls one of their own tools (telecom: their device) and sees its real answer."""
        from tau2.data_model.message import ToolCall as Tau2ToolCall
        from tau2.data_model.message import UserMessage

        self._count += 1
        call = Tau2ToolCall(id=f"{self.prefix}u{self._count}", name=name, arguments=arguments, requestor="user")
        self.messages.append(UserMessage(role="user", tool_calls=[call]))
        result = self.env.get_response(call)
        self.messages.append(result)
        return result

    def trajectory(self) -> Trajectory:
        return to_policyguard(self.messages)


def as_call(tau2_call: Any) -> ToolCall:
    return ToolCall(id=tau2_call.id, name=tau2_call.name, arguments=dict(tau2_call.arguments))


def needed_facts(checklist: Checklist, tool: str) -> set[str]:
    """Facts read by the checks of ``tool``'s requirements (and the general rules)."""
    names: set[str] = set()
    for req in checklist.requirements_for(tool):
        if req.check is not None:
            names |= _fact_names(req.check)
    return names


@lru_cache(maxsize=1024)
def _fact_names(expression: str) -> frozenset[str]:
    """The facts one check reads; compiled once per expression (the replay asks for the same few hundreds of times)."""
    return frozenset(compile_check(expression).fact_names())


def ensure_reads(
    transcript: Transcript,
    checklist: Checklist,
    tool: str,
    arguments: dict[str, Any],
    user_id: str | None,
    context: Callable[[str], list[dict[str, Any]]] | None = None,
) -> list[str]:
    """Make the reads ``tool(arguments)`` needs and the dialogue lacks; returns them as ``tool(args)`` strings.

    A fact whose match names no key ("the reservation read most recently")
    cannot say which record to read; ``context(read_tool)`` supplies the
    records the dialogue is about (e.g. the reservation a complaint concerns).
    """
    made: list[str] = []
    tried: set[str] = set()
    principal_source = checklist.principal
    if principal_source is not None and user_id is not None:
        if resolve_principal(checklist, transcript.trajectory(), None) is None:
            keys = {principal_source.field: user_id}
            transcript.call(principal_source.tool, keys)
            made.append(_label(principal_source.tool, keys))
    needed = needed_facts(checklist, tool)
    pending = ToolCall(id="pending", name=tool, arguments=arguments)
    for _ in range(8):
        trajectory = transcript.trajectory()
        principal = resolve_principal(checklist, trajectory, None)
        facts = resolve_facts(checklist, pending, trajectory, needed, principal=principal)
        todo: list[tuple[str, dict[str, Any]]] = []
        for name, keys in facts.keys.items():
            if checklist.facts[name].collect != "newest":
                continue  # a list of reads or calls is never missing and names no record to re-read
            source_tool = checklist.facts[name].tool
            if name in facts.missing:
                if keys or context is None:
                    todo.append((source_tool, keys))
                else:
                    todo.extend((source_tool, found) for found in context(source_tool)[:1])
            elif transcript.last_write_index >= 0 and keys:  # a fact with no keys names no record to re-read
                sources = (source_tool, *checklist.facts[name].refreshed_by)  # a write's own result is fresh
                newest = max(r.index for t in sources for r in successful_results(trajectory, t, keys))
                if newest < transcript.last_write_index:
                    todo.append((source_tool, keys))
        fresh = [(t, k) for t, k in todo if _label(t, k) not in tried]
        if not fresh:
            break
        for source_tool, keys in fresh:
            label = _label(source_tool, keys)
            if label in tried:
                continue
            tried.add(label)
            transcript.call(source_tool, dict(keys))
            made.append(label)
    return made


def _label(tool: str, keys: dict[str, Any]) -> str:
    return f"{tool}({json.dumps(keys, sort_keys=True)})"
