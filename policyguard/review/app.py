"""The console's ASGI app (Starlette): routes, guards on every route, rendering.

Every page needs a session (``/login`` excepted); every state change is a POST
that carries the session's CSRF token; a GET never changes anything. Responses
carry a strict Content-Security-Policy (no script, styles from this origin),
``X-Frame-Options: DENY`` and ``Cache-Control: no-store``. A decision error
(already decided, expired, unknown id) is shown as a one-line message with
status 409/404, never a traceback. Only ``/approve`` and ``/deny`` decide; any other
action (``/Approve``, ``/reject``) is a 404 and records nothing.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from policyguard.approvals.queue import ApprovalError, ApprovalQueue, ApprovalRequest

from . import traces as trace_data
from .auth import COOKIE, Session, Sessions, csrf_ok

Action = Literal["approve", "deny"]
Decide = Callable[[str, Action, str, str | None], ApprovalRequest]

MAX_FORM_BYTES = 16 * 1024
MAX_REASON_CHARS = 2000
MAX_REVIEWER_CHARS = 80
_MONEY = re.compile(r"amount|price|total|refund|cost|fee|compensation|balance|sum", re.IGNORECASE)
_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]  # fmt: skip


class _SecurityHeaders:
    """Adds the console's security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [h for h in _HEADERS if h[0] not in names]
            await send(message)

        await self.app(scope, receive, with_headers)


