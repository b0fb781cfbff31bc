"""Fault injection for INV-1: a simulated dispatcher, policy and executor.

A seeded stream of tool calls goes through submit -> verdict -> dispatch while
one fault class is injected into a fraction of the calls. The same dispatcher
drives two executors: an *ungated* one that executes whatever it is handed (a
typical queue consumer) and a *verdict-gated* state machine that refuses by
default. Every run writes INV-1 events to a :class:`~policyguard.audit.trace.Trace`.

A third executor, ``grants``, is the production path: each allow carries a
signed call-bound grant (:mod:`policyguard.enforcement.grants`) and the executor verifies
it against a :class:`~policyguard.enforcement.store.SQLiteStore` of spent nonces and
recorded denials.

The harness counts violations twice, independently: from its own ground truth
(it knows which fault it injected into which dispatch) and by replaying the
emitted trace through :func:`policyguard.audit.inv1.audit`. The two must agree; the
gated executor must have zero in every scenario.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from policyguard.audit.inv1 import VIOLATION_KINDS, ViolationKind, audit_records
from policyguard.audit.trace import Trace
from policyguard.trajectory.canonical import args_sha256, sha256_hex
from policyguard.trajectory.messages import ToolCall

SCENARIOS = (
    "no_faults",
    "verdict_reorder",
    "duplicate_verdict",
    "arg_mutation_after_allow",
    "revocation",
    "expiry",
    "nonce_replay",
)
Scenario = Literal[
    "no_faults",
    "verdict_reorder",
    "duplicate_verdict",
    "arg_mutation_after_allow",
    "revocation",
    "expiry",
    "nonce_replay",
]
ExecutorKind = Literal["gated", "grants", "ungated"]
EXECUTORS: tuple[ExecutorKind, ...] = ("gated", "grants", "ungated")

EPOCH = 1_800_000_000.0  # simulated wall clock start: traces are reproducible
TTL_S = 30.0
FAULT_RATE = 0.3
TOOLS = ("search", "read_file", "write_file", "delete_record")
DENY_TOOLS = frozenset({"read_file", "delete_record"})


@dataclass(frozen=True)
class Verdict:
    """A policy verdict for one call; ``nonce`` identifies it, ``grant`` is its signed form."""

    kind: Literal["allow", "deny"]
    call_id: str
    tool: str
    arguments: dict[str, Any]
    policy_version: str
    expires_at: float
    nonce: str
    grant: str | None = None

    @property
    def args_sha256(self) -> str:
        return args_sha256(self.arguments)


class Executor(Protocol):
    """Receives verdicts and revocations; decides whether a dispatched call runs."""

    def record_verdict(self, verdict: Verdict) -> None: ...

    def revoke(self, policy_version: str) -> None: ...

    def try_execute(self, call_id: str, tool: str, arguments: dict[str, Any], now: float) -> bool: ...


class UngatedExecutor:
    """Executes whatever it is handed: verdicts are logged, never consulted."""

    def record_verdict(self, verdict: Verdict) -> None:
        return None

    def revoke(self, policy_version: str) -> None:
        return None

    def try_execute(self, call_id: str, tool: str, arguments: dict[str, Any], now: float) -> bool:
        return True


class GatedExecutor:
    """A verdict-gated state machine: refuses unless every condition holds.

    A call runs only with a recorded allow for the same call_id, tool and args
    hash, issued under the current policy version, not expired at ``now``,
    whose nonce was not used before, and with no deny recorded for the call_id
    (deny wins, whatever the order verdicts arrived in).
    """

    def __init__(self) -> None:
        self._allows: dict[str, Verdict] = {}
        self._denied: set[str] = set()
        self._used_nonces: set[str] = set()
        self._version: str | None = None

    def record_verdict(self, verdict: Verdict) -> None:
        if verdict.kind == "deny":
            self._denied.add(verdict.call_id)
        else:
            self._allows[verdict.call_id] = verdict

    def revoke(self, policy_version: str) -> None:
        self._version = policy_version

    def try_execute(self, call_id: str, tool: str, arguments: dict[str, Any], now: float) -> bool:
        allow = self._allows.get(call_id)
        if call_id in self._denied or allow is None:
            return False
        if allow.tool != tool or allow.args_sha256 != args_sha256(arguments):
            return False
        if self._version is not None and allow.policy_version != self._version:
            return False
        if now > allow.expires_at or allow.nonce in self._used_nonces:
            return False
        self._used_nonces.add(allow.nonce)
        return True


class GrantExecutor:
    """The production path: a signed grant per allow, checked by GrantVerifier over SQLiteStore.

    Deny verdicts are recorded in the store (deny wins), the grant's nonce is
    spent on first use, and the verifier compares the grant's policy version
    with the current one and its expiry with the simulated clock.
    """

    def __init__(self, public_key_pem: bytes, policy_version: str, clock: Callable[[], float]) -> None:
        from policyguard.enforcement.grants import GrantVerifier
        from policyguard.enforcement.store import SQLiteStore

        self.store = SQLiteStore(":memory:", synchronous="NORMAL", clock=clock)
        self._version = policy_version
        self._grants: dict[str, str] = {}
        self.verifier = GrantVerifier(
            public_key_pem, nonces=self.store, current_policy_version=lambda: self._version, clock=clock
        )

    def record_verdict(self, verdict: Verdict) -> None:
        if verdict.kind == "deny":
            self.store.deny(verdict.call_id)
        elif verdict.grant is not None:
            self._grants[verdict.call_id] = verdict.grant

    def revoke(self, policy_version: str) -> None:
        self._version = policy_version

    def try_execute(self, call_id: str, tool: str, arguments: dict[str, Any], now: float) -> bool:
        from policyguard.enforcement.grants import GrantError

        token = self._grants.get(call_id)
        if token is None:
            return False
        try:
            self.verifier.verify(
                token, ToolCall(id=call_id, name=tool, arguments=arguments), principal=None, resource=None
            )
        except GrantError:
            return False
        return True


class ScenarioResult(BaseModel):
    """One (executor, scenario) run: trace size, denominator and both violation counts."""

    model_config = ConfigDict(extra="forbid")

    executor: ExecutorKind
    scenario: Scenario
    calls: int
    faults_injected: int
    events: int
    executes: int
    violations: int = Field(description="Found by replaying the trace through inv1.audit.")
    expected_violations: int = Field(description="Counted by the harness from its own ground truth.")
    by_kind: dict[str, int]
    expected_by_kind: dict[str, int]
    trace_path: str | None = None

    @property
    def agrees(self) -> bool:
        return self.violations == self.expected_violations and self.by_kind == self.expected_by_kind


@dataclass
class _CallState:
    tool: str
    args_hash: str
    verdict_kind: Literal["allow", "deny"]
    deny_delivered: bool = False
    allow_delivered: bool = False
    allow_version: str | None = None
    allow_expires: float = 0.0
    executed: bool = False


class _Minter:
    """The policy side's signing key: turns an allow into a call-bound grant."""

    def __init__(self, clock: Callable[[], float]) -> None:
        from policyguard.enforcement.grants import GrantIssuer, generate_keypair

        private_pem, self.public_pem = generate_keypair()
        self.issuer = GrantIssuer(private_pem, ttl_s=int(TTL_S), clock=clock)

    def sign(self, verdict: Verdict) -> str:
        call = ToolCall(id=verdict.call_id, name=verdict.tool, arguments=verdict.arguments)
        return self.issuer.issue(call, principal=None, resource=None, policy_version=verdict.policy_version)


