"""``policyguard mcp-proxy`` end to end: real processes, a real ``mcp.ClientSession``, no network.

The upstream is ``mcp_upstream.py`` (a shop: orders, refunds, cancellations); it
appends every call it executes to a log file, so "the upstream never saw it" is
read from that log, not assumed. The proxy runs as ``python -m policyguard
mcp-proxy ...`` over stdio or streamable HTTP on a loopback port found at run time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable
POLICY = HERE / "mcp_policy.md"
CHECKLIST = HERE / "mcp_checklist.yaml"
UPSTREAM = HERE / "mcp_upstream.py"
ONCE = (HERE / "mcp_once_policy.md", HERE / "mcp_once_checklist.yaml")  # one refund per order; cancel if pending
WAIT = 30.0  # seconds: the bound on every wait in this file

pytestmark = pytest.mark.slow


def confirmed(index: int) -> dict[str, Any]:
    """A verifier answer: cancel.confirmed is MET, citing message ``index`` (the user's recorded yes)."""
    judgement = {
        "id": "cancel.confirmed",
        "status": "MET",
        "evidence": f"message {index}: the user confirmed the cancellation",
        "evidence_messages": [index],
    }
    return {"response": {"requirements": [judgement], "verdict": "PASS", "remediation": ""}}


CONFIRMED = confirmed(1)  # a session whose first call is the cancellation: [0] the question, [1] the yes

Elicit = Callable[[Any, types.ElicitRequestParams], Any]


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def proxy_args(
    log: Path, *extra: str, upstream: list[str] | None = None, rules: tuple[Path, Path] = (POLICY, CHECKLIST)
) -> list[str]:
    policy, checklist = rules
    command = ["-m", "policyguard", "mcp-proxy", "--policy", str(policy), "--checklist", str(checklist), *extra]
    if upstream is None:
        upstream = ["--", PY, str(UPSTREAM), "--log", str(log)]
    return [*command, *upstream]


def executed(log: Path) -> list[dict[str, Any]]:
    """What the upstream executed, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def run(body: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(WAIT * 2):
            return await body()

    return anyio.run(bounded)


@asynccontextmanager
async def stdio_proxy(
    log: Path,
    *extra: str,
    elicit: Elicit | None = None,
    errlog: Path | None = None,
    upstream: list[str] | None = None,
    rules: tuple[Path, Path] = (POLICY, CHECKLIST),
) -> AsyncIterator[ClientSession]:
    """A client session with the proxy started over stdio (by default the proxy starts the upstream)."""
    args = proxy_args(log, *extra, upstream=upstream, rules=rules)
    params = StdioServerParameters(command=PY, args=args, env=_env(), cwd=str(ROOT))
    with (errlog or log.with_suffix(".err")).open("w", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicit) as session:
                with anyio.fail_after(WAIT):
                    await session.initialize()
                yield session


@asynccontextmanager
async def direct_upstream(log: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=PY, args=[str(UPSTREAM), "--log", str(log)], cwd=str(ROOT))
    with log.with_suffix(".direct.err").open("w", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                with anyio.fail_after(WAIT):
                    await session.initialize()
                yield session


def accept(content: dict[str, Any] | None = None, asked: list[str] | None = None) -> Elicit:
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if asked is not None:
            asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True} if content is None else content)

    return callback


def answer(action: str, asked: list[str] | None = None) -> Elicit:
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if asked is not None:
            asked.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return callback


def scripted(tmp_path: Path, *steps: Any) -> str:
    path = tmp_path / "verifier.json"
    path.write_text(json.dumps(list(steps)), encoding="utf-8")
    return f"scripted:{path}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def background(args: list[str], ready: str, stderr: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is up once ``ready`` shows in its stderr (bounded wait); always stopped afterwards."""
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            args, cwd=ROOT, env={**os.environ, **_env()}, stdin=subprocess.DEVNULL, stdout=err, stderr=err
        )
    try:
        deadline = time.monotonic() + WAIT
        while ready not in stderr.read_text(encoding="utf-8", errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{args[:4]} did not start: {stderr.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


# -- pass-through -----------------------------------------------------------------------------------


def test_tools_list_passes_through_with_names_schemas_and_annotations_unchanged(tmp_path: Path) -> None:
    async def body() -> tuple[Any, Any]:
        async with stdio_proxy(tmp_path / "log") as proxied:
            through = await proxied.list_tools()
        async with direct_upstream(tmp_path / "direct") as direct:
            plain = await direct.list_tools()
        return through, plain

    through, plain = run(body)
    assert [t.model_dump() for t in through.tools] == [t.model_dump() for t in plain.tools]
    assert {t.name for t in through.tools} >= {"get_order", "issue_refund", "cancel_order"}


def test_prompts_and_resources_pass_through_untouched(tmp_path: Path) -> None:
    async def body() -> list[Any]:
        async with stdio_proxy(tmp_path / "log") as proxied:
            via = [
                await proxied.list_prompts(),
                await proxied.get_prompt("refund_request", {"order_id": "O1"}),
                await proxied.list_resources(),
                await proxied.read_resource("orders://O1"),
            ]
        async with direct_upstream(tmp_path / "direct") as direct:
            plain = [
                await direct.list_prompts(),
                await direct.get_prompt("refund_request", {"order_id": "O1"}),
                await direct.list_resources(),
                await direct.read_resource("orders://O1"),
            ]
        return [via, plain]

    via, plain = run(body)
    assert [r.model_dump() for r in via] == [r.model_dump() for r in plain]
    assert "Please refund order O1." in via[1].messages[0].content.text


def test_an_upstream_protocol_error_reaches_the_client_unchanged(tmp_path: Path) -> None:
    async def body() -> tuple[MCPError, MCPError]:
        errors = []
        async with stdio_proxy(tmp_path / "log") as proxied:
            with pytest.raises(MCPError) as via:
                await proxied.get_prompt("no_such_prompt", {})
            errors.append(via.value)
        async with direct_upstream(tmp_path / "direct") as direct:
            with pytest.raises(MCPError) as plain:
                await direct.get_prompt("no_such_prompt", {})
            errors.append(plain.value)
        return errors[0], errors[1]

    via, plain = run(body)
    assert (via.error.code, via.error.message) == (plain.error.code, plain.error.message)


def test_upstream_progress_and_notifications_reach_the_client(tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    notes: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_message(message: Any) -> None:
        notes.append(message)

    async def body() -> types.CallToolResult:
        params = StdioServerParameters(command=PY, args=proxy_args(tmp_path / "log"), env=_env(), cwd=str(ROOT))
        with (tmp_path / "proxy.err").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    await session.initialize()
                    result = await session.call_tool("announce", {}, progress_callback=on_progress)
                    with anyio.fail_after(WAIT):
                        while not notes:
                            await anyio.sleep(0.05)
                    return result

    result = run(body)
    assert not result.is_error and text(result) == "announced"
    assert progress == [(1.0, 2.0, "half way")]
    assert any(isinstance(n, types.ResourceListChangedNotification) for n in notes), notes


def test_a_failing_upstream_tool_returns_its_error_result(tmp_path: Path) -> None:
    async def body() -> types.CallToolResult:
        async with stdio_proxy(tmp_path / "log") as proxied:
            return await proxied.call_tool("fail_upstream", {})

    result = run(body)
    assert result.is_error and "fail_upstream" in text(result)


def test_an_upstream_that_does_not_answer_in_time_is_an_error_not_a_hang(tmp_path: Path) -> None:
    async def body() -> MCPError:
        async with stdio_proxy(tmp_path / "log", "--upstream-timeout", "0.5") as proxied:
            with pytest.raises(MCPError) as late:
                await proxied.call_tool("slow_report", {"seconds": 10}, read_timeout_seconds=WAIT)
            return late.value

    error = run(body)
    assert "timed out" in error.error.message.lower() or "timeout" in error.error.message.lower(), error.error


# -- reads and writes -------------------------------------------------------------------------------


def test_read_only_calls_pass_straight_through(tmp_path: Path) -> None:
    """get_order is mutating: false in the checklist; list_orders is not in it but the upstream says readOnlyHint."""
    log = tmp_path / "log"

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log) as proxied:
            return [await proxied.call_tool("get_order", {"order_id": "O1"}), await proxied.call_tool("list_orders")]

    order, orders = run(body)
    assert not order.is_error and order.structured_content == {"order_id": "O1", "status": "delivered", "captured": 100}
    assert not orders.is_error
    assert [e["tool"] for e in executed(log)] == ["get_order", "list_orders"]


def test_an_allowed_write_executes_exactly_once(tmp_path: Path) -> None:
    log, trace = tmp_path / "log", tmp_path / "trace.jsonl"

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, "--trace", str(trace)) as proxied:
            await proxied.call_tool("get_order", {"order_id": "O1"})
            return await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 30})

    result = run(body)
    assert not result.is_error, text(result)
    assert result.structured_content == {"refunded": 30.0, "order_id": "O1"}
    assert [e for e in executed(log) if e["tool"] == "issue_refund"] == [
        {"tool": "issue_refund", "arguments": {"order_id": "O1", "amount": 30}}
    ]
    decisions = [json.loads(line) for line in trace.read_text().splitlines()]
    allowed = [d for d in decisions if d["event"] == "decision" and d["tool"] == "issue_refund"]
    assert [d["outcome"] for d in allowed] == ["allow"]
    assert {r["status"] for r in allowed[0]["requirements"]} == {"MET"}
    assert [d["event"] for d in decisions if d.get("call_id") == allowed[0]["call_id"]] == [
        "submit",
        "allow",
        "decision",
        "execute",
    ]


