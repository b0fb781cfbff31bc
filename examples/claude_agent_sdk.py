"""A Claude Agent SDK client whose tool calls are guarded by hooks, with no API key.

Run from the checkout: ``python examples/claude_agent_sdk.py``
(needs ``pip install -c constraints.txt -e '.[claude-agent-sdk]'``).

Two stand-ins replace the paid parts:

* Claude Code and its model: ``claude_code_stand_in.py``, started by the SDK as its CLI
  (``cli_path``). It speaks the SDK's control protocol and plays a script instead of asking
  a model: it asks the hooks before each tool call and runs the tools of the in-process MCP
  server. Drop ``cli_path`` and ``env`` for the real CLI (it needs ``ANTHROPIC_API_KEY``);
* the verifier model: ``scripted:...claude_agent_sdk.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

The customer's two messages are two turns of one ``ClaudeSDKClient`` session, so the guard keeps
one record, keyed by the SDK's ``session_id``. The refund over the captured amount is denied (the
model reads the remediation as the tool's result; the tool never runs); the refund the customer
said yes to runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# claude_agent_sdk package: import the package with the folder set aside, then put it back.
HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p not in ("", HERE)]
import claude_agent_sdk  # noqa: E402, F401

sys.path.insert(0, HERE)

import claude_code_stand_in as stand_in  # noqa: E402
import refund_desk as desk  # noqa: E402
from claude_agent_sdk import (  # noqa: E402
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)

from policyguard import Guard  # noqa: E402
from policyguard.integrations.claude_agent_sdk import guard_hooks  # noqa: E402


def as_result(value: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(value)}]}


@tool("find_customer", "Look up a customer by email address.", {"email": str})
async def find_customer(args: dict[str, Any]) -> dict[str, Any]:
    return as_result(desk.find_customer(args["email"]))


@tool("get_order", "Look up one order: its customer and the amount captured.", {"order_id": str})
async def get_order(args: dict[str, Any]) -> dict[str, Any]:
    return as_result(desk.get_order(args["order_id"]))


@tool("issue_refund", "Refund money on an order.", {"order_id": str, "amount": float})
async def issue_refund(args: dict[str, Any]) -> dict[str, Any]:
    return as_result(desk.issue_refund(args["order_id"], args["amount"]))


def calls(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"calls": [{"id": call_id, "name": f"mcp__desk__{name}", "input": args}]}


# What the model does in each turn (real: Claude decides).
TURNS = [
    [
        calls("toolu_01", "find_customer", email="ada@example.com"),
        calls("toolu_02", "get_order", order_id="O1"),
        calls("toolu_03", "issue_refund", order_id="O1", amount=120),  # more than was captured
        {"say": "I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"},
    ],
    [
        calls("toolu_04", "issue_refund", order_id="O1", amount=80),
        {"say": "Done: 80.00 USD is refunded on order O1."},
    ],
]

guard = Guard.from_files(
    policy=desk.POLICY,
    checklist=desk.CHECKLIST,
    model=f"scripted:{desk.HERE / 'verdicts' / 'claude_agent_sdk.json'}",  # real: model="openai/gpt-4.1-mini"
)


async def main(folder: Path) -> None:
    script = {"session_id": "session-1", "transcript": str(folder / "session-1.jsonl"), "turns": TURNS}
    options = ClaudeAgentOptions(
        system_prompt=desk.POLICY.read_text(encoding="utf-8"),
        mcp_servers={"desk": create_sdk_mcp_server("desk", tools=[find_customer, get_order, issue_refund])},
        hooks=guard_hooks(guard),  # PreToolUse judges each call; PostToolUse records its result
        cli_path=stand_in.cli_path(folder),  # real: leave out (the SDK's bundled claude)
        env={"STAND_IN_SCRIPT": json.dumps(script)},  # real: leave out
    )
    async with ClaudeSDKClient(options) as client:
        for text in ("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.",
                     "Yes, please refund 80.00 USD."):  # fmt: skip
            print(f"customer: {text}")
            await client.query(text)
            asked: dict[str, ToolUseBlock] = {}
            async for message in client.receive_response():
                for block in getattr(message, "content", []):
                    if isinstance(message, AssistantMessage) and isinstance(block, ToolUseBlock):
                        asked[block.id] = block
                    elif isinstance(message, AssistantMessage) and isinstance(block, TextBlock):
                        print(f"agent: {block.text}")
                    elif isinstance(message, UserMessage) and isinstance(block, ToolResultBlock):
                        show(asked[block.tool_use_id], block)


def show(call: ToolUseBlock, result: ToolResultBlock) -> None:
    """Each refund the model asked for: ran, or denied (an error result: the reason the hook gave)."""
    if call.name.endswith("issue_refund"):
        parts = result.content if isinstance(result.content, list) else []
        text = "".join(part.get("text", "") for part in parts)
        desk.report("issue_refund", call.input, not result.is_error, text)


with tempfile.TemporaryDirectory() as folder:
    asyncio.run(main(Path(folder)))
print(f"refunds that ran: {desk.REFUNDS}")
