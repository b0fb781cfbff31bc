"""``policyguard verify``: decide one pending call from files, print the Decision as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policyguard.decision import decision_json
from policyguard.errors import ConfigError, FormatError
from policyguard.trajectory import strictjson
from policyguard.trajectory.inputs import as_call
from policyguard.trajectory.limits import call_problem
from policyguard.trajectory.messages import ToolCall, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.guard.core import Guard

MODES = ("checklist", "raw", "raw_traj", "checklist_only")
FORMATS = ("auto", "openai_chat", "openai_responses", "anthropic")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "verify",
        help="decide one pending tool call (exit 0 PASS, 1 BLOCK, 2 bad input)",
        description="Run the guard on one pending call and print the Decision as JSON.",
    )
    parser.add_argument("--policy", required=True, type=Path, help="the policy text (markdown)")
    parser.add_argument("--checklist", required=True, type=Path, help="the checklist YAML")
    parser.add_argument("--trajectory", required=True, type=Path, help="the dialogue so far (JSON message list)")
    parser.add_argument("--call", required=True, type=Path, help="the pending tool call (JSON)")
    parser.add_argument(
        "--model",
        default="none",
        help="verifier model: a LiteLLM name (e.g. openai/gpt-4.1-mini, or litellm:NAME), 'openai-sdk:MODEL' "
        "or 'anthropic-sdk:MODEL' (direct SDKs, extras openai/anthropic), 'scripted:FILE.json' (recorded "
        "answers, no network), or 'none' (gate only; default)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="checklist",
        help="what the verifier model is shown: checklist = policy + checklist + whole dialogue (default); "
        "raw = policy + whole dialogue, no checklist (it judges the policy as one requirement); "
        "raw_traj = policy + only the tool calls and results, no user or agent text; "
        "checklist_only = checklist + whole dialogue, no policy text",
    )
    parser.add_argument("--format", choices=FORMATS, default="auto", help="message format of --trajectory")
    parser.add_argument(
        "--no-gate",
        action="store_true",
        help="skip the deterministic gate (verifier only); with --model none nothing is checked (warned on stderr)",
    )
    parser.add_argument(
        "--advisory",
        action="store_true",
        help="record a BLOCK verdict, even a failed verifier, but let the call run (warned on stderr and in "
        "the Decision's warnings); the exit code still says BLOCK",
    )
    parser.add_argument(
        "--on-unverified",
        choices=("allow", "block"),
        default="allow",
        help="with --model none, requirements only a verifier can judge: allow the call (default; they are "
        "named on stderr and in the Decision's warnings) or block it",
    )
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="shadow mode: no checklist requirement blocks; the Decision's shadow_blocked names those that would "
        "have (warned on stderr); errors, missing evidence and an effect's money rules still block",
    )
    parser.add_argument("--trace", type=Path, default=None, help="append the audit trace to this JSONL file")
    parser.add_argument(
        "--unknown-tools",
        choices=("block", "check"),
        default="block",
        help="a tool the checklist does not name: block it (default) or judge it as mutating (opt-in)",
    )
    parser.add_argument(
        "--print-prompt",
        action="store_true",
        help="print the verifier prompt this call would get (parts in order, cached ones marked) and exit 0; "
        "no gate, no model call",
    )
    parser.set_defaults(func=run)


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; any failure is a :class:`ConfigError` naming the file, never a traceback."""
    try:
        return strictjson.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: {what} is nested too deeply to read") from None
    except ValueError as exc:  # invalid JSON, bad UTF-8, an integer too long to convert
        raise ConfigError(f"{path}: {what} is not valid JSON: {exc}") from None


def _check_text(path: Path, what: str) -> None:
    """Fail with one line naming ``path`` when it cannot be read as UTF-8 text."""
    try:
        path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {what} is not UTF-8 text: {exc}") from None


def parse_call(data: Any, source: str = "<call>") -> ToolCall:
    """A pending call in our own shape or any supported provider's shape.

    Arguments that break :mod:`policyguard.trajectory.limits` (``NaN``, ``Infinity``,
    integers beyond 64 bits, too deep) are refused like unreadable ones.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a tool call must be a JSON object")
    try:
        call = as_call(data)
    except FormatError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a tool call: {_first_line(exc)}") from None
    problem = call_problem(call.arguments)
    if problem is not None:
        raise ConfigError(f"{source}: call {call.id!r}: {problem}")
    return call


def _first_line(exc: Exception) -> str:
    """pydantic errors span several lines; the CLI prints one."""
    return " ".join(str(exc).split())


def run(args: argparse.Namespace) -> int:
    from policyguard.guard.core import Guard
    from policyguard.trajectory.formats import to_trajectory

    _check_text(args.policy, "policy")
    try:
        guard = Guard.from_files(
            policy=args.policy,
            checklist=args.checklist,
            model=args.model,
            mode="shadow" if args.shadow else "enforce",
            verifier_mode=args.mode,
            use_gate=not args.no_gate,
            strict=not args.advisory,
            trace_path=args.trace,
            unknown_tools=args.unknown_tools,
            on_unverified=args.on_unverified,
        )
    except OSError as exc:  # the trace file, or a file named by --model
        raise ConfigError(f"{exc.filename or 'a file'}: cannot open: {exc.strerror or exc}") from None
    raw = _read_json(args.trajectory, "trajectory")
    system = None
    if isinstance(raw, dict):  # {"messages": [...]} or Anthropic's {"system": ..., "messages": [...]}
        if "messages" not in raw:
            raise ConfigError(f"{args.trajectory}: expected a message list or an object with 'messages'")
        system = raw.get("system")
        raw = raw["messages"]
    try:
        trajectory = to_trajectory(raw, format=args.format, system=system)
    except FormatError as exc:
        raise ConfigError(f"{args.trajectory}: {exc}") from None
    call = parse_call(_read_json(args.call, "call"), str(args.call))
    if args.print_prompt:
        return print_prompt(guard, call, trajectory, args.mode)
    decision = guard.check(call, trajectory)
    for warning in decision.warnings:  # stdout holds only the JSON; the weakening is said where a person looks
        print(f"policyguard: WARNING: {warning}", file=sys.stderr)
    json.dump(decision_json(decision), sys.stdout, indent=2)
    sys.stdout.write("\n")
    if decision.verdict == "BLOCK":
        return 1
    return 0


def print_prompt(guard: Guard, call: ToolCall, trajectory: Trajectory, mode: str) -> int:
    """Write the verifier's request for ``call`` to stdout, one headed block per prompt part."""
    from policyguard.verifier.llm import LLMVerifier
    from policyguard.verifier.models.scripted import ScriptedModel

    verifier = guard.verifier
    if not isinstance(verifier, LLMVerifier):  # --model none: the prompt a verifier in --mode would get
        verifier = LLMVerifier(ScriptedModel(), mode=mode)  # type: ignore[arg-type]
    request = verifier.build_request(call, trajectory, guard.context())
    for number, part in enumerate(request.parts, 1):
        cached = ", cached" if part.cache else ""
        sys.stdout.write(f"===== prompt part {number} of {len(request.parts)}: {part.role}{cached} =====\n")
        sys.stdout.write(part.content.rstrip("\n") + "\n")
    return 0