def test_a_forbidden_write_never_reaches_the_upstream(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log) as proxied:
            unread = await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 30})
            await proxied.call_tool("get_order", {"order_id": "O1"})
            await proxied.call_tool("get_order", {"order_id": "O2"})
            too_much = await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 300})
            pending = await proxied.call_tool("issue_refund", {"order_id": "O2", "amount": 10})
            negative = await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": -5})
            return [unread, too_much, pending, negative]

    results = run(body)
    assert all(r.is_error for r in results), [text(r) for r in results]
    assert "get_order" in text(results[0])  # the remediation says which read is missing
    assert "refund.within_captured" in text(results[1])
    assert "refund.delivered" in text(results[2])
    assert [e["tool"] for e in executed(log)] == ["get_order", "get_order"]


def test_tools_the_checklist_does_not_name_or_the_upstream_does_not_offer_are_blocked(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log) as proxied:
            return [
                await proxied.call_tool("delete_order", {"order_id": "O1"}),  # upstream has it, no readOnlyHint
                await proxied.call_tool("no_such_tool", {}),
                await proxied.call_tool("issue_refund\u200b", {"order_id": "O1", "amount": 1}),
            ]

    results = run(body)
    assert all(r.is_error and "not performed" in text(r) for r in results), [text(r) for r in results]
    assert executed(log) == []


