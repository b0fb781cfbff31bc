"""Login by a shared token, server-side sessions, and per-session CSRF tokens.

Sessions live in memory (one console process): a random session id in an
``HttpOnly; SameSite=Strict`` cookie maps to the reviewer's name and a CSRF
token. Every comparison of a secret is constant-time. Sessions expire after
``ttl_s`` of inactivity; a restart logs everybody out.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "pg_review"
TOKEN_ENV = "POLICYGUARD_REVIEW_TOKEN"
MIN_TOKEN_CHARS = 16


@dataclass
class Session:
    reviewer: str
    csrf: str
    seen: float


def token_problem(token: str | None) -> str | None:
    """Why ``token`` cannot protect the console (None when it can)."""
    if not token:
        return f"set {TOKEN_ENV} to the login token reviewers will type (the console never runs without one)"
    if len(token) < MIN_TOKEN_CHARS:
        return f"{TOKEN_ENV} is {len(token)} characters; use at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 24`)"
    return None


class Sessions:
    """Logged-in reviewers, keyed by an unguessable session id."""

    def __init__(self, token: str, *, ttl_s: float = 8 * 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        problem = token_problem(token)
        if problem is not None:
            raise ValueError(problem)
        self._token = token.encode("utf-8")
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def login(self, token: str, reviewer: str) -> str | None:
        """A new session id when ``token`` is right, else None."""
        if not hmac.compare_digest(token.encode("utf-8"), self._token):
            return None
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = Session(reviewer=reviewer, csrf=secrets.token_urlsafe(32), seen=self._clock())
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if now - session.seen > self._ttl_s:
                del self._sessions[sid]
                return None
            session.seen = now
            return session

    def logout(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)


def csrf_ok(session: Session, submitted: str | None) -> bool:
    """Whether a form's CSRF token is this session's (constant time)."""
    return bool(submitted) and hmac.compare_digest(str(submitted).encode("utf-8"), session.csrf.encode("utf-8"))
