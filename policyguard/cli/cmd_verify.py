"""``policyguard verify``: decide one pending call from files, print the Decision as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, FormatError
from ..messages import ToolCall, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from ..guard import Guard

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
        help="verifier model: a litellm name, 'scripted:FILE.json', or 'none' (gate only; default)",
    )
    parser.add_argument("--mode", choices=MODES, default="checklist", help="verifier input regime")
    parser.add_argument("--format", choices=FORMATS, default="auto", help="message format of --trajectory")
    parser.add_argument("--no-gate", action="store_true", help="skip the deterministic gate (verifier only)")
    parser.add_argument("--advisory", action="store_true", help="log a BLOCK verdict but let the call run")
    parser.add_argument("--trace", type=Path, default=None, help="append the audit trace to this JSONL file")
    parser.add_argument(
        "--print-prompt",
        action="store_true",
        help="print the verifier prompt this call would get (parts in order, cached ones marked) and exit 0; "
        "no gate, no model call",
    )
    parser.set_defaults(func=run)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: {what} is not valid JSON: {exc}") from exc


def parse_call(data: Any, source: str = "<call>") -> ToolCall:
    """A pending call in our own shape or any supported provider's shape."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a tool call must be a JSON object")
    try:
        if "function" in data:  # OpenAI Chat Completions
            from ..formats.openai_chat import tool_call_from_openai

            return tool_call_from_openai(data)
        if data.get("type") == "tool_use":  # Anthropic
            from ..formats.anthropic import tool_call_from_anthropic

            return tool_call_from_anthropic(data)
        if data.get("type") == "function_call":  # OpenAI Responses
            arguments = data.get("arguments", "{}")
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            return ToolCall(id=data["call_id"], name=data["name"], arguments=parsed)
        return ToolCall.model_validate(data)
    except FormatError:
        raise
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a tool call: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    from ..formats import to_trajectory
    from ..guard import Guard

    guard = Guard.from_files(
        policy=args.policy,
        checklist=args.checklist,
        model=args.model,
        mode=args.mode,
        use_gate=not args.no_gate,
        strict=not args.advisory,
        trace_path=args.trace,
    )
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
        raise ConfigError(f"{args.trajectory}: {exc}") from exc
    call = parse_call(_read_json(args.call, "call"), str(args.call))
    if args.print_prompt:
        return print_prompt(guard, call, trajectory, args.mode)
    decision = guard.check(call, trajectory)
    payload = decision.model_dump(mode="json", exclude_none=True)
    payload["unverified"] = decision.unverified
    json.dump(payload, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if decision.verdict == "BLOCK":
        return 1
    return 0


def print_prompt(guard: Guard, call: ToolCall, trajectory: Trajectory, mode: str) -> int:
    """Write the verifier's request for ``call`` to stdout, one headed block per prompt part."""
    from ..models.scripted import ScriptedModel
    from ..verifier import LLMVerifier

    verifier = guard.verifier
    if not isinstance(verifier, LLMVerifier):  # --model none: the prompt a verifier in --mode would get
        verifier = LLMVerifier(ScriptedModel(), mode=mode)  # type: ignore[arg-type]
    request = verifier.build_request(call, trajectory, guard.context())
    for number, part in enumerate(request.parts, 1):
        cached = ", cached" if part.cache else ""
        sys.stdout.write(f"===== prompt part {number} of {len(request.parts)}: {part.role}{cached} =====\n")
        sys.stdout.write(part.content.rstrip("\n") + "\n")
    return 0