class _Form(Exception):
    """A form that cannot be read: status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def create_app(
    queue: ApprovalQueue,
    *,
    token: str,
    trace_files: Sequence[str | Path] = (),
    decide: Decide | None = None,
    clock: Callable[[], float] = time.time,
    secure_cookie: bool = False,
) -> Starlette:
    """The console over ``queue`` and ``trace_files``; ``decide`` records a reviewer's decision.

    ``decide(request_id, action, reviewer, reason)`` defaults to the queue's own
    ``approve``/``deny``; the CLI passes the approval flow that also writes the
    ``approve``/``deny`` trace events.
    """
    sessions = Sessions(token)
    templates = Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    templates.filters["age"] = lambda then: _age(clock() - then)
    templates.filters["when"] = lambda ts: time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else "-"
    css = (Path(__file__).parent / "templates" / "review.css").read_text(encoding="utf-8")

    def _decide(request_id: str, action: Action, reviewer: str, reason: str | None) -> ApprovalRequest:
        if decide is not None:
            return decide(request_id, action, reviewer, reason)
        if action == "approve":
            return queue.approve(request_id, reviewer, reason)
        return queue.deny(request_id, reviewer, reason)

    def page(name: str, session: Session | None, status: int = 200, **context: Any) -> HTMLResponse:
        body = templates.get_template(name).render(session=session, **context)
        return HTMLResponse(body, status_code=status)

    def current(request: Request) -> Session | None:
        return sessions.get(request.cookies.get(COOKIE))

    def to_login() -> Response:
        return RedirectResponse("/login", status_code=303)

    async def login_form(request: Request) -> Response:
        return page("login.html", None, error=None)

    async def login(request: Request) -> Response:
        try:
            form = await _read_form(request)
        except _Form as bad:
            return page("login.html", None, status=bad.status, error=bad.reason)
        reviewer = form.get("reviewer", "").strip()
        if not reviewer or len(reviewer) > MAX_REVIEWER_CHARS or not reviewer.isprintable():
            return page(
                "login.html", None, status=400, error=f"your name: 1 to {MAX_REVIEWER_CHARS} printable characters"
            )
        sid = sessions.login(form.get("token", ""), reviewer)
        if sid is None:
            return page("login.html", None, status=401, error="wrong token")
        response = RedirectResponse("/queue", status_code=303)
        response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", secure=secure_cookie, path="/")
        return response

    async def logout(request: Request) -> Response:
        session = current(request)
        if session is None:
            return to_login()
        try:
            form = await _read_form(request)
        except _Form as bad:
            return PlainTextResponse(bad.reason, status_code=bad.status)
        if not csrf_ok(session, form.get("csrf")):
            return PlainTextResponse("CSRF token missing or wrong", status_code=403)
        sessions.logout(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def home(request: Request) -> Response:
        return RedirectResponse("/queue", status_code=303)

    async def queue_page(request: Request) -> Response:
        session = current(request)
        if session is None:
            return to_login()
        pending = queue.pending()
        decided = [r for r in reversed(queue.all()) if r.status != "pending"][:20]
        return page("queue.html", session, pending=pending, decided=decided, money=_money)

    async def request_page(request: Request) -> Response:
        session = current(request)
        if session is None:
            return to_login()
        found = queue.get(request.path_params["request_id"])
        if found is None:
            return page("message.html", session, status=404, title="Not found", text="No such approval request.")
        return page("request.html", session, item=found, money=_money, notice=None)

    def decide_route(action: Action) -> Callable[[Request], Any]:
        """The POST handler of one action; each action has its own route, so any other path is a 404."""

        async def handler(request: Request) -> Response:
            return await decide_request(request, action)

        return handler

    async def decide_request(request: Request, action: Action) -> Response:
        session = current(request)
        if session is None:
            return PlainTextResponse("log in first", status_code=401)
        try:
            form = await _read_form(request)
        except _Form as bad:
            return PlainTextResponse(bad.reason, status_code=bad.status)
        if not csrf_ok(session, form.get("csrf")):
            return PlainTextResponse("CSRF token missing or wrong", status_code=403)
        reason = form.get("reason", "").strip() or None
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            return PlainTextResponse(f"reason: at most {MAX_REASON_CHARS} characters", status_code=400)
        request_id = request.path_params["request_id"]
        try:
            _decide(request_id, action, session.reviewer, reason)
        except ApprovalError as exc:
            status = 404 if exc.reason == "not_found" else 409
            found = queue.get(request_id)
            if found is None:
                return page("message.html", session, status=status, title="Not found", text=str(exc))
            return page("request.html", session, status=status, item=found, money=_money, notice=str(exc))
        return RedirectResponse(f"/requests/{urllib.parse.quote(request_id)}", status_code=303)

    async def decisions_page(request: Request) -> Response:
        session = current(request)
        if session is None:
            return to_login()
        views = trace_data.load(trace_files)
        q = request.query_params
        filters = {"outcome": q.get("outcome", ""), "tool": q.get("tool", ""), "requirement": q.get("requirement", "")}
        rows = trace_data.filtered(views, **filters)
        tools = sorted({r.tool for v in views for r in v.decisions if r.tool})
        outcomes = sorted({r.outcome for v in views for r in v.decisions if r.outcome})
        return page("decisions.html", session, views=views, rows=rows[:500], total=len(rows), filters=filters,
                    tools=tools, outcomes=outcomes)  # fmt: skip

    async def decision_page(request: Request) -> Response:
        session = current(request)
        if session is None:
            return to_login()
        index, t = request.path_params["file"], request.path_params["t"]
        if not 0 <= index < len(trace_files):
            return page("message.html", session, status=404, title="Not found", text="No such trace file.")
        view = trace_data.load([trace_files[index]])[0]
        row = next((r for r in view.decisions if r.t == t), None)
        if row is None:
            return page("message.html", session, status=404, title="Not found", text="No such decision.")
        row.file = index
        return page("decision.html", session, row=row, path=view.path)

    async def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css")

    routes = [
        Route("/", home),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/queue", queue_page, methods=["GET"]),
        Route("/requests/{request_id}", request_page, methods=["GET"]),
        Route("/requests/{request_id}/approve", decide_route("approve"), methods=["POST"]),
        Route("/requests/{request_id}/deny", decide_route("deny"), methods=["POST"]),
        Route("/decisions", decisions_page, methods=["GET"]),
        Route("/decisions/{file:int}/{t:int}", decision_page, methods=["GET"]),
        Route("/static/review.css", stylesheet, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_SecurityHeaders)
    return app


async def _read_form(request: Request) -> dict[str, str]:
    """A url-encoded form of at most :data:`MAX_FORM_BYTES`, each field once."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if not kind and request.headers.get("content-length", "0") == "0":
        return {}  # an empty POST: no fields (so no CSRF token either)
    if kind != "application/x-www-form-urlencoded":
        raise _Form(415, "expected a form (application/x-www-form-urlencoded)")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise _Form(413, f"form larger than {MAX_FORM_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise _Form(413, f"form larger than {MAX_FORM_BYTES} bytes")
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Form(400, f"unreadable form: {exc}") from exc
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise _Form(400, f"form field {name!r} given twice")
        form[name] = value
    return form


def _money(arguments: dict[str, Any]) -> list[tuple[str, Any]]:
    """Amount-like arguments (by name), one level deep: what a reviewer looks at first."""
    found: list[tuple[str, Any]] = []
    for key, value in arguments.items():
        if isinstance(value, dict):
            found += [(f"{key}.{k}", v) for k, v in value.items() if _MONEY.search(str(k)) and _plain(v)]
        elif _MONEY.search(str(key)) and _plain(value):
            found.append((str(key), value))
    return found[:6]


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
