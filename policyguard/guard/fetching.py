"""The guard reads what it needs: reads made through the host's own read tools, bounded and failing closed.

A host that has the agent's tools passes a :class:`Fetcher` to
:meth:`~policyguard.guard.core.Guard.check` (``fetch=``). When the gate blocks a
write only for evidence the dialogue lacks (:func:`policyguard.gate.fetch.reads_to_fetch`
says which reads could cure it), the guard calls those read tools itself and
judges again on the dialogue plus their results. The rules:

* only tools the checklist declares ``mutating: false``; the checklist's
  ``fetch:`` only on such tools (refused at load);
* never when the dialogue authenticated nobody: "authenticate the user first"
  stands, and the second judgement keeps the principal found before any fetch
  (a fetched profile or record never sets or changes it);
* at most ``max_fetches`` reads per decision (default 4), ``fetch_timeout_s``
  per read, each distinct read once per decision;
* a read that raises, times out, answers with an error, with something that is
  not text, or with more than :data:`MAX_FETCHED_CHARS` characters, or reads
  that still leave evidence missing (not JSON, another record): the block
  stands exactly as it was before any fetch;
* only after the gate itself blocked (an earlier stage's block is final);
* each read made is emitted to the audit trace as a ``fetch`` event (tool,
  arguments, sha256 of the result, time) and handed to the session record,
  marked as the guard's own; the agent's dialogue is not changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from policyguard.decision import Decision
from policyguard.gate.facts import FETCH_ID_PREFIX, calls_before, resolve_principal
from policyguard.gate.fetch import MISSING_EVIDENCE, FetchedView, ReadCall, reads_to_fetch
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import ToolCall, ToolResult, ToolResultsView, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.checklist.schema import Checklist
    from policyguard.stages import Gate

    from .settings import GuardSettings

MAX_FETCHED_CHARS = 1_000_000
DEFAULT_MAX_FETCHES = 4
DEFAULT_FETCH_TIMEOUT_S = 10.0
_ids = itertools.count(1)


@dataclass(frozen=True)
class Answer:
    """What a read tool answered: its text, and whether it is an error."""

    content: str
    is_error: bool = False


@runtime_checkable
class Fetcher(Protocol):
    """The host's read tools, as the guard calls them: ``tool(**arguments)`` -> its answer.

    Raise (or answer ``is_error``) when the tool fails: the block then stands.
    """

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer: ...


class ToolTable:
    """A :class:`Fetcher` over a table of plain functions ``name -> fn(**arguments)`` (the host's tools).

    A result that is not a string is sent as JSON (``default=str``); a tool
    the table lacks raises :class:`LookupError`.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any]]) -> None:
        self._tools = dict(tools)

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer:
        import json

        fn = self._tools.get(tool)
        if fn is None:
            raise LookupError(f"the host has no tool {tool!r}")
        value = fn(**arguments)
        if isinstance(value, Answer):
            return value
        return Answer(value if isinstance(value, str) else json.dumps(value, default=str))

    @property
    def names(self) -> list[str]:
        """The tools in the table."""
        return sorted(self._tools)


def read_tools(checklist: Checklist, tools: Mapping[str, Callable[..., Any]]) -> ToolTable | None:
    """The host's tools the guard may call itself: those the checklist declares ``mutating: false``.

    An unknown tool counts as mutating and stays out; None when no tool is left
    (the host then keeps today's "read first" remediation).
    """
    reads = {name: fn for name, fn in tools.items() if not checklist.is_mutating(name)}
    return ToolTable(reads) if reads else None


class ReadsWanted:
    """A :class:`Fetcher` that reads nothing: it notes the reads the guard would make (``serve``'s ``needs_reads``).

    For a host that cannot hand the guard its tools in process: the guard stops
    before the first read, the block stands as it is, and :attr:`reads` says
    which reads (tool, arguments) would have been made first. The host makes
    them and asks again with their results in its dialogue; a read that needs
    the result of another (the products of an order's items) is named on the
    next round. Nothing is recorded or traced for reads that were not made.
    """

    plans_only = True

    def __init__(self) -> None:
        self.reads: list[ReadCall] = []

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer:
        raise LookupError("this fetcher only notes the reads the guard wants")


