"""An MCP client that reaches the refund desk only through ``policyguard mcp-proxy``, with no API key.

Run from the checkout: ``python examples/mcp_proxy/client.py`` (needs ``pip install -c constraints.txt -e '.[mcp]'``).

The client starts the proxy over stdio exactly as an MCP host would, and the proxy starts the
upstream server; the command is the same as::

    policyguard mcp-proxy --policy examples/refund_desk/policy.md \\
        --checklist examples/refund_desk/checklist.yaml \\
        --model scripted:examples/refund_desk/verdicts/mcp_proxy.json -- python examples/mcp_proxy/upstream.py

The verifier model is a recorded verdict; use ``--model openai/gpt-4.1-mini`` (with
``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``) for a real one. An MCP server does not see
the chat, so for the policy's "only after they say yes" the proxy asks the user itself through MCP
elicitation; ``ask_the_user`` below plays a user who says yes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXAMPLES = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXAMPLES))  # for the shared refund_desk
from refund_desk import HERE as DESK  # noqa: E402
from refund_desk import report  # noqa: E402

PROXY = StdioServerParameters(
    command=sys.executable,
    args=[
        *("-m", "policyguard", "mcp-proxy"),  # the `policyguard mcp-proxy` command
        *("--policy", str(DESK / "policy.md"), "--checklist", str(DESK / "checklist.yaml")),
        *("--model", f"scripted:{DESK / 'verdicts' / 'mcp_proxy.json'}"),  # real: --model openai/gpt-4.1-mini
        *("--", sys.executable, str(EXAMPLES / "mcp_proxy" / "upstream.py")),
    ],
    env=dict(os.environ),
)


async def ask_the_user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The host shows the proxy's question to the user; this user says yes."""
    print(f"  the proxy asks the user: {params.message}")
    print("  the user answers: yes")
    return types.ElicitResult(action="accept", content={"confirm": True})


def text(result: types.CallToolResult) -> str:
    """The result's text, on one line."""
    return " ".join(part.text for part in result.content if isinstance(part, types.TextContent))


async def main() -> None:
    async with (
        stdio_client(PROXY) as (read, write),
        ClientSession(read, write, elicitation_callback=ask_the_user) as session,
    ):
        await session.initialize()
        for name, arguments in [
            ("find_customer", {"email": "ada@example.com"}),
            ("get_order", {"order_id": "O1"}),
            ("issue_refund", {"order_id": "O1", "amount": 120}),  # more than was captured
            ("issue_refund", {"order_id": "O1", "amount": 80}),
        ]:
            result = await session.call_tool(name, arguments)
            if name == "issue_refund":  # a blocked call never reaches the upstream
                report(name, arguments, not result.is_error, text(result))
            else:  # reads pass straight through
                print(f"  read {name} {json.dumps(arguments)}: {' '.join(text(result).split())}")


anyio.run(main)
