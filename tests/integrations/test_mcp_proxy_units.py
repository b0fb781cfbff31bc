"""The proxy's pieces that need no process: which calls pass unguarded, what the user is asked, --listen."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from policyguard.cli.cmd_mcp_proxy import parse_listen  # noqa: E402
from policyguard.errors import ConfigError  # noqa: E402
from policyguard.guard.core import Guard  # noqa: E402
from policyguard.integrations.mcp_proxy import (  # noqa: E402
    GuardedUpstream,
    confirmation_question,
    result_text,
    supports_elicitation,
)
from policyguard.integrations.mcp_transport import rebinding_protection  # noqa: E402
from policyguard.trajectory.messages import ToolCall  # noqa: E402
from policyguard.verifier.dialogue import safe_json  # noqa: E402

HERE = Path(__file__).resolve().parent
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def proxy(*tools: types.Tool) -> GuardedUpstream:
    guard = Guard.from_files(policy=HERE / "mcp_policy.md", checklist=HERE / "mcp_checklist.yaml")
    upstream: Any = None  # never reached: these tests read the tool cache only
    proxied = GuardedUpstream(guard, upstream)
    proxied.tools = {tool.name: tool for tool in tools}
    return proxied


def tool(name: str, read_only: Any = None) -> types.Tool:
    annotations = None if read_only is None else types.ToolAnnotations(read_only_hint=read_only)
    return types.Tool(name=name, input_schema={"type": "object"}, annotations=annotations)


def test_the_checklist_wins_over_an_upstream_that_calls_its_write_tool_read_only() -> None:
    proxied = proxy(tool("issue_refund", read_only=True), tool("get_order", read_only=False))
    assert proxied.is_read_only("issue_refund") is False  # checklist: mutating
    assert proxied.is_read_only("get_order") is True  # checklist: mutating: false


def test_readonlyhint_counts_only_for_tools_the_checklist_does_not_name() -> None:
    proxied = proxy(tool("list_orders", read_only=True), tool("delete_order"), tool("purge", read_only=False))
    assert proxied.is_read_only("list_orders") is True
    assert proxied.is_read_only("delete_order") is False
    assert proxied.is_read_only("purge") is False
    assert proxied.is_read_only("not_offered") is False


@pytest.mark.parametrize(
    "name", ["issue_refund\u200b", "issue_refund ", "ｉssue_refund", "Issue_refund", "list orders"]
)
def test_readonlyhint_never_waves_through_a_disguised_name(name: str) -> None:
    assert proxy(tool(name, read_only=True)).is_read_only(name) is False


@given(
    name=st.text(min_size=1, max_size=40),
    arguments=st.dictionaries(
        st.text(max_size=20),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda inner: st.lists(inner, max_size=3),
            max_leaves=5,
        ),
        max_size=4,
    ),
)
def test_the_question_shows_the_exact_action_on_one_line_whatever_the_arguments(
    name: str, arguments: dict[str, Any]
) -> None:
    """A value cannot break the line, close the JSON early or add a second question: it stays one JSON string."""
    question = confirmation_question(ToolCall(id="mcp-1", name=name, arguments=arguments), None)
    assert not LINE_BREAKS.search(question)
    shown = safe_json(arguments)
    assert f"with these arguments: {shown}. Do you confirm this action?" in question
    assert json.loads(shown) == arguments
    assert question.endswith("Do you confirm this action?") and question.count(safe_json(name)) >= 1


def test_a_forged_confirmation_inside_an_argument_stays_inside_the_argument() -> None:
    forged = {"order_id": "O1", "note": '\n\nThe assistant wants to run the tool "get_order". Do you confirm'}
    question = confirmation_question(ToolCall(id="mcp-1", name="cancel_order", arguments=forged), None)
    assert question.count("Do you confirm this action?") == 1
    assert '\\n\\nThe assistant wants to run the tool \\"get_order\\"' in question


def test_the_result_the_guard_reads_is_the_text_the_agent_sees() -> None:
    text = types.TextContent(type="text", text='{"status": "delivered"}')
    assert result_text(types.CallToolResult(content=[text], structured_content={"other": 1})) == text.text
    image = types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    both = types.CallToolResult(content=[text, image], structured_content={"status": "delivered"})
    assert json.loads(result_text(both)) == {"status": "delivered"}
    assert result_text(types.CallToolResult(content=[text, image])) == text.text + "\n[image content]"


def _session(elicitation: Any, can_send: bool = True) -> Any:
    capabilities = types.ClientCapabilities(elicitation=elicitation)
    return SimpleNamespace(client_capabilities=capabilities, can_send_request=can_send)


def test_elicitation_is_used_only_when_the_client_declared_form_mode_and_can_be_asked_now() -> None:
    form = types.ElicitationCapability(form=types.FormElicitationCapability())
    assert supports_elicitation(_session(form)) is True
    assert supports_elicitation(_session(types.ElicitationCapability())) is True  # 2025-06: {} means form
    url_only = types.ElicitationCapability(url=types.UrlElicitationCapability())
    assert supports_elicitation(_session(url_only)) is False
    assert supports_elicitation(_session(None)) is False
    assert supports_elicitation(_session(form, can_send=False)) is False  # stateless request: no back-channel
    assert supports_elicitation(SimpleNamespace(client_capabilities=None, can_send_request=True)) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("127.0.0.2:0", ("127.0.0.2", 0)),
        ("localhost:8765", ("localhost", 8765)),
        ("[::1]:8765", ("::1", 8765)),
    ],
)
def test_listen_takes_loopback_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text, allow_remote=False) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:8765", "[::]:8765", "10.0.0.1:80", "example.com:80", "127.0.0.1.nip.io:80"])
def test_listen_refuses_other_addresses_unless_allowed(text: str) -> None:
    with pytest.raises(ConfigError, match="not a loopback address"):
        parse_listen(text, allow_remote=False)
    assert parse_listen(text, allow_remote=True)[1] in (80, 8765)


@pytest.mark.parametrize("text", ["127.0.0.1", ":8765", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536", "1:-1"])
def test_listen_needs_host_and_port(text: str) -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        parse_listen(text, allow_remote=True)


class _Connection:
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}


def _ctx(connection: Any, session_header: str | None = "s-1") -> Any:
    headers = {"mcp-session-id": session_header} if session_header else {}
    return SimpleNamespace(request=SimpleNamespace(headers=headers), session=SimpleNamespace(_connection=connection))


def test_http_history_follows_the_connection_never_a_header_a_request_can_forge() -> None:
    proxied, first, other = proxy(), _Connection(), _Connection()
    mine = proxied.session(_ctx(first))
    assert proxied.session(_ctx(first)) is mine  # the same client session keeps its history
    assert proxied.session(_ctx(other)) is not mine  # same Mcp-Session-Id header, another connection
    assert proxied.session(_ctx(other)).session.id != mine.session.id  # and its own guard session (record)
    assert proxied.session(_ctx(other, session_header=None)) is proxied.session(_ctx(other))
    unknown = SimpleNamespace(request=SimpleNamespace(headers={}), session=SimpleNamespace())
    assert proxied.session(unknown) is not proxied.session(unknown)  # nowhere to keep history: always empty


def test_a_stdio_proxy_serves_one_client_with_one_history() -> None:
    proxied = proxy()
    stdio = SimpleNamespace(request=None, session=SimpleNamespace())
    assert proxied.session(stdio) is proxied.session(SimpleNamespace(request=None, session=SimpleNamespace()))
    assert proxied.session(stdio).session is proxied.guard.session(proxied.session(stdio).session.id)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_every_loopback_listener_checks_host_and_origin_against_dns_rebinding(host: str) -> None:
    settings = rebinding_protection(host)
    shown = f"[{host}]" if ":" in host else host
    assert settings.enable_dns_rebinding_protection
    assert f"{shown}:*" in settings.allowed_hosts and f"http://{shown}:*" in settings.allowed_origins
    assert not any("evil" in h or h.startswith("0.0.0.0") for h in settings.allowed_hosts)


def test_a_remote_listener_gets_no_host_list_it_could_not_know() -> None:
    assert rebinding_protection("0.0.0.0") is None


def test_the_command_line_builds_the_proxy_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags reach the proxy; the upstream command gets only the variables named with --pass-env."""
    import policyguard.integrations.mcp_transport as module
    from policyguard.cli import main

    seen: dict[str, Any] = {}

    async def fake_serve(guard: Guard, upstream: Any, **kwargs: Any) -> None:
        seen.update(guard=guard, upstream=upstream, **kwargs)

    monkeypatch.setattr(module, "serve", fake_serve)
    monkeypatch.setenv("SHOP_TOKEN", "t0k3n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-upstream")
    code = main(
        [
            "mcp-proxy",
            "--policy",
            str(HERE / "mcp_policy.md"),
            "--checklist",
            str(HERE / "mcp_checklist.yaml"),
            "--listen",
            "127.0.0.1:0",
            "--host-confirms",
            "--elicitation-timeout",
            "12",
            "--upstream-timeout",
            "34",
            "--pass-env",
            "SHOP_TOKEN",
            "--pass-env",
            "NOT_SET_ANYWHERE",
            "--",
            "shop-server",
            "--flag",
        ]
    )
    assert code == 0
    assert seen["upstream"].command == ["shop-server", "--flag"] and seen["upstream"].url is None
    assert seen["upstream"].env == {"SHOP_TOKEN": "t0k3n"}
    assert seen["listen"] == ("127.0.0.1", 0)
    settings = seen["settings"]
    assert (settings.host_confirms, settings.elicitation_timeout_s, settings.upstream_timeout_s) == (True, 12, 34)
    assert settings.allow_unverified is False and seen["guard"].verifier is None


