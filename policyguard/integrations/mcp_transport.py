"""How ``policyguard mcp-proxy`` runs: the upstream connection, the MCP server, stdio and streamable HTTP.

The guarding itself is :mod:`policyguard.integrations.mcp_proxy`; this module wires it to the SDK's
transports: it connects to the upstream (a command over stdio, or a URL), builds a server with the
upstream's identity and capabilities whose handlers forward to it, serves it over stdio or HTTP, and
notices when the upstream goes away. Requires the ``mcp`` extra.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field

from policyguard.errors import ConfigError
from policyguard.guard.core import Guard

from .mcp_proxy import GuardedUpstream, ProxySettings

# -- the MCP server -------------------------------------------------------------


def _forwarder(
    upstream: ClientSession, request_type: Any, result_type: Any, timeout: float
) -> Callable[[Any, Any], Awaitable[Any]]:
    """A handler that sends the same request upstream and returns its answer (errors included) unchanged."""

    async def handler(ctx: Any, params: Any) -> Any:
        request = request_type(params=params) if params is not None else request_type()
        return await upstream.send_request(request, result_type, request_read_timeout_seconds=timeout)

    return handler


def build_server(proxy: GuardedUpstream, init: types.InitializeResult) -> tuple[Server[Any], NotificationOptions]:
    """An MCP server with the upstream's identity and capabilities, whose tool calls go through ``proxy``."""
    upstream, timeout = proxy.upstream, proxy.settings.upstream_timeout_s
    caps = init.capabilities
    handlers: dict[str, Any] = {}

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await proxy.list_tools(params)

    handlers["on_list_tools"] = list_tools
    handlers["on_call_tool"] = proxy.call_tool
    if caps.prompts is not None:
        handlers["on_list_prompts"] = _forwarder(upstream, types.ListPromptsRequest, types.ListPromptsResult, timeout)
        handlers["on_get_prompt"] = _forwarder(upstream, types.GetPromptRequest, types.GetPromptResult, timeout)
    if caps.resources is not None:
        handlers["on_list_resources"] = _forwarder(
            upstream, types.ListResourcesRequest, types.ListResourcesResult, timeout
        )
        handlers["on_list_resource_templates"] = _forwarder(
            upstream, types.ListResourceTemplatesRequest, types.ListResourceTemplatesResult, timeout
        )
        handlers["on_read_resource"] = _forwarder(
            upstream, types.ReadResourceRequest, types.ReadResourceResult, timeout
        )
        if caps.resources.subscribe:
            handlers["on_subscribe_resource"] = _forwarder(upstream, types.SubscribeRequest, types.EmptyResult, timeout)
            handlers["on_unsubscribe_resource"] = _forwarder(
                upstream, types.UnsubscribeRequest, types.EmptyResult, timeout
            )
    if caps.completions is not None:
        handlers["on_completion"] = _forwarder(upstream, types.CompleteRequest, types.CompleteResult, timeout)
    info = init.server_info
    server: Server[Any] = Server(
        info.name, version=info.version, title=info.title, instructions=init.instructions, **handlers
    )
    options = NotificationOptions(
        prompts_changed=bool(caps.prompts and caps.prompts.list_changed),
        resources_changed=bool(caps.resources and caps.resources.list_changed),
        tools_changed=bool(caps.tools and caps.tools.list_changed),
    )
    return server, options


# -- running it -----------------------------------------------------------------