@dataclass
class _World:
    """One simulated run. Ground truth lives in ``expected``, the evidence in ``trace``."""

    trace: Trace
    rng: random.Random
    executor: Executor = field(default_factory=UngatedExecutor)
    minter: _Minter | None = None
    now: float = EPOCH
    policy_version: str = field(default_factory=lambda: "sha256:" + sha256_hex("policy v1"))
    versions: int = 1
    states: dict[str, _CallState] = field(default_factory=dict)
    committed_keys: set[str] = field(default_factory=set)
    expected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VIOLATION_KINDS, 0))

    def clock(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds

    def emit(self, event: str, **fields: Any) -> None:
        self.trace.emit(event, ts=self.now, **fields)

    def make_verdict(self, kind: Literal["allow", "deny"], call_id: str, tool: str, args: dict[str, Any]) -> Verdict:
        """A verdict as the policy issues it (an allow is signed once, when grants are in use)."""
        nonce = sha256_hex(f"{call_id}:{args_sha256(args)}:{self.policy_version}:{kind}")[:16]
        verdict = Verdict(kind, call_id, tool, dict(args), self.policy_version, self.now + TTL_S, nonce)
        if kind == "allow" and self.minter is not None:
            verdict = replace(verdict, grant=self.minter.sign(verdict))
        return verdict

    def deliver(self, verdict: Verdict) -> None:
        state = self.states[verdict.call_id]
        ids = {"call_id": verdict.call_id, "tool": verdict.tool, "args_sha256": verdict.args_sha256}
        if verdict.kind == "allow":
            state.allow_delivered = True
            state.allow_version = verdict.policy_version
            state.allow_expires = verdict.expires_at
            self.emit(
                "allow",
                **ids,
                policy_version=verdict.policy_version,
                expires_at=verdict.expires_at,
                nonce=verdict.nonce,
            )
        else:
            state.deny_delivered = True
            self.emit("deny", **ids, policy_version=verdict.policy_version)
        self.executor.record_verdict(verdict)
        self.tick()

    def revoke(self) -> None:
        self.versions += 1
        self.policy_version = "sha256:" + sha256_hex(f"policy v{self.versions}")
        self.emit("revoke", policy_version=self.policy_version)
        self.executor.revoke(self.policy_version)
        self.tick()

    def dispatch(self, call_id: str, tool: str, args: dict[str, Any], *, injected: ViolationKind | None = None) -> bool:
        """Hand the call to the executor; on success log execute + effect and score it.

        ``injected`` is what the harness knows it did to this dispatch (the
        ground truth); a deny already delivered overrides it (deny wins).
        """
        state = self.states[call_id]
        if not self.executor.try_execute(call_id, tool, args, self.now):
            self.tick()
            return False
        args_hash = args_sha256(args)
        self.emit("execute", call_id=call_id, tool=tool, args_sha256=args_hash)
        expected: ViolationKind | None = injected
        if state.deny_delivered:
            expected = "denied"
        elif state.executed and injected is None:
            expected = "replay"
        if expected is not None:
            self.expected[expected] += 1
        state.executed = True
        key = f"idem-{call_id}"
        self.emit("effect", call_id=call_id, tool=tool, args_sha256=args_hash, idempotency_key=key)
        if key in self.committed_keys:
            self.expected["duplicate_effect"] += 1
        self.committed_keys.add(key)
        self.tick()
        return True


def _make_world(kind: ExecutorKind, trace: Trace, rng: random.Random) -> _World:
    world = _World(trace=trace, rng=rng)
    if kind == "gated":
        world.executor = GatedExecutor()
    elif kind == "grants":
        world.minter = _Minter(world.clock)
        world.executor = GrantExecutor(world.minter.public_pem, world.policy_version, world.clock)
    elif kind != "ungated":
        raise ValueError(f"unknown executor {kind!r}")
    return world


def run_scenario(
    executor: ExecutorKind,
    scenario: Scenario,
    *,
    calls: int = 200,
    seed: int = 7,
    trace_dir: str | Path | None = None,
) -> ScenarioResult:
    """Run one scenario with one executor; audit its trace and compare to ground truth."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    path = Path(trace_dir) / f"{executor}-{scenario}.jsonl" if trace_dir is not None else None
    if path is not None and path.exists():
        path.unlink()
    rng = random.Random(f"{seed}:{scenario}")
    with Trace(path, keep=True) as trace:
        world = _make_world(executor, trace, rng)
        faults = sum(_one_call(world, scenario, index) for index in range(calls))
    report = audit_records(trace.events)
    return ScenarioResult(
        executor=executor,
        scenario=scenario,
        calls=calls,
        faults_injected=faults,
        events=report.events,
        executes=report.executes,
        violations=len(report.violations),
        expected_violations=sum(world.expected.values()),
        by_kind=report.counts(),
        expected_by_kind=world.expected,
        trace_path=str(path) if path is not None else None,
    )


def _one_call(world: _World, scenario: Scenario, index: int) -> bool:
    """Simulate one call; returns whether a fault was injected into it."""
    rng = world.rng
    call_id = f"c{index}"
    tool = rng.choice(TOOLS)
    args = {"path": f"/srv/data/{index}.csv", "n": rng.randrange(1000)}
    kind: Literal["allow", "deny"] = "deny" if tool in DENY_TOOLS else "allow"
    verdict = world.make_verdict(kind, call_id, tool, args)
    world.states[call_id] = _CallState(tool=tool, args_hash=args_sha256(args), verdict_kind=kind)
    world.emit("submit", call_id=call_id, tool=tool, args_sha256=args_sha256(args))
    world.tick()
    fault = scenario != "no_faults" and rng.random() < FAULT_RATE
    if not fault:
        world.deliver(verdict)
        world.dispatch(call_id, tool, args)
        return False
    if scenario == "verdict_reorder":
        ran = world.dispatch(call_id, tool, args, injected="no_allow")
        world.deliver(verdict)
        if not ran:
            world.dispatch(call_id, tool, args)
    elif scenario == "duplicate_verdict":
        # A queue consumer dispatches once per verdict message; the second message
        # is either an identical copy or a conflicting verdict (deny wins).
        world.deliver(verdict)
        world.dispatch(call_id, tool, args)
        if rng.random() < 0.5:
            world.deliver(verdict)
        else:
            world.deliver(world.make_verdict("deny" if kind == "allow" else "allow", call_id, tool, args))
        world.dispatch(call_id, tool, args)
    elif scenario == "arg_mutation_after_allow":
        world.deliver(verdict)
        world.dispatch(call_id, tool, {**args, "path": "/srv/secrets/keys.csv"}, injected="args_changed")
    elif scenario == "revocation":
        world.deliver(verdict)
        world.revoke()
        world.dispatch(call_id, tool, args, injected="revoked")
    elif scenario == "expiry":
        world.deliver(verdict)
        world.tick(TTL_S + 5)
        world.dispatch(call_id, tool, args, injected="expired")
    elif scenario == "nonce_replay":
        world.deliver(verdict)
        world.dispatch(call_id, tool, args)
        world.dispatch(call_id, tool, args)
    return True


def run_matrix(
    *,
    calls: int = 200,
    seed: int = 7,
    trace_dir: str | Path | None = None,
    executors: tuple[ExecutorKind, ...] = EXECUTORS,
) -> list[ScenarioResult]:
    """Every executor x every scenario, in the order of ``executors``."""
    return [
        run_scenario(executor, scenario, calls=calls, seed=seed, trace_dir=trace_dir)  # type: ignore[arg-type]
        for executor in executors
        for scenario in SCENARIOS
    ]
