"""The ASGI app (Starlette): ``POST /v1/check``, the JWKS, health, metrics and the OpenAPI document.

Answers, and what a client does with them:

* ``200`` from ``/v1/check``: the Decision JSON (``policyguard verify`` prints
  the same); run the call only when ``outcome`` is ``allow``, and hand the
  ``grant`` to the tool service when there is one. An unknown tool, a reused
  call id, a NaN argument in a readable call are *decisions* (``block``), with
  the message for the agent.
* A ``block`` that only reads can cure (the dialogue lacks the order, the
  product, the profile the rule needs) also carries ``needs_reads``: a list of
  ``{"call_id", "tool", "arguments"}`` the client may run with its own read
  tools and send again with their results (``docs/guarding/http.md``, "Reads
  the guard needs"). A client that ignores it keeps the ``message``'s "read
  first" remediation.
* ``400`` (not strict JSON), ``413`` (over ``--max-body-bytes``), ``415`` (not
  ``application/json``), ``422`` (wrong shape or an unreadable dialogue or
  call): ``{"error": ..., "field": ...}``, one line. ``401`` without the bearer
  token. ``500``/``503``: nothing was decided. Anything but a 200 ``allow``
  means: do not run the call.
* ``POST /v1/results`` (a call's fate, for a session): ``200 {"recorded": ...}``;
  ``409`` when the session's record is gone or full; ``503`` when the store
  cannot be reached (nothing was recorded).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from policyguard.decision import decision_json
from policyguard.enforcement.store import LedgerUnavailable
from policyguard.errors import FormatError
from policyguard.guard.fetching import ReadsWanted
from policyguard.session import SessionError
from policyguard.trajectory.formats.history_cache import HistoryCache
from policyguard.trajectory.limits import call_problem

from .auth import authorized
from .body import (
    BadRequest,
    CheckRequest,
    ExecuteRequest,
    ResultReport,
    needed_reads,
    parse_json,
    parse_model,
    surrogate_problem,
)
from .hooks import hook_routes
from .metrics import CONTENT_TYPE, Metrics
from .openapi import openapi_document
from .rebinding import HostCheck
from .service import Service

log = logging.getLogger("policyguard.serve")

Handler = Callable[[Request], Awaitable[Response]]
READY_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 30.0  # a client that trickles its body does not hold a connection for ever
INTERNAL = "internal error: the call was not decided; do not run it"


class _JSON(JSONResponse):
    """JSON with non-ASCII escaped: text the client sent (even a lone surrogate) can always be sent back."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return _JSON(body, status_code=status, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``limit`` bytes; never buffered past it."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise BadRequest(415, f"the body must be application/json, got {content_type or 'no content type'!r}")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit():
            raise BadRequest(400, f"Content-Length {declared!r} is not a number")
        if int(declared) > limit:
            raise BadRequest(413, f"the body is {int(declared):,} bytes, over the limit of {limit:,}")
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BadRequest(413, f"the body is over the limit of {limit:,} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BadRequest(408, f"the body did not arrive within {BODY_TIMEOUT_S:.0f} s") from None
    return b"".join(chunks)


class _ForeignRequests:
    """Refuses a request whose Host or Origin shows it came from a web page (421/403; see :mod:`.rebinding`)."""

    def __init__(self, app: ASGIApp, check: HostCheck, metrics: Metrics) -> None:
        self.app, self.check, self.metrics = app, check, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            refusal = self.check.refusal(headers.get("host"), headers.get("origin"))
            if refusal is not None:
                self.metrics.response("other", refusal[0])
                await _error(*refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _read_call(data: dict[str, Any]) -> Any:
    """The pending call as a ToolCall; 422 naming ``call`` when it cannot be read."""
    from policyguard.trajectory.inputs import as_call

    try:
        call = as_call(data)
    except FormatError as exc:
        raise BadRequest(422, f"call: {' '.join(str(exc).split())}", field="call") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise BadRequest(422, f"call: not a tool call: {' '.join(str(exc).split())}", field="call") from None
    problem = call_problem(call.arguments) or surrogate_problem(call.arguments)
    if problem is not None:
        raise BadRequest(422, f"call: {problem}", field="call.arguments")
    return call


def _read_trajectory(payload: CheckRequest, histories: HistoryCache, size: int) -> Any:
    """The request's dialogue; a session's converted once per message (:class:`HistoryCache`), the same answer."""
    from policyguard.trajectory.formats import to_trajectory

    try:
        if payload.session_id is not None:
            return histories.convert(
                payload.session_id, payload.trajectory, payload.format, system=payload.system, weight=size
            )
        return to_trajectory(payload.trajectory, format=payload.format, system=payload.system)
    except FormatError as exc:
        raise BadRequest(422, f"trajectory: {' '.join(str(exc).split())}", field="trajectory") from None
    except (KeyError, ValueError, TypeError) as exc:
        message = f"trajectory: not a message list: {' '.join(str(exc).split())}"
        raise BadRequest(422, message, field="trajectory") from None


def _read_check(body: bytes, histories: HistoryCache) -> tuple[CheckRequest, Any, Any]:
    """The request, its dialogue and its pending call; BadRequest (400/422) naming what cannot be read."""
    payload: CheckRequest = parse_model(CheckRequest, parse_json(body))
    return payload, _read_trajectory(payload, histories, len(body)), _read_call(payload.call)


def _record_fate(service: Service, report: ResultReport) -> bool:
    """Tell the session what became of the call; False when no call of that id waits for a result."""
    session = service.session(report.session_id)
    session.sync()  # another replica may have judged the call
    if report.unknown is not None:
        return session.record_unknown(report.call_id, report.unknown)
    assert report.content is not None
    return session.record_result(report.call_id, report.content, is_error=report.is_error)


def create_app(service: Service) -> Starlette:
    """The app for one server process; every route shares ``service``."""
    config = service.config
    metrics = service.metrics

    def route(name: str, handler: Handler, *, protected: bool = False) -> Handler:
        async def wrapped(request: Request) -> Response:
            try:
                if protected and not authorized(config.token, request.headers.get("authorization")):
                    response = _error(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
                else:
                    response = await handler(request)
            except BadRequest as exc:
                response = _error(exc.status, exc.message, exc.field)
            except Exception:  # a bug: logged here with its traceback, never sent to the client
                log.exception("unhandled error on %s", name)
                response = _error(500, INTERNAL)
            metrics.response(name, response.status_code)
            return response

        return wrapped

    async def check(request: Request) -> Response:
        body = await _read_body(request, config.max_body_bytes)
        # Reading the request is CPU work (JSON, models, the dialogue): in a thread, so the event loop, which
        # answers /healthz, only waits for the interpreter lock a switch interval at a time, never for a parse.
        payload, trajectory, call = await anyio.to_thread.run_sync(_read_check, body, service.histories)
        request_id = uuid.uuid4().hex
        guard = service.guard(payload.principal, request_id)
        session = service.session(payload.session_id) if payload.session_id is not None else None
        started = time.perf_counter()

        wanted = ReadsWanted()  # a block cured only by reads names them: the client makes them and asks again

        def decide() -> Any:
            return guard.check(call, trajectory, session=session, fetch=wanted)

        try:
            with anyio.fail_after(config.decision_timeout_s):
                decision = await anyio.to_thread.run_sync(decide, abandon_on_cancel=True)
        except TimeoutError:  # the thread may still finish; its answer is never sent, so no grant leaves
            metrics.timeout()
            message = f"no decision within {config.decision_timeout_s:g} s; do not run the call"
            return _error(503, message, headers={"X-Request-Id": request_id})
        metrics.decision(decision, time.perf_counter() - started)
        answer = decision_json(decision)
        if decision.outcome == "block" and wanted.reads:
            answer["needs_reads"] = needed_reads(wanted.reads, request_id)
        return _JSON(answer, headers={"X-Request-Id": request_id})

    async def results(request: Request) -> Response:
        report: ResultReport = parse_model(ResultReport, parse_json(await _read_body(request, config.max_body_bytes)))
        try:
            recorded = await anyio.to_thread.run_sync(_record_fate, service, report)
        except SessionError as exc:
            return _error(409, f"the result was not recorded: {exc}", "session_id")
        except LedgerUnavailable:
            log.warning("results: the session store failed", exc_info=True)
            return _error(503, "the session store cannot be reached; the result was not recorded")
        return _JSON({"recorded": recorded})

    async def execute(request: Request) -> Response:
        executor = service.executor
        if executor is None:
            return _error(404, "no executor: start the server with --demo-effects FILE")
        payload: ExecuteRequest = parse_model(
            ExecuteRequest, parse_json(await _read_body(request, config.max_body_bytes))
        )
        call = _read_call(payload.call)
        result = await run_in_threadpool(
            executor.execute, call, payload.grant, principal=payload.principal, resource=payload.resource
        )
        metrics.execution(result.reason.split(":", 1)[0])
        return _JSON(result.model_dump(mode="json"))

    async def jwks(request: Request) -> Response:
        return _JSON(service.jwks(), headers={"Cache-Control": "public, max-age=300"})

    def detailed(request: Request) -> bool:
        """Whether the caller may see more than a status: always without a token, else only with it."""
        return authorized(config.token, request.headers.get("authorization"))

    async def healthz(request: Request) -> Response:
        if not detailed(request):
            return _JSON({"status": "ok"})
        return _JSON({"status": "ok", "replica": service.replica})

    async def readyz(request: Request) -> Response:
        store = "ok"
        try:
            with anyio.fail_after(READY_TIMEOUT_S):
                await anyio.to_thread.run_sync(service.store.is_denied, "readyz-probe", abandon_on_cancel=True)
        except TimeoutError:
            log.warning("readyz: the store did not answer within %g s", READY_TIMEOUT_S)
            store = "timeout"
        except Exception as exc:  # the reason (the store's URL, the driver's error) stays in the server's log
            log.warning("readyz: the store failed: %s: %s", type(exc).__name__, " ".join(str(exc).split()))
            store = "unreachable"
        body: dict[str, Any] = {"ready": store == "ok"}
        if detailed(request):
            checklist = service.base.checklist
            body.update(
                replica=service.replica,
                checklist=checklist.policy.name,
                policy_version=checklist.policy.version,
                grants=service.issuer is not None,
                store=store,
            )
        return _JSON(body, status_code=200 if store == "ok" else 503)

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    document = openapi_document(grants=service.issuer is not None, execute=service.executor is not None)

    async def openapi(request: Request) -> Response:
        return _JSON(document)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else INTERNAL
        metrics.response("other", status)
        return _error(status, str(detail))

    routes = [
        Route("/v1/check", route("/v1/check", check, protected=True), methods=["POST"]),
        Route("/v1/results", route("/v1/results", results, protected=True), methods=["POST"]),
        Route("/v1/execute", route("/v1/execute", execute, protected=True), methods=["POST"]),
        Route("/.well-known/jwks.json", route("/.well-known/jwks.json", jwks), methods=["GET"]),
        Route("/healthz", route("/healthz", healthz), methods=["GET"]),
        Route("/readyz", route("/readyz", readyz), methods=["GET"]),
        Route("/metrics", route("/metrics", prometheus), methods=["GET"]),
        Route("/openapi.json", route("/openapi.json", openapi), methods=["GET"]),
        *hook_routes(service),
    ]
    hosts = HostCheck.for_listener(config.host, config.allowed_hosts, config.allowed_origins)
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(_ForeignRequests, check=hosts, metrics=metrics)],
    )