class UpstreamSpec(BaseModel):
    """Where the upstream server is: a command to start (stdio) or a streamable HTTP URL."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(default_factory=list)
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict, description="Variables passed to an upstream command.")
    startup_timeout_s: float = Field(default=30.0, gt=0)
    ping_interval_s: float = Field(default=5.0, gt=0, description="How often an HTTP upstream is checked.")


class ProxyStopped(Exception):
    """The proxy stopped serving for a reason its operator must see (the upstream went away)."""


@asynccontextmanager
async def connect_upstream(
    spec: UpstreamSpec, message_handler: MessageHandlerFnT
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult, anyio.Event]]:
    """A session with the upstream, its initialize result, and an event set when the upstream goes away.

    The connection lives in a task of its own, not around the caller's code: when the upstream's
    transport fails (an HTTP upstream refusing connections crashes the SDK's transport task group),
    only that task ends and sets the event, instead of cancelling the caller's serving, which a
    stdio read of stdin would hold up forever.
    """
    gone = anyio.Event()
    opened = anyio.Event()
    held: dict[str, Any] = {}
    failed: list[BaseException] = []

    async def hold() -> None:
        try:
            async with AsyncExitStack() as stack:
                session, init = await _open(spec, message_handler, stack, gone)
                held.update(session=session, init=init)
                opened.set()
                await gone.wait()
        except Exception as exc:  # startup failed, or the transport died under the session
            failed.append(exc)
        finally:
            gone.set()
            opened.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(hold)
        await opened.wait()
        if "session" not in held:
            raise failed[0] if failed else ConfigError("the upstream MCP server closed the connection at once")
        try:
            yield held["session"], held["init"], gone
        finally:
            tasks.cancel_scope.cancel()


async def _open(
    spec: UpstreamSpec, message_handler: MessageHandlerFnT, stack: AsyncExitStack, gone: anyio.Event
) -> tuple[ClientSession, types.InitializeResult]:
    """Connect, initialize and start watching; everything opened is closed by ``stack``."""
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if spec.url is not None:
        read, write = await stack.enter_async_context(streamable_http_client(spec.url))
    else:
        parameters = StdioServerParameters(command=spec.command[0], args=spec.command[1:], env=spec.env)
        try:
            read, write = await stack.enter_async_context(stdio_client(parameters))
        except OSError as exc:
            why = exc.strerror or exc
            raise ConfigError(f"cannot start the upstream command {spec.command[0]!r}: {why}") from None
    relay_send, relay_receive = anyio.create_memory_object_stream[Any](0)
    tasks = await stack.enter_async_context(anyio.create_task_group())

    async def relay() -> None:
        """Everything the upstream sends, passed on; its end is what tells the proxy the upstream died."""
        async with relay_send:
            async for item in read:
                await relay_send.send(item)
        gone.set()

    tasks.start_soon(relay)
    stack.callback(tasks.cancel_scope.cancel)
    session = await stack.enter_async_context(ClientSession(relay_receive, write, message_handler=message_handler))
    try:
        with anyio.fail_after(spec.startup_timeout_s):
            init = await session.initialize()
    except TimeoutError:
        waited = f"{spec.startup_timeout_s:g} s"
        raise ConfigError(f"the upstream MCP server did not answer initialize within {waited}") from None
    except MCPError as exc:
        raise ConfigError(f"the upstream MCP server refused initialize: {exc.error.message}") from None
    if spec.url is not None:

        async def watch() -> None:
            """An HTTP upstream has no pipe that closes: ask it now and then whether it is still there."""
            while True:
                await anyio.sleep(spec.ping_interval_s)
                try:
                    with anyio.fail_after(spec.ping_interval_s):
                        await session.send_ping()
                except Exception:  # an error or no answer in time: either way it is gone
                    gone.set()
                    return

        tasks.start_soon(watch)
    return session, init


async def serve(
    guard: Guard,
    upstream: UpstreamSpec,
    *,
    settings: ProxySettings | None = None,
    listen: tuple[str, int] | None = None,
    announce: Callable[[str], None] = lambda line: print(f"policyguard: mcp-proxy: {line}", file=sys.stderr),
    on_upstream_gone: Callable[[str], None] | None = None,
    http_options: dict[str, Any] | None = None,
    wrap_app: Callable[[Any], Any] | None = None,
) -> None:
    """Serve the guarded upstream over stdio (``listen=None``) or streamable HTTP until the client leaves.

    When the upstream goes away (and the answers to calls in flight went out), ``on_upstream_gone`` is
    called with the reason, from inside the event loop; without it, serving stops and :class:`ProxyStopped`
    is raised. A stdio client's read of stdin cannot be interrupted, so the CLI passes a callback that
    ends the process. Raises :class:`~policyguard.errors.ConfigError` when the upstream cannot be started
    or reached. ``http_options`` are the listener's ``uvicorn.Config``
    limits and ``wrap_app`` wraps its app (the CLI passes the shared server configuration's and its health route).
    """
    holder: list[GuardedUpstream] = []

    async def on_upstream_message(message: IncomingMessage) -> None:
        if holder:
            await holder[0].notify_clients(message)

    stopped: list[str] = []
    async with connect_upstream(upstream, on_upstream_message) as (session, init, gone):
        proxy = GuardedUpstream(guard, session, settings, upstream_gone=gone)
        holder.append(proxy)
        await proxy.meet()  # a checklist tool the upstream lacks stops here, before any client is served
        server, options = build_server(proxy, init)
        async with anyio.create_task_group() as tasks:
            stop_http: list[Callable[[], None]] = []

            async def watchdog() -> None:
                await gone.wait()
                await anyio.sleep(0.5)  # the answers to calls that were in flight go out first
                reason = "the upstream MCP server closed the connection (it exited or stopped answering)"
                if on_upstream_gone is not None:
                    on_upstream_gone(reason)
                stopped.append(reason)
                for stop in stop_http:
                    stop()
                tasks.cancel_scope.cancel()

            tasks.start_soon(watchdog)
            name = init.server_info.name
            if listen is None:
                announce(f"guarding {name!r} ({len(proxy.tools)} tools) on stdio")
                await _serve_stdio(server, options)
            else:
                await _serve_http(server, listen, announce, stop_http, name, http_options or {}, wrap_app)
            tasks.cancel_scope.cancel()
    if stopped:
        raise ProxyStopped(stopped[0])


async def _serve_stdio(server: Server[Any], options: NotificationOptions) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(options))


def rebinding_protection(host: str) -> Any:
    """Host and Origin checks for a loopback listener (any 127.x or ::1), so a web page cannot rebind to it.

    The SDK turns them on by itself only for 127.0.0.1, localhost and ::1. A non-loopback listener
    (``--allow-remote``) is reached under names the proxy cannot know, so it gets none.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    from policyguard.loopback import is_loopback, loopback_names

    if not is_loopback(host):
        return None
    names = loopback_names(host)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


async def _serve_http(
    server: Server[Any],
    listen: tuple[str, int],
    announce: Callable[[str], None],
    stop: list[Callable[[], None]],
    name: str,
    options: dict[str, Any],
    wrap_app: Callable[[Any], Any] | None,
) -> None:
    import socket

    import uvicorn

    host, port = listen
    app = server.streamable_http_app(host=host, transport_security=rebinding_protection(host))
    if wrap_app is not None:
        app = wrap_app(app)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--listen {host}:{port}: cannot listen there: {exc.strerror or exc}") from None
    http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
    stop.append(lambda: setattr(http, "should_exit", True))
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    announce(f"guarding {name!r} on http://{shown}:{bound}/mcp")
    try:
        await http.serve(sockets=[sock])
    finally:
        sock.close()