@dataclass(frozen=True)
class FetchedRead:
    """One read the guard made: what it called, when, and the digest of what came back (or why nothing did)."""

    call: ToolCall
    at: float
    result_sha256: str | None
    is_error: bool
    problem: str | None = None
    content: str = ""

    def event(self) -> dict[str, Any]:
        """The audit trace's ``fetch`` event fields."""
        return {
            "call_id": self.call.id, "tool": self.call.name, "arguments": self.call.arguments,
            "result_sha256": self.result_sha256, "is_error": self.is_error, "problem": self.problem,
            "fetched_at": self.at, "fetched_by": "guard",
        }  # fmt: skip


def run_read(fetcher: Fetcher, read: ReadCall, timeout_s: float) -> FetchedRead:
    """Call one read with a deadline; any failure is a :class:`FetchedRead` with ``problem`` set."""
    call = ToolCall(id=f"{FETCH_ID_PREFIX}{next(_ids)}", name=read.tool, arguments=dict(read.arguments))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["answer"] = fetcher(read.tool, dict(read.arguments))
        except BaseException as exc:  # noqa: BLE001 - any failure of the host's tool is a failed read
            box["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=target, name="policyguard-fetch", daemon=True)
    at = time.time()
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():  # the thread cannot be stopped; its answer, if it ever comes, is dropped
        return FetchedRead(call, at, None, True, f"timed out after {timeout_s:g} s")
    if "error" in box:
        return FetchedRead(call, at, None, True, f"the read raised {box['error']}")
    answer = box.get("answer")
    if not isinstance(answer, Answer) or not isinstance(answer.content, str):
        return FetchedRead(call, at, None, True, f"the read answered {type(answer).__name__}, not text")
    if len(answer.content) > MAX_FETCHED_CHARS:
        return FetchedRead(call, at, None, True, f"the answer has over {MAX_FETCHED_CHARS} characters")
    digest = hashlib.sha256(answer.content.encode("utf-8", "surrogatepass")).hexdigest()
    problem = "the read answered with an error" if answer.is_error else None
    return FetchedRead(call, at, digest, answer.is_error, problem, answer.content)


def judge_with_fetches(
    settings: GuardSettings,
    gate: Gate,
    call: ToolCall,
    trajectory: Trajectory,
    context: CheckContext,
    decision: Decision,
    fetcher: Fetcher,
) -> tuple[Decision, list[FetchedRead]]:
    """The gate's decision after the reads that could cure its block (see the module doc)."""
    checklist = settings.checklist
    max_fetches = int(getattr(settings, "max_fetches", DEFAULT_MAX_FETCHES))
    timeout_s = float(getattr(settings, "fetch_timeout_s", DEFAULT_FETCH_TIMEOUT_S))
    if max_fetches <= 0:
        return decision, []
    view: Any = trajectory if getattr(trajectory, "paired", False) else ToolResultsView(trajectory)
    principal = resolve_principal(checklist, view, context.principal)
    if principal is None:
        return decision, []  # nobody is authenticated: a read the guard makes would not change that
    base = calls_before(view, call)
    pinned = dataclasses.replace(context, principal=principal, extra=dict(context.extra))
    made: list[FetchedRead] = []
    tried: set[str] = set()
    current, fetched_view = decision, view
    while len(made) < max_fetches:
        reads = reads_to_fetch(checklist, call, fetched_view, current, principal, tried)
        if not reads:
            break
        if isinstance(fetcher, ReadsWanted):
            fetcher.reads.extend(reads[:max_fetches])
            return decision, []
        for read in reads[: max_fetches - len(made)]:
            tried.add(read.label)
            result = run_read(fetcher, read, timeout_s)
            made.append(result)
            if result.problem is not None:
                return decision, made  # a failed read: the block stands as it was
        answered = [(r.call, ToolResult(call=r.call, content=r.content, is_error=False, index=-1)) for r in made]
        fetched_view = FetchedView(base, answered)
        current = gate.check(call, fetched_view, pinned).model_copy(  # type: ignore[arg-type]  # duck-typed view
            update={k: getattr(decision, k) for k in ("call_id", "tool", "args_sha256")}
        )
        if current.outcome != "block":
            break
    if current.outcome == "block" and _only_missing(current):
        return decision, made  # what the reads made did not supply: the agent is told what it was told before
    return current, made


def _only_missing(decision: Decision) -> bool:
    """Blocked only for evidence still missing (not for a check the fetched records make false)."""
    not_met = [r for r in decision.requirements if r.status == "NOT_MET"]
    return bool(not_met) and all((r.evidence or "").startswith(MISSING_EVIDENCE) for r in not_met)
