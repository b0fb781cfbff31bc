"""The environment's read tools for ``bench sims``: the database as it stood just before a recorded write.

One fresh tau2 environment per simulation, set up with its task's initial
state, is brought forward by replaying the recorded writes (and reads: they
check nothing is off) in call order, each answered as the recording says. A
replayed call whose answer differs from the recorded one means the environment
is not the one the agent talked to: every later read raises, so the guard's
fetch fails and the write is blocked as it was without fetching (fail closed).
Reads the guard makes go to that environment at that point and change nothing
(tau2's read tools only read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from policyguard.guard.fetching import Answer

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.tasks import Task

    from ..domain import DomainData


class Diverged(RuntimeError):
    """A replayed call answered otherwise than the recording: the environment is not the recorded one."""


class RecordedEnvironment:
    """A simulation's environment, advanced call by call over its recorded calls."""

    def __init__(self, data: DomainData, task: Task | None, messages: list[Any]) -> None:
        self._data = data
        self._task = task
        self._calls = _recorded_calls(messages)  # (message index, position, call, recorded answer)
        self._env: Any = None
        self._next = 0
        self.diverged: str | None = None
        self.reads = 0

    def _environment(self) -> Any:
        if self._env is None:
            self._env = self._data.fresh_env()
            state = getattr(self._task, "initial_state", None) if self._task is not None else None
            if state is not None:
                self._env.set_state(state.initialization_data, state.initialization_actions, [])
        return self._env

    def before(self, index: int, position: int) -> RecordedFetcher:
        """The read tools on the database just before call ``position`` of message ``index``."""
        env = self._environment()
        while self.diverged is None and self._next < len(self._calls):
            at, pos, call, answer = self._calls[self._next]
            if (at, pos) >= (index, position):
                break
            self._next += 1
            if answer is None:
                continue  # never answered in the recording: it did not run
            got = env.get_response(call)
            if (got.content or "") != (answer.content or ""):  # results files may drop the error flag: the text
                self.diverged = f"{call.name} at message {at} answered otherwise than recorded"
        return RecordedFetcher(self)


class RecordedFetcher:
    """A :class:`~policyguard.guard.fetching.Fetcher` over a :class:`RecordedEnvironment` at one point."""

    def __init__(self, owner: RecordedEnvironment) -> None:
        self._owner = owner

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer:
        from tau2.data_model.message import ToolCall as Tau2ToolCall

        owner = self._owner
        if owner.diverged is not None:
            raise Diverged(owner.diverged)
        owner.reads += 1
        got = owner._environment().get_response(Tau2ToolCall(id="guard-fetch", name=tool, arguments=arguments))
        return Answer(got.content or "", bool(got.error))


def _recorded_calls(messages: list[Any]) -> list[tuple[int, int, Any, Any]]:
    answers: dict[str, Any] = {}
    for message in messages:
        if getattr(message, "role", None) == "tool":
            answers.setdefault(message.id, message)
        for sub in getattr(message, "tool_messages", None) or ():
            answers.setdefault(sub.id, sub)
    out: list[tuple[int, int, Any, Any]] = []
    for index, message in enumerate(messages):
        # The user's own calls (telecom: their device, e.g. paying a bill) change the state too: replayed as theirs.
        if getattr(message, "role", None) not in ("assistant", "user"):
            continue
        for position, call in enumerate(message.tool_calls or []):
            out.append((index, position, call, answers.get(call.id)))
    return out
