"""The demo executor behind ``--demo-effects FILE``: proof of "exactly one effect" across replicas.

Every mutating tool the checklist names (exact names, no globs) is registered
with a :class:`~policyguard.enforcement.executor.GuardedExecutor` whose grant nonces,
denials and money ledger are the server's shared store. The "tool" appends one
JSON line per invocation to ``FILE`` (``O_APPEND``, one ``write`` of a short
line, then ``fsync``), so a test counts what really ran, independently of the
ledger. Not for production: a real deployment runs the executor inside the
tool service, which verifies the grant against ``/.well-known/jwks.json``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policyguard.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.audit.trace import Trace
    from policyguard.checklist.schema import Checklist
    from policyguard.enforcement.executor import GuardedExecutor

    from .keys import PublicKey

_GLOB = set("*?[")


class EffectLog:
    """A tool that records each invocation as one line of ``path``."""

    def __init__(self, tool: str, path: Path, replica: str) -> None:
        self.tool = tool
        self.path = path
        self.replica = replica

    def __call__(self, **arguments: Any) -> dict[str, Any]:
        line = json.dumps(
            {"tool": self.tool, "arguments": arguments, "replica": self.replica, "pid": os.getpid(), "ts": time.time()},
            sort_keys=True,
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"status": "done", "tool": self.tool}


def demo_executor(
    checklist: Checklist, store: Any, trace: Trace, replica: str, path: Path, key: PublicKey
) -> GuardedExecutor:
    """An executor over ``path`` for every mutating tool of ``checklist``, checking grants signed by ``key``.

    ``store`` is the service's store (nonces and ledger); ``trace`` its shared
    trace, which each event reaches with the ``replica`` field.
    """
    from policyguard.enforcement.executor import GuardedExecutor
    from policyguard.enforcement.grants import GrantVerifier

    from .requesttrace import RequestTrace

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot open the demo effects file: {exc.strerror or exc}") from None
    tools: dict[str, Callable[..., Any]] = {
        name: EffectLog(name, path, replica)
        for name in checklist.tools
        if not _GLOB & set(name) and checklist.is_mutating(name)
    }
    verifier = GrantVerifier(key.pem(), nonces=store, current_policy_version=lambda: checklist.policy.version)
    request_trace = RequestTrace(trace, replica=replica)
    return GuardedExecutor(tools, verifier=verifier, ledger=store, checklist=checklist, trace=request_trace)
