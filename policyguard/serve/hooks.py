"""``POST /v1/hooks/claude-code``: Claude Code's ``http`` hook type, with the command hook's semantics.

The body is the hook event; the answer is the hook's JSON
(:class:`~policyguard.integrations.claude_code.ClaudeCodeHook`). Claude Code treats
a non-2xx status, a connection failure and a timeout of an ``http`` hook as a
non-blocking error and runs the call, so this route never answers an error
status to a PreToolUse event: a missing or wrong token, a body it cannot read,
an error or no decision within ``--decision-timeout`` all answer **200 with a
deny** naming the reason. (A server that is down cannot answer at all: the page
says to prefer the command hook where that matters.)

The session record is the server's store, keyed by ``session_id``. The server
reads ``transcript_path`` only inside ``$POLICYGUARD_HOOK_TRANSCRIPTS`` (default
``~/.claude/projects``, where Claude Code keeps transcripts), so a client cannot
make it read other files; a path elsewhere is a deny.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from policyguard.integrations.claude_code import ClaudeCodeHook, HookEvent, deny

from .auth import authorized
from .service import Service

log = logging.getLogger("policyguard.serve")
PATH = "/v1/hooks/claude-code"
TRANSCRIPTS_ENV = "POLICYGUARD_HOOK_TRANSCRIPTS"


def transcripts_root() -> Path:
    return Path(os.environ.get(TRANSCRIPTS_ENV) or Path.home() / ".claude" / "projects")


def hook_routes(service: Service) -> list[Route]:
    """The hook routes of one server process."""
    config = service.config

    async def claude_code(request: Request) -> Response:
        try:
            answer = await _answer(request)
        except Exception as exc:  # a bug: logged, and still a deny
            log.exception("unhandled error on %s", PATH)
            answer = deny(f"policyguard: the call was not decided ({type(exc).__name__}); do not run it")
        service.metrics.response(PATH, 200)
        return JSONResponse(answer)

    async def _answer(request: Request) -> dict[str, Any]:
        if not authorized(config.token, request.headers.get("authorization")):
            return deny("policyguard: the hook's bearer token is missing or wrong, so the call was not checked")
        body = await _body(request, config.max_body_bytes)
        if body is None:
            return deny(f"policyguard: the hook event is larger than {config.max_body_bytes} bytes")
        try:
            event = HookEvent.read(body)
        except Exception as exc:
            return deny(f"policyguard: {exc}")
        hook = ClaudeCodeHook(
            service.guard(None, uuid.uuid4().hex), transcripts=transcripts_root(), sessions=service.session
        )

        def decide() -> dict[str, Any]:
            return hook.answer(event)

        try:
            with anyio.fail_after(config.decision_timeout_s):
                return await anyio.to_thread.run_sync(decide, abandon_on_cancel=True)
        except TimeoutError:
            service.metrics.timeout()
            return deny(f"policyguard: no decision within {config.decision_timeout_s:g} s; do not run the call")
        except Exception as exc:  # HookInputError and anything the record raised: fail closed
            return deny(f"policyguard: {' '.join(str(exc).split())[:500] or type(exc).__name__}")

    return [Route(PATH, claude_code, methods=["POST"])]


async def _body(request: Request, limit: int) -> bytes | None:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["PATH", "TRANSCRIPTS_ENV", "hook_routes"]