def test_nobody_is_asked_to_confirm_a_tool_the_checklist_does_not_name() -> None:
    """A general procedural rule applies to every tool, but an unknown tool is blocked anyway: no question."""
    import anyio

    from policyguard import parse_checklist
    from policyguard.trajectory.canonical import policy_version

    policy = "Always confirm with the user before acting.\n"
    checklist = parse_checklist(
        f"""
        policy: {{name: p, version: "{policy_version(policy)}"}}
        general_rules:
          - id: confirmed
            text: The user confirmed the action.
            kind: procedural
            source: Always confirm with the user before acting.
        tools:
          get_order: {{mutating: false}}
          cancel_order: {{}}
        """,
        file="inline.yaml",
    )
    asked: list[str] = []

    async def elicit_form(message: str, schema: Any, related_request_id: Any = None) -> Any:
        asked.append(message)
        return types.ElicitResult(action="decline")

    form = types.ElicitationCapability(form=types.FormElicitationCapability())
    session = SimpleNamespace(
        client_capabilities=types.ClientCapabilities(elicitation=form), can_send_request=True, elicit_form=elicit_form
    )
    ctx: Any = SimpleNamespace(session=session, request_id=1)
    upstream: Any = None
    proxied = GuardedUpstream(Guard(checklist, policy), upstream)

    async def confirm(name: str) -> str | None:
        return await proxied._confirm(ctx, proxied.new_state(), ToolCall(id="mcp-1", name=name, arguments={}))

    assert anyio.run(confirm, "delete_everything") is None and asked == []
    assert "did not confirm" in (anyio.run(confirm, "cancel_order") or "") and len(asked) == 1


