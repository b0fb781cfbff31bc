"""Everything a server process holds, built once at start: the guard's parts, the store, the keys.

A request gets its own :class:`~policyguard.guard.core.Guard` over these shared,
thread-safe parts, so its ``principal`` reaches the checks and the grant, and
its trace events carry the principal, the replica and the request id.

Session records live in the store (every replica reads them); the process
keeps one :class:`~policyguard.session.Session` object per recent session id
(:meth:`Service.session`), so a conversation's next request reads only the
messages it adds. The checks of one session are judged one at a time, across
replicas too (each waits up to :data:`SESSION_TURN_WAIT_S` for its turn), but a
check never waits for another request's write to finish
(``session_result_wait_s=0``): a write of the session still running counts as done.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from policyguard.audit.trace import Trace
from policyguard.errors import ConfigError
from policyguard.trajectory.formats.history_cache import HistoryCache

from .body import MAX_BODY_BYTES
from .keys import PublicKey, jwks, public_key, signing_key
from .metered import MeteredStore
from .metrics import Metrics
from .rebinding import HostCheck
from .requesttrace import RequestTrace

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.session import Session

SESSION_TURN_WAIT_S = 10.0  # how long a check waits while another check of its session is being judged

DEFAULT_STORE = "sqlite:///:memory:"


class ServeConfig(BaseModel):
    """The settings of one server process (the ``policyguard serve`` flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Path
    checklist: Path
    model: str = "none"
    mode: Literal["checklist", "raw", "raw_traj", "checklist_only"] = "checklist"
    store: str = DEFAULT_STORE
    trace: Path | None = None
    grant_key: Path | None = None
    publish_keys: tuple[Path, ...] = ()
    grant_ttl_s: int = 120
    unknown_tools: Literal["block", "check"] = "block"
    token: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    decision_timeout_s: float = 60.0
    replica: str = ""
    demo_effects: Path | None = None
    host: str = "127.0.0.1"  # the listening address: which Host names are accepted (see .rebinding)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()


@dataclass
class Service:
    """The shared parts of every request's guard, the store, the keys and the metrics."""

    config: ServeConfig
    base: Any  # policyguard.guard.core.Guard: the loaded checklist, policy, gate and verifier; its sessions: the store
    store: MeteredStore
    trace: Trace
    issuer: Any | None  # policyguard.enforcement.grants.GrantIssuer
    keys: list[PublicKey]
    metrics: Metrics
    executor: Any | None = None  # policyguard.enforcement.executor.GuardedExecutor, with --demo-effects only
    started: float = field(default_factory=time.time)
    histories: HistoryCache = field(default_factory=HistoryCache)  # sessions' dialogues, converted once per message

    @property
    def replica(self) -> str:
        return self.config.replica or f"pid-{os.getpid()}"

    def session(self, session_id: str) -> Session:
        """The process's object for session ``session_id``, over the record in the store."""
        session: Session = self.base.session(session_id)
        return session

    def guard(self, principal: str | None, request_id: str) -> Any:
        """A guard for one request, sharing every stateful part with the others."""
        from policyguard.guard.core import Guard

        base = self.base
        guard = Guard(
            base.checklist,
            base.policy_text,
            gate=base.gate,
            verifier=base.verifier,
            strict=base.strict,
            allow_unverified=base.allow_unverified,
            trace=RequestTrace(self.trace, principal=principal, replica=self.replica, request_id=request_id),
            principal=principal,
            grants=self.issuer,
            unknown_tools=base.unknown_tools,
            denials=self.store,
            sessions=base.sessions,
            session_wait_s=SESSION_TURN_WAIT_S,
            session_result_wait_s=0,
            unverified_log=base.unverified_log,  # "not checked, no verifier": once per process, not per request
        )
        return guard

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return jwks(self.keys)


def build_service(config: ServeConfig) -> Service:
    """Load everything once; any problem is a :class:`ConfigError` naming the file or setting."""
    from policyguard.enforcement.grants import GrantIssuer
    from policyguard.enforcement.storeurl import open_store
    from policyguard.guard.core import Guard

    if config.grant_ttl_s <= 0:
        raise ConfigError(f"--grant-ttl must be a positive number of seconds, got {config.grant_ttl_s}")
    if not config.decision_timeout_s > 0:
        raise ConfigError(f"--decision-timeout must be a positive number of seconds, got {config.decision_timeout_s}")
    if config.max_body_bytes <= 0:
        raise ConfigError(f"--max-body-bytes must be positive, got {config.max_body_bytes}")
    HostCheck.for_listener(config.host, config.allowed_hosts, config.allowed_origins)  # a bad name fails here
    loaded = Guard.from_files(
        policy=config.policy,
        checklist=config.checklist,
        model=config.model,
        mode=config.mode,
        unknown_tools=config.unknown_tools,
    )
    try:
        trace = Trace(config.trace, keep=False)
    except OSError as exc:
        raise ConfigError(f"{config.trace}: cannot open the trace file: {exc.strerror or exc}") from None
    metrics = Metrics()
    store = MeteredStore(open_store(config.store, group_commit=True), metrics)  # 16 threads, one fsync a batch
    base = Guard(
        loaded.checklist,
        loaded.policy_text,
        gate=loaded.gate,
        verifier=loaded.verifier,
        strict=loaded.strict,
        allow_unverified=loaded.allow_unverified,
        unknown_tools=loaded.unknown_tools,
        sessions=store,
        session_wait_s=SESSION_TURN_WAIT_S,
        session_result_wait_s=0,
    )
    issuer = None
    keys: list[PublicKey] = []
    if config.grant_key is not None:
        pem, signing = signing_key(config.grant_key)
        issuer = GrantIssuer(pem, ttl_s=config.grant_ttl_s, kid=signing.kid)
        keys.append(signing)
    keys += [public_key(path) for path in config.publish_keys]
    service = Service(config, base, store, trace, issuer, keys, metrics)
    if config.demo_effects is not None:
        if config.grant_key is None:
            raise ConfigError("--demo-effects needs --grant-key: the demo executor runs a call only under a grant")
        from .demo import demo_executor

        service.executor = demo_executor(base.checklist, store, trace, service.replica, config.demo_effects, keys[0])
    return service