def test_arguments_that_are_not_plain_json_values_are_blocked(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log) as proxied:
            await proxied.call_tool("get_order", {"order_id": "O1"})
            return await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 2**70})

    result = run(body)
    assert result.is_error
    assert [e["tool"] for e in executed(log)] == ["get_order"]


def test_facts_read_in_one_http_session_do_not_count_in_another(tmp_path: Path) -> None:
    """Each client session has its own trajectory: session B cannot lean on session A's read."""
    log, port = tmp_path / "log", free_port()
    args = [PY, *proxy_args(log, "--listen", f"127.0.0.1:{port}")]

    async def body() -> tuple[types.CallToolResult, types.CallToolResult]:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (read_a, write_a), ClientSession(read_a, write_a) as a:
            await a.initialize()
            await a.call_tool("get_order", {"order_id": "O1"})
            async with streamable_http_client(url) as (read_b, write_b), ClientSession(read_b, write_b) as b:
                await b.initialize()
                other = await b.call_tool("issue_refund", {"order_id": "O1", "amount": 30})
            own = await a.call_tool("issue_refund", {"order_id": "O1", "amount": 30})
        return other, own

    with background(args, "on http://127.0.0.1:", tmp_path / "proxy.err"):
        other, own = run(body)
    assert other.is_error and "get_order" in text(other)
    assert not own.is_error, text(own)
    assert [e["tool"] for e in executed(log)] == ["get_order", "issue_refund"]


# -- the user's confirmation (elicitation) ------------------------------------------------------------


