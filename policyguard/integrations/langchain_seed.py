"""Seeding the guard's record with the messages a LangChain invocation was given.

:class:`~policyguard.integrations.langchain.PolicyGuardMiddleware` calls these
from its ``before_agent`` hook, which LangChain runs once per invocation, before
any ``before_model`` hook (``SummarizationMiddleware`` rewrites the messages
there). What the record took at that point it keeps, whatever the state later
forgets: a write present in the messages passed in always counts.

The promise holds only if no other hook ran before the seed: LangChain runs the
``before_agent`` hooks in the order of ``middleware=[...]``, and one listed
ahead of the guard could rewrite the messages first. :func:`hooks_before`
counts them (with LangGraph's ``RemainingSteps``: each hook is a step of its
own, and nothing else runs before them), and :func:`order_error` is the refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from policyguard.errors import ConfigError, FormatError
from policyguard.trajectory.formats.langchain import read as read_langchain
from policyguard.trajectory.messages import DuplicateCallId

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.guard import Guard

REMAINING_KEY = "policyguard_remaining_steps"
UNSEEDED_KEY = "policyguard_unseeded"


def hooks_before(state: Any, config: Mapping[str, Any] | None) -> int | None:
    """How many steps of this run came before the calling ``before_agent`` hook: the ``before_agent`` hooks
    listed ahead of it. None when LangGraph does not say (no run config, no remaining-steps count)."""
    remaining = state.get(REMAINING_KEY) if isinstance(state, Mapping) else None
    limit = config.get("recursion_limit") if config is not None else None
    if not isinstance(remaining, int) or not isinstance(limit, int):
        return None
    return max(0, limit - 1 - remaining)  # the run's first node has recursion_limit - 1 steps left


def order_error(count: int) -> ConfigError:
    """The one-line refusal of a middleware list whose ``before_agent`` hooks run before the guard's."""
    hooks = "hook" if count == 1 else "hooks"
    return ConfigError(
        f"PolicyGuardMiddleware must be the first middleware with a before_agent hook in "
        f"create_agent(middleware=[...]): {count} before_agent {hooks} ran before it and could rewrite the messages "
        "its record is seeded from; list PolicyGuardMiddleware ahead of them"
    )


def skipped_error() -> ConfigError:
    """The one-line refusal of a write in a run without a thread id whose ``before_agent`` hook did not run."""
    return ConfigError(
        "PolicyGuardMiddleware's before_agent hook did not run in this invocation (a hook ahead of it jumped past it, "
        "or the middleware is used outside create_agent), so its record lacks the messages passed in; list "
        "PolicyGuardMiddleware first among the middleware with a before_agent hook"
    )


def seed(guard: Guard, session_id: str, state: Any) -> str | None:
    """Merge the state's messages into session ``session_id``'s record; why it could not, or None.

    A reason makes every write of the invocation refused: the record may lack
    a write the messages showed, and the state may no longer show it when the
    write comes.
    """
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    try:
        if not isinstance(messages, (list, tuple)):
            raise FormatError("the agent state has no message list")
        trajectory = read_langchain(list(messages))
        record = guard.session(session_id)
        turn = object()  # the record is merged holding the session, as a check merges it
        if not record.claim(turn, guard.session_wait_s, write=False):
            return "the guard's record of this conversation was busy for too long"
        try:
            record.sync()
            record.observe(trajectory)
        finally:
            record.release(turn)
    except (FormatError, DuplicateCallId) as exc:
        return f"the messages passed in cannot be read faithfully: {exc}"
    except Exception as exc:  # a store that cannot take them vouches for nothing
        return f"the guard's record could not take the messages passed in: {type(exc).__name__}: {exc}"
    return None
