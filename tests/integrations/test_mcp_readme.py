"""The README's mcp-proxy command runs as written: a real client, the proxy, the test shop upstream."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.docblocks import doc_block

pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def readme_command() -> list[str]:
    return shlex.split(doc_block("docs/guarding/mcp-proxy.md", "mcp-proxy").replace("\\\n", " "))


def test_readme_mcp_proxy_command_guards_the_shop(tmp_path: Path) -> None:
    words = readme_command()
    assert words[:2] == ["policyguard", "mcp-proxy"]
    outputs = {"audit.jsonl": tmp_path / "audit.jsonl", "executed.jsonl": tmp_path / "executed.jsonl"}
    words = [str(outputs.get(word, word)) for word in words]
    words = [sys.executable if word == "python" else word for word in words]
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "policyguard", *words[1:]], cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)}
    )

    async def body() -> list[types.CallToolResult]:
        with anyio.fail_after(60), (tmp_path / "proxy.err").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return [
                    await session.call_tool("get_order", {"order_id": "O1"}),
                    await session.call_tool("issue_refund", {"order_id": "O1", "amount": 30}),
                    await session.call_tool("issue_refund", {"order_id": "O1", "amount": 300}),
                ]

    read, allowed, refused = anyio.run(body)
    assert not read.is_error and not allowed.is_error and refused.is_error
    executed = [json.loads(line)["tool"] for line in outputs["executed.jsonl"].read_text().splitlines()]
    assert executed == ["get_order", "issue_refund"]
    audit = subprocess.run(
        [sys.executable, "-m", "policyguard", "audit", str(outputs["audit.jsonl"])],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