def test_an_accepted_elicitation_is_recorded_as_the_users_confirmation(tmp_path: Path) -> None:
    log, trace, asked = tmp_path / "log", tmp_path / "trace.jsonl", []
    model = scripted(tmp_path, CONFIRMED)

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, "--model", model, "--trace", str(trace), elicit=accept(asked=asked)) as proxied:
            return await proxied.call_tool("cancel_order", {"order_id": "O1"})

    result = run(body)
    assert not result.is_error, text(result)
    assert asked == [
        'The assistant wants to run the tool "cancel_order" with these arguments: {"order_id":"O1"}. '
        "Do you confirm this action?"
    ]
    assert executed(log) == [{"tool": "cancel_order", "arguments": {"order_id": "O1"}}]
    decision = next(
        json.loads(line) for line in trace.read_text().splitlines() if json.loads(line)["event"] == "decision"
    )
    assert (decision["outcome"], decision["stage"]) == ("allow", "verifier")
    # the citation check accepted message 1 (the user's yes after the proxy's question) as the confirmation
    [judged] = decision["requirements"]
    assert (judged["id"], judged["status"], judged["judged_by"]) == ("cancel.confirmed", "MET", "verifier")
    assert decision["verifier_evidence"] is None


NOT_A_YES = {
    "decline": types.ElicitResult(action="decline"),
    "cancel": types.ElicitResult(action="cancel"),
    "confirm false": types.ElicitResult(action="accept", content={"confirm": False}),
    "confirm as a string": types.ElicitResult(action="accept", content={"confirm": "true"}),
    "confirm as 1": types.ElicitResult(action="accept", content={"confirm": 1}),
    "no content": types.ElicitResult(action="accept"),
    "other field": types.ElicitResult(action="accept", content={"confirmed": True}),
}


def test_anything_but_an_explicit_yes_blocks_and_the_upstream_never_sees_the_call(tmp_path: Path) -> None:
    log, trace = tmp_path / "log", tmp_path / "trace.jsonl"
    answers = list(NOT_A_YES.values())

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return answers.pop(0)

    async def body() -> list[types.CallToolResult]:
        args = ("--model", scripted(tmp_path), "--trace", str(trace))  # no scripted step: no verifier call allowed
        async with stdio_proxy(log, *args, elicit=callback) as proxied:
            return [await proxied.call_tool("cancel_order", {"order_id": "O1"}) for _ in NOT_A_YES]

    results = run(body)
    assert answers == []
    said = dict(zip(NOT_A_YES, map(text, results), strict=True))
    refused = {
        name for name, r in zip(NOT_A_YES, results, strict=True) if r.is_error and "did not confirm" in said[name]
    }
    assert refused == set(NOT_A_YES), said
    assert executed(log) == []
    decisions = [json.loads(line) for line in trace.read_text().splitlines() if '"decision"' in line]
    assert [(d["outcome"], d["stage"]) for d in decisions] == [("block", "approver")] * len(NOT_A_YES)


def test_an_unanswered_elicitation_blocks_after_the_timeout(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def slow(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep(WAIT)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def body() -> types.CallToolResult:
        args = ("--model", scripted(tmp_path), "--elicitation-timeout", "0.5")
        async with stdio_proxy(log, *args, elicit=slow) as proxied:
            with anyio.fail_after(WAIT / 2):
                return await proxied.call_tool("cancel_order", {"order_id": "O1"})

    result = run(body)
    assert result.is_error and "no answer in time" in text(result)
    assert executed(log) == []


def test_a_client_without_elicitation_cannot_confirm_so_the_call_blocks(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, "--model", scripted(tmp_path)) as proxied:
            return await proxied.call_tool("cancel_order", {"order_id": "O1"})

    result = run(body)
    assert result.is_error and "does not support elicitation" in text(result)
    assert executed(log) == []


def test_host_confirms_records_the_hosts_approval_for_a_client_without_elicitation(tmp_path: Path) -> None:
    log = tmp_path / "log"
    model = scripted(tmp_path, CONFIRMED)

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, "--model", model, "--host-confirms") as proxied:
            return await proxied.call_tool("cancel_order", {"order_id": "O1"})

    result = run(body)
    assert not result.is_error, text(result)
    assert executed(log) == [{"tool": "cancel_order", "arguments": {"order_id": "O1"}}]


def test_with_model_none_a_requirement_only_a_verifier_can_judge_blocks_without_asking(tmp_path: Path) -> None:
    log, asked = tmp_path / "log", []

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, "--model", "none", elicit=accept(asked=asked)) as proxied:
            return await proxied.call_tool("cancel_order", {"order_id": "O1"})

    result = run(body)
    assert result.is_error and "cancel.confirmed" in text(result) and "verifier" in text(result)
    assert asked == [] and executed(log) == []


