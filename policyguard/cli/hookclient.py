"""``policyguard hook claude-code --server URL``: hand the event to a running ``policyguard serve``.

The command hook runs as a new process before every matched call. Deciding in
that process means importing the guard (pydantic, PyYAML, the CEL engine) and
loading the checklist each time: about 240 ms on a shared 2-core machine. With
``--server`` the process only forwards the event to ``POST /v1/hooks/claude-code``
of a server that already has the checklist loaded, and prints its answer, so it
imports nothing beyond the standard library's HTTP client.

It keeps the command hook's exit codes, which is what Claude Code's own ``http``
hook type cannot do: a server that is down, refuses the connection, times out,
answers a status other than 200 or anything but a JSON object is exit 2 with one
line on stderr, so Claude Code blocks the call. Never exit 1 ("go ahead").

The bearer token is read from ``$POLICYGUARD_SERVE_TOKEN``, as ``serve`` reads
it. The server reads the event's ``transcript_path`` itself, so it must run on
the machine and under the account that Claude Code writes transcripts with (see
``$POLICYGUARD_HOOK_TRANSCRIPTS`` on the server).
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

ROUTE = "/v1/hooks/claude-code"
TOKEN_ENV = "POLICYGUARD_SERVE_TOKEN"  # the name serve reads (policyguard.serve.auth.TOKEN_ENV)
MAX_ANSWER_BYTES = 1024 * 1024


class ForwardError(Exception):
    """The server gave no usable answer; the message is the one line for stderr."""


def forward(server: str, event: bytes, timeout: float) -> dict[str, Any]:
    """The server's hook answer to ``event``; raises :class:`ForwardError` on anything else."""
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ForwardError(f"--server must be an http:// or https:// URL, got {server!r}")
    path = parts.path.rstrip("/") + ROUTE
    headers = {"Content-Type": "application/json", "Content-Length": str(len(event))}
    token = os.environ.get(TOKEN_ENV)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
        try:
            connection.request("POST", path, body=event, headers=headers)
            response = connection.getresponse()
            body = response.read(MAX_ANSWER_BYTES + 1)
        finally:
            connection.close()
    except (OSError, http.client.HTTPException) as exc:  # refused, unreachable, timed out, cut off
        raise ForwardError(f"the policy server at {server} did not answer ({type(exc).__name__}: {exc})") from None
    if response.status != 200:
        raise ForwardError(f"the policy server at {server} answered HTTP {response.status}")
    if len(body) > MAX_ANSWER_BYTES:
        raise ForwardError(f"the policy server's answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        answer = json.loads(body)
    except ValueError:
        raise ForwardError("the policy server's answer is not JSON") from None
    if not isinstance(answer, dict):
        raise ForwardError("the policy server's answer is not a JSON object")
    return answer