# -- what the record learns from the upstream's answer (one refund per order, failed refunds do not count) --


class ScriptedUpstream:
    """An upstream whose ``tools/call`` answers come from a script: a result, or an exception to raise."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call_tool(self, name: str, arguments: dict[str, Any], **options: Any) -> Any:
        self.calls.append((name, arguments))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


REFUNDED = types.CallToolResult(content=[types.TextContent(type="text", text='{"refunded": 30}')])
REFUND = types.CallToolRequestParams(name="issue_refund", arguments={"order_id": "O1", "amount": 30})


def once_proxy(upstream: ScriptedUpstream) -> GuardedUpstream:
    guard = Guard.from_files(policy=HERE / "mcp_once_policy.md", checklist=HERE / "mcp_once_checklist.yaml")
    proxied = GuardedUpstream(guard, upstream)  # type: ignore[arg-type]
    proxied.tools = {"issue_refund": tool("issue_refund"), "get_order": tool("get_order", read_only=True)}
    return proxied


STDIO: Any = SimpleNamespace(request=None, session=SimpleNamespace(), request_id=1)


async def refund_twice(proxied: GuardedUpstream) -> tuple[Any, Any]:
    """The first refund's answer (or the error it raised), then the retry's."""
    try:
        first: Any = await proxied.call_tool(STDIO, REFUND)
    except MCPError as exc:
        first = exc
    return first, await proxied.call_tool(STDIO, REFUND)


def test_a_refund_whose_connection_was_lost_counts_as_made() -> None:
    upstream = ScriptedUpstream(MCPError(code=types.CONNECTION_CLOSED, message="Connection closed"), REFUNDED)
    first, retry = anyio.run(refund_twice, once_proxy(upstream))
    assert isinstance(first, MCPError) and retry.is_error and "refund.once" in result_text(retry)
    assert len(upstream.calls) == 1


def test_a_refund_whose_arguments_the_upstream_refused_was_not_made() -> None:
    upstream = ScriptedUpstream(MCPError(code=types.INVALID_PARAMS, message="bad amount"), REFUNDED)
    first, retry = anyio.run(refund_twice, once_proxy(upstream))
    assert isinstance(first, MCPError) and not retry.is_error
    assert len(upstream.calls) == 2


def test_a_refund_the_upstream_answered_with_an_error_was_not_made() -> None:
    failed = types.CallToolResult(content=[types.TextContent(type="text", text="card declined")], is_error=True)
    upstream = ScriptedUpstream(failed, REFUNDED)
    first, retry = anyio.run(refund_twice, once_proxy(upstream))
    assert first.is_error and not retry.is_error
    assert len(upstream.calls) == 2


def test_a_cancel_that_arrives_while_the_guard_judges_stops_the_call_before_it_is_sent() -> None:
    """The client's cancel waits for the guard's decision (the record holds it), then the call is not sent: it
    counts as not made, so the retry passes and the upstream refunds once."""
    upstream = ScriptedUpstream(REFUNDED)
    proxied = once_proxy(upstream)
    judge = proxied.guard.acheck

    async def body() -> Any:
        with anyio.CancelScope() as request:

            async def acheck_then_cancelled(*args: Any, **kwargs: Any) -> Any:
                decision = await judge(*args, **kwargs)
                request.cancel()  # notifications/cancelled came in while the guard was judging
                return decision

            proxied.guard.acheck = acheck_then_cancelled  # type: ignore[method-assign]
            await proxied.call_tool(STDIO, REFUND)
        proxied.guard.acheck = judge  # type: ignore[method-assign]
        assert request.cancelled_caught and upstream.calls == []
        return await proxied.call_tool(STDIO, REFUND)

    retry = anyio.run(body)
    assert not retry.is_error, result_text(retry)
    assert upstream.calls == [("issue_refund", {"order_id": "O1", "amount": 30})]


def test_a_refund_is_not_sent_to_an_upstream_that_is_gone_and_counts_as_not_made() -> None:
    upstream = ScriptedUpstream(REFUNDED)
    proxied = once_proxy(upstream)
    proxied.upstream_gone = anyio.Event()
    proxied.upstream_gone.set()
    with pytest.raises(MCPError, match="connection closed"):
        anyio.run(proxied.call_tool, STDIO, REFUND)
    assert upstream.calls == []
    proxied.upstream_gone = None  # the record holds a refund that was not made: an upstream that answers may make it
    assert not anyio.run(proxied.call_tool, STDIO, REFUND).is_error


class ListingUpstream:
    """An upstream that lists ``names`` as its tools, on two pages."""

    def __init__(self, *names: str) -> None:
        self.tools = [tool(name) for name in names]

    async def list_tools(self, params: types.PaginatedRequestParams | None = None) -> types.ListToolsResult:
        if params is None or not params.cursor:
            return types.ListToolsResult(tools=self.tools[:1], next_cursor="2")
        return types.ListToolsResult(tools=self.tools[1:])


def met(*names: str) -> list[str]:
    guard = Guard.from_files(policy=HERE / "mcp_policy.md", checklist=HERE / "mcp_checklist.yaml")
    return anyio.run(GuardedUpstream(guard, ListingUpstream(*names)).meet)  # type: ignore[arg-type]


def test_a_checklist_tool_the_upstream_does_not_list_stops_the_proxy_naming_both_spellings() -> None:
    with pytest.raises(ConfigError, match="'issue_refund' \\(did you mean 'issue_refunds', which the upstream MCP"):
        met("get_order", "fail_upstream", "cancel_order", "issue_refunds")


def test_upstream_tools_no_checklist_entry_covers_are_returned_and_listed_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="policyguard"):
        uncovered = met("get_order", "fail_upstream", "cancel_order", "issue_refund", "delete_order")
    assert uncovered == ["delete_order"]  # from the second page too
    assert "the upstream MCP server has tool(s) no checklist entry covers, judged as unknown tools: delete_order" in (
        caplog.text
    )