def test_with_model_none_and_allow_unverified_the_user_still_decides(tmp_path: Path) -> None:
    log = tmp_path / "log"

    async def body() -> list[types.CallToolResult]:
        results = []
        async with stdio_proxy(log, "--allow-unverified", elicit=answer("decline")) as proxied:
            results.append(await proxied.call_tool("cancel_order", {"order_id": "O1"}))
        async with stdio_proxy(log, "--allow-unverified", elicit=accept()) as proxied:
            results.append(await proxied.call_tool("cancel_order", {"order_id": "O2"}))
        return results

    declined, accepted = run(body)
    assert declined.is_error and not accepted.is_error
    assert executed(log) == [{"tool": "cancel_order", "arguments": {"order_id": "O2"}}]


# -- writes whose outcome the proxy cannot know ------------------------------------------------------------


def slow_upstream(log: Path, slow: Path) -> list[str]:
    """The shop, whose writes wait while ``slow`` exists (a refund after it is made, a cancellation before)."""
    return ["--", PY, str(UPSTREAM), "--log", str(log), "--slow", str(slow)]


async def until_executed(log: Path, tool: str) -> None:
    with anyio.fail_after(WAIT):
        while not any(e["tool"] == tool for e in executed(log)):
            await anyio.sleep(0.02)


REFUND_O1 = {"order_id": "O1", "amount": 30}


def test_a_refund_the_client_cancelled_after_the_upstream_made_it_blocks_the_retry(tmp_path: Path) -> None:
    """The client gives up (``notifications/cancelled``) while the upstream, which has refunded, is still answering.

    The proxy never learns the outcome, so the refund counts as made: the retry breaks 'one refund per order' and
    is blocked with a remediation that says to read the state first. The upstream refunded once.
    """
    log, slow = tmp_path / "log", tmp_path / "slow"
    slow.write_text(str(WAIT * 2))

    async def body() -> types.CallToolResult:
        async with stdio_proxy(log, rules=ONCE, upstream=slow_upstream(log, slow)) as proxied:
            with anyio.CancelScope() as given_up:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(proxied.call_tool, "issue_refund", REFUND_O1)
                    await until_executed(log, "issue_refund")  # the proxy sent it on and the upstream refunded
                    given_up.cancel()  # the client's SDK sends notifications/cancelled for the request
            slow.unlink()  # the upstream answers at once from now on
            return await proxied.call_tool("issue_refund", REFUND_O1)

    retry = run(body)
    assert retry.is_error and "refund.once" in text(retry), text(retry)
    assert "not known" in text(retry) and "check the current state with a read" in text(retry)
    assert [e for e in executed(log) if e["tool"] == "issue_refund"] == [
        {"tool": "issue_refund", "arguments": REFUND_O1}
    ]


def test_a_refund_the_upstream_answered_too_late_counts_as_made_though_failed_refunds_do_not(tmp_path: Path) -> None:
    """The upstream refunds but answers after ``--upstream-timeout``: no answer is no failure.

    refund.once does not count a refund that failed (the shape of airline certificate-once); a timed-out refund is
    not a failed one, so the retry is blocked. The upstream refunded once.
    """
    log, slow = tmp_path / "log", tmp_path / "slow"
    slow.write_text(str(WAIT * 2))

    async def body() -> tuple[MCPError, types.CallToolResult]:
        args = ("--upstream-timeout", "2")
        async with stdio_proxy(log, *args, rules=ONCE, upstream=slow_upstream(log, slow)) as proxied:
            with pytest.raises(MCPError) as late:
                await proxied.call_tool("issue_refund", REFUND_O1, read_timeout_seconds=WAIT)
            slow.unlink()
            return late.value, await proxied.call_tool("issue_refund", REFUND_O1)

    late, retry = run(body)
    assert "timed out" in late.error.message.lower(), late.error
    assert retry.is_error and "refund.once" in text(retry), text(retry)
    assert "check the current state with a read" in text(retry)
    assert [e for e in executed(log) if e["tool"] == "issue_refund"] == [
        {"tool": "issue_refund", "arguments": REFUND_O1}
    ]


def test_a_refund_the_upstream_refused_does_not_count(tmp_path: Path) -> None:
    """An answer, even an error, is a known outcome: a refund that failed leaves the order refundable."""
    log = tmp_path / "log"

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log, rules=ONCE) as proxied:
            return [
                await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": "thirty"}),
                await proxied.call_tool("issue_refund", REFUND_O1),
            ]

    failed, retry = run(body)
    assert failed.is_error and not retry.is_error, (text(failed), text(retry))
    assert [e["arguments"] for e in executed(log) if e["tool"] == "issue_refund"] == [REFUND_O1]


def test_after_a_cancelled_cancellation_a_read_decides_and_the_honest_retry_passes(tmp_path: Path) -> None:
    """cancel_order is judged on the order as last read. The client gives up while the upstream waits to cancel.

    Nobody knows whether the order was cancelled, so the retry is blocked until the order is read again; the read
    shows it still pending (the upstream never got to cancel it), and the same cancellation then passes, once.
    """
    log, slow = tmp_path / "log", tmp_path / "slow"
    slow.write_text(str(WAIT * 2))
    cancel = {"order_id": "O2"}

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log, rules=ONCE, upstream=slow_upstream(log, slow)) as proxied:
            await proxied.call_tool("get_order", {"order_id": "O2"})
            with pytest.raises(MCPError):
                await proxied.call_tool("cancel_order", cancel, read_timeout_seconds=2)  # sends notifications/cancelled
            slow.unlink()
            return [
                await proxied.call_tool("cancel_order", cancel),
                await proxied.call_tool("get_order", {"order_id": "O2"}),
                await proxied.call_tool("cancel_order", cancel),
            ]

    unread, read, honest = run(body)
    assert unread.is_error and "get_order" in text(unread) and "not known" in text(unread), text(unread)
    assert read.structured_content == {"order_id": "O2", "status": "pending", "captured": 50}
    assert not honest.is_error, text(honest)
    assert [e["tool"] for e in executed(log)] == ["get_order", "get_order", "cancel_order"]


# -- transports ------------------------------------------------------------------------------------------


def test_over_streamable_http_writes_are_guarded_and_elicitation_works(tmp_path: Path) -> None:
    log, port = tmp_path / "log", free_port()
    # [0] get_order, [1] its result, [2] the refund, [3] its refusal, [4] the question, [5] the yes
    model = scripted(tmp_path, confirmed(5))
    args = [PY, *proxy_args(log, "--model", model, "--listen", f"127.0.0.1:{port}")]

    async def body() -> list[types.CallToolResult]:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write, elicitation_callback=accept()) as session:
                with anyio.fail_after(WAIT):
                    await session.initialize()
                await session.call_tool("get_order", {"order_id": "O1"})
                return [
                    await session.call_tool("issue_refund", {"order_id": "O1", "amount": 500}),
                    await session.call_tool("cancel_order", {"order_id": "O1"}),
                ]

    with background(args, "on http://127.0.0.1:", tmp_path / "proxy.err"):
        refused, cancelled = run(body)
        rebound = _post_initialize(port, host="attacker.example")  # DNS rebinding: a web page's Host header
        plain = _post_initialize(port, host="127.0.0.1")  # the same request under the proxy's own name
    assert rebound >= 400 and plain == 200, (rebound, plain)
    assert refused.is_error and "refund.within_captured" in text(refused)
    assert not cancelled.is_error, text(cancelled)
    assert [e["tool"] for e in executed(log)] == ["get_order", "cancel_order"]


def _post_initialize(port: int, host: str) -> int:
    """The HTTP status of an initialize POST sent with the given Host header."""
    import urllib.error
    import urllib.request

    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        data=body,
        headers={
            "Host": f"{host}:{port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_streamable_http_upstream_is_guarded_the_same_way(tmp_path: Path) -> None:
    log, port = tmp_path / "log", free_port()
    upstream = [PY, str(UPSTREAM), "--log", str(log), "--http", str(port)]
    url = f"http://127.0.0.1:{port}/mcp"

    async def body() -> list[types.CallToolResult]:
        async with stdio_proxy(log, "--upstream-url", url, upstream=[]) as proxied:
            await proxied.call_tool("get_order", {"order_id": "O1"})
            return [
                await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 10}),
                await proxied.call_tool("issue_refund", {"order_id": "O1", "amount": 1000}),
            ]

    with background(upstream, "Uvicorn running", tmp_path / "upstream.err"):
        allowed, refused = run(body)
    assert not allowed.is_error and refused.is_error
    assert [e["tool"] for e in executed(log)] == ["get_order", "issue_refund"]


def test_the_proxy_exits_with_a_message_when_the_upstream_dies(tmp_path: Path) -> None:
    log, err = tmp_path / "log", tmp_path / "proxy.err"
    wrapper = ["-c", 'import subprocess,sys; r=subprocess.call(sys.argv[1:]); print(f"exit={r}", file=sys.stderr)']

    async def body() -> BaseException | types.CallToolResult:
        args = [*wrapper, PY, *proxy_args(log)]
        params = StdioServerParameters(command=PY, args=args, env=_env(), cwd=str(ROOT))
        with err.open("w", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                with anyio.fail_after(WAIT):
                    await session.initialize()
                try:
                    outcome: BaseException | types.CallToolResult = await session.call_tool(
                        "get_order", {"order_id": "CRASH"}, read_timeout_seconds=WAIT
                    )
                except MCPError as exc:
                    outcome = exc
                with anyio.fail_after(WAIT):  # then the proxy is gone: the next request fails, never hangs
                    while "exit=" not in err.read_text():
                        await anyio.sleep(0.05)
                return outcome

    outcome = run(body)
    assert isinstance(outcome, MCPError)  # the call in flight got an error, not silence
    lines = err.read_text().splitlines()
    assert "exit=1" in lines
    assert any(
        line == "policyguard: mcp-proxy: stopped: the upstream MCP server closed the connection "
        "(it exited or stopped answering)"
        for line in lines
    ), lines


def test_the_proxy_exits_with_a_message_when_an_http_upstream_dies(tmp_path: Path) -> None:
    log, port, err = tmp_path / "log", free_port(), tmp_path / "proxy.err"
    upstream = [PY, str(UPSTREAM), "--log", str(log), "--http", str(port)]
    proxy = [PY, *proxy_args(log, "--upstream-url", f"http://127.0.0.1:{port}/mcp", upstream=[])]
    with background(upstream, "Uvicorn running", tmp_path / "upstream.err") as server:
        with err.open("wb") as errlog:
            process = subprocess.Popen(
                proxy, cwd=ROOT, env={**os.environ, **_env()}, stdin=subprocess.PIPE, stderr=errlog
            )
        try:
            deadline = time.monotonic() + WAIT
            while "guarding" not in err.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            server.kill()
            server.wait(timeout=WAIT)
            code = process.wait(timeout=WAIT)  # the proxy's ping notices within its interval (5 s)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=WAIT)
    assert code == 1
    assert err.read_text().splitlines()[-1].startswith("policyguard: mcp-proxy: stopped: the upstream MCP server")


# -- the command line -------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "policyguard", "mcp-proxy", *args],
        cwd=ROOT,
        env={**os.environ, **_env()},
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )


BASE = ("--policy", str(POLICY), "--checklist", str(CHECKLIST))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((*BASE,), "either as a command after '--' or with --upstream-url"),
        ((*BASE, "--upstream-url", "http://127.0.0.1:9/mcp", "--", "x"), "either as a command"),
        ((*BASE, "--listen", "0.0.0.0:8765", "--", "x"), "not a loopback address"),
        ((*BASE, "--listen", "[::]:8765", "--", "x"), "not a loopback address"),
        ((*BASE, "--listen", "example.com:8765", "--", "x"), "not a loopback address"),
        ((*BASE, "--listen", "127.0.0.1", "--", "x"), "expected HOST:PORT"),
        ((*BASE, "--listen", "127.0.0.1:99999", "--", "x"), "expected HOST:PORT"),
        ((*BASE, "--elicitation-timeout", "0", "--", "x"), "above 0"),
        ((*BASE, "--", "/nonexistent/mcp-server"), "cannot start the upstream command"),
        (("--policy", str(CHECKLIST), "--checklist", str(CHECKLIST), "--", "x"), "policy version mismatch"),
    ],
)
def test_bad_settings_are_one_line_errors(args: tuple[str, ...], says: str) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("policyguard: error:") and says in lines[0], done.stderr
