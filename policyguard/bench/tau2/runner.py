"""``policyguard bench tau2``: simulations in layers, as tau2's own runner does.

1. :func:`simulate` - a pure function: one task, one trial, one configuration,
   run through tau2's orchestrator and scored by tau2's evaluator;
2. :class:`RunContext` - resolves names once (domain data, checklist, models);
3. :func:`run_benchmark` - the batch layer: concurrency, one checkpoint file
   per finished simulation, resume (nothing finished is re-run), retries of
   infrastructure errors with the same seed, a progress bar on stderr and a
   summary.

Real runs need provider keys; :func:`check_keys` fails first, naming the
missing environment variable. Tests drive the batch layer with a fake
``simulate``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from policyguard.checklist.schema import Checklist
from policyguard.errors import ConfigError

from .guarding import CONFIGS, build_guard, needs_verifier
from .results import ExecutedCall, SimResult, sim_key

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.verifier.models import Model

    from .domain import DomainData

SIMS_DIR = "sims"
_YES = re.compile(r"\byes\b", re.IGNORECASE)
SPEC_FILE = "run.json"
SUMMARY_FILE = "summary.json"
DEFAULT_SEED = 300


class RunSpec(BaseModel):
    """Everything that defines a run; stored as ``run.json`` and checked on resume."""

    model_config = ConfigDict(extra="forbid")

    domain: str = "airline"
    config: str
    agent_model: str
    user_model: str
    verifier_model: str | None = None
    checklist: str | None = None
    trials: int = Field(default=4, ge=1)
    split: str = "base"
    tasks: list[str] | None = None
    concurrency: int = Field(default=4, ge=1)
    max_steps: int = Field(default=100, ge=1)
    max_errors: int = 10
    retries: int = Field(default=2, ge=0)
    seed: int = DEFAULT_SEED
    agent_llm_args: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0.0})
    user_llm_args: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0.0})

    def identity(self) -> dict[str, Any]:
        """The fields a resumed run must share with the original (not concurrency or retries)."""
        return self.model_dump(exclude={"concurrency", "retries"})


# -- keys ---------------------------------------------------------------------

_SDK_KEYS = {"openai-sdk": ["OPENAI_API_KEY"], "anthropic-sdk": ["ANTHROPIC_API_KEY"]}


def missing_keys(model: str) -> list[str]:
    """Environment variables ``model`` needs that are not set (alternatives joined by ' or ')."""
    spec = model.strip()
    prefix, _, rest = spec.partition(":")
    if spec == "none" or (rest and prefix == "scripted"):
        return []
    if rest and prefix in _SDK_KEYS:
        return [k for k in _SDK_KEYS[prefix] if not os.environ.get(k)]
    name = rest if rest and prefix == "litellm" else spec
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    try:
        info = litellm.validate_environment(model=name)
    except Exception:  # unknown provider: litellm cannot tell, let the call say
        return []
    if info.get("keys_in_environment", True):
        return []
    missing = [str(k) for k in info.get("missing_keys", [])]
    return [" or ".join(missing)] if missing else []


def check_keys(spec: RunSpec) -> None:
    """Fail before anything runs when a model's key is missing, naming the variable."""
    roles = [("--agent-model", spec.agent_model), ("--user-model", spec.user_model)]
    if needs_verifier(spec.config):
        if not spec.verifier_model:
            raise ConfigError(f"config {spec.config!r} needs --verifier-model")
        roles.append(("--verifier-model", spec.verifier_model))
    problems = [f"{flag} {model} needs {', '.join(keys)}" for flag, model in roles if (keys := missing_keys(model))]
    if problems:
        raise ConfigError(
            "missing API key(s): "
            + "; ".join(problems)
            + ". Set the environment variable(s) and run again (bench tau2 calls real models)."
        )


# -- names resolved once --------------------------------------------------------


@dataclass
class RunContext:
    spec: RunSpec
    data: DomainData
    checklist: Checklist
    verifier_model: Model | None

    @classmethod
    def build(cls, spec: RunSpec) -> RunContext:
        from policyguard.checklist.schema import load_checklist
        from policyguard.resources import shipped_checklist
        from policyguard.verifier.models import resolve_model

        from .domain import DomainData

        if spec.config not in CONFIGS:
            raise ConfigError(f"unknown config {spec.config!r}; expected one of {', '.join(CONFIGS)}")
        data = DomainData.load(spec.domain)
        if spec.checklist is None and spec.config == "baseline":
            try:
                path = shipped_checklist(spec.domain)
            except ConfigError:  # the baseline needs no checklist: tau2's own tool types say what writes
                checklist = tool_type_checklist(data)
            else:
                checklist = load_checklist(path)
        else:
            checklist = load_checklist(spec.checklist or shipped_checklist(spec.domain))
        model = resolve_model(spec.verifier_model) if needs_verifier(spec.config) and spec.verifier_model else None
        return cls(spec=spec, data=data, checklist=checklist, verifier_model=model)

    def task_ids(self) -> list[str]:
        ids = self.spec.tasks or self.data.split_ids(self.spec.split)
        known = {t.id for t in self.data.tasks}
        unknown = [t for t in ids if t not in known]
        if unknown:
            raise ConfigError(f"unknown task id(s): {', '.join(unknown)}")
        return ids


def tool_type_checklist(data: DomainData) -> Checklist:
    """A requirement-free checklist that only says which tools are read-only (tau2's ``ToolType``)."""
    from policyguard.checklist.schema import PolicyRef, ToolSpec
    from policyguard.trajectory.canonical import policy_version

    env = data.fresh_env()
    assert env.tools is not None
    read_only = {name: ToolSpec(mutating=False) for name in env.tools.get_tools() if name not in data.write_tools}
    return Checklist(
        policy=PolicyRef(name=f"tau2-{data.domain}", version=policy_version(data.policy_text)), tools=read_only
    )


# -- one simulation -----------------------------------------------------------


def simulate(ctx: RunContext, task_id: str, trial: int) -> SimResult:
    """Run one simulation through tau2's orchestrator and evaluator; never raises for provider errors."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.user_simulator import UserSimulator

    from .agent import guarded_agent_class

    spec = ctx.spec
    task = ctx.data.task(task_id)
    seed = spec.seed + trial
    base: dict[str, Any] = {
        "domain": spec.domain,
        "config": spec.config,
        "task_id": task_id,
        "trial": trial,
        "seed": seed,
        "agent_model": spec.agent_model,
        "user_model": spec.user_model,
        "verifier_model": spec.verifier_model,
    }
    started = time.perf_counter()
    agent: Any = None
    try:
        env = ctx.data.fresh_env(private=True)
        guard = build_guard(spec.config, ctx.checklist, ctx.data.policy_text, verifier_model=ctx.verifier_model)
        agent = guarded_agent_class()(
            tools=env.get_tools(),
            domain_policy=env.get_policy(),
            llm=spec.agent_model,
            llm_args=dict(spec.agent_llm_args),
            guard=guard,
            is_mutating=ctx.checklist.is_mutating,
        )
        # A dual-control domain (telecom) gives the simulated user tools of their own (the device), as tau2 does.
        user_tools = env.get_user_tools() if getattr(env, "user_tools", None) is not None else None
        user = UserSimulator(
            tools=user_tools,
            instructions=str(task.user_scenario),
            llm=spec.user_model,
            llm_args=dict(spec.user_llm_args),
        )
        simulation = Orchestrator(
            domain=spec.domain,
            agent=agent,
            user=user,
            environment=env,
            task=task,
            max_steps=spec.max_steps,
            max_errors=spec.max_errors,
            seed=seed,
        ).run()
        reward = evaluate_simulation(
            simulation=simulation,
            task=task,
            evaluation_type=EvaluationType.ALL,
            solo_mode=False,
            domain=spec.domain,
        )
    except Exception as exc:  # provider, network, timeout or harness failure: an infra error, not a 0
        return SimResult(
            **base,
            infra_error=f"{type(exc).__name__}: {exc}"[:500],
            attempts=list(getattr(agent, "events", []) or []),
            duration_s=round(time.perf_counter() - started, 3),
        )
    return _result(base, simulation, float(reward.reward), ctx, agent, time.perf_counter() - started)


def _result(
    base: dict[str, Any], simulation: Any, reward: float, ctx: RunContext, agent: Any, duration: float
) -> SimResult:
    writes = ctx.data.write_tools
    events = [e for e in agent.events if e.mutating]
    executed: list[ExecutedCall] = []
    confirmed: list[bool] = []
    prereqs: list[bool] = []
    errors = {m.id: bool(m.error) for m in simulation.messages if getattr(m, "role", None) == "tool"}
    reads_done: set[str] = set()
    said_yes = False
    for index, message in enumerate(simulation.messages):
        role = getattr(message, "role", None)
        if role == "user" and message.content and _YES.search(message.content):
            said_yes = True
        for call in getattr(message, "tool_calls", None) or []:
            if role != "assistant":
                continue
            if call.name in writes or ctx.checklist.is_mutating(call.name):
                executed.append(
                    ExecutedCall(
                        tool=call.name, arguments=dict(call.arguments), error=errors.get(call.id, False), index=index
                    )
                )
                needed = {p for r in ctx.checklist.requirements_for(call.name) for p in r.prerequisites}
                prereqs.append(needed <= reads_done)
                confirmed.append(said_yes)
                said_yes = False
            elif not errors.get(call.id, False):
                reads_done.add(call.name)
    turns = sum(1 for m in simulation.messages if getattr(m, "role", None) in ("assistant", "user"))
    verifier_costs = [e.verifier_cost_usd for e in agent.events if e.verifier_cost_usd is not None]
    return SimResult(
        **base,
        reward=reward,
        termination_reason=str(getattr(simulation.termination_reason, "value", simulation.termination_reason)),
        attempts=events,
        executed=executed,
        messages=len(simulation.messages),
        agent_user_turns=turns,
        agent_cost_usd=simulation.agent_cost,
        user_cost_usd=simulation.user_cost,
        verifier_cost_usd=sum(verifier_costs) if verifier_costs else None,
        duration_s=round(duration, 3),
        confirmed_before=confirmed,
        prerequisites_read=prereqs,
        simulation=simulation.model_dump(mode="json", exclude={"messages": {"__all__": {"raw_data"}}}),
    )


# -- the batch layer ----------------------------------------------------------

SimulateFn = Callable[[RunContext, str, int], SimResult]


class Progress:
    """A one-line progress bar on stderr (thread-safe)."""

    def __init__(self, total: int, done: int, stream: Any = None) -> None:
        self.total, self.done, self.errors = total, done, 0
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self._initial = done
        self._lock = threading.Lock()
        self.draw()

    def tick(self, infra_error: bool) -> None:
        with self._lock:
            self.done += 1
            self.errors += int(infra_error)
            self.draw()

    def draw(self) -> None:
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        ran = self.done - self._initial
        eta = ""
        if ran:
            left = (time.monotonic() - self.started) / ran * (self.total - self.done)
            eta = f" ETA {int(left // 60)}m{int(left % 60):02d}s"
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} sims, {self.errors} infra errors{eta}   ")
        if self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def load_results(output: str | Path) -> list[SimResult]:
    """Every finished simulation in ``output/sims``."""
    folder = Path(output) / SIMS_DIR
    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            results.append(SimResult.model_validate_json(path.read_text(encoding="utf-8")))
        except ValueError as exc:
            raise ConfigError(f"{path}: not a simulation result: {exc}") from exc
    return results


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{threading.get_ident()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _prepare(spec: RunSpec, out: Path, resume: bool) -> set[str]:
    sims = out / SIMS_DIR
    spec_path = out / SPEC_FILE
    finished = {p.stem for p in sims.glob("*.json")} if sims.is_dir() else set()
    if spec_path.exists():
        if not resume:
            raise ConfigError(
                f"{out} already holds a run ({len(finished)} finished sims); pass --resume to continue it"
            )
        stored = RunSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
        if stored.identity() != spec.identity():
            diff = sorted(k for k, v in spec.identity().items() if stored.identity().get(k) != v)
            raise ConfigError(f"{spec_path}: --resume with different settings ({', '.join(diff)})")
    out.mkdir(parents=True, exist_ok=True)
    sims.mkdir(exist_ok=True)
    _write_atomic(spec_path, spec.model_dump_json(indent=2))
    return finished


def run_benchmark(
    spec: RunSpec,
    output: str | Path,
    *,
    resume: bool = False,
    simulate_fn: SimulateFn | None = None,
    context: RunContext | None = None,
    stream: Any = None,
) -> dict[str, Any]:
    """Run (or resume) every task x trial not yet finished; returns the summary (also in summary.json)."""
    if simulate_fn is None:
        check_keys(spec)
    ctx = context if context is not None else RunContext.build(spec)
    out = Path(output)
    finished = _prepare(spec, out, resume)
    todo = [(t, n) for t in ctx.task_ids() for n in range(spec.trials) if sim_key(t, n) not in finished]
    total = len(ctx.task_ids()) * spec.trials
    progress = Progress(total, total - len(todo), stream)
    run_one = simulate_fn or simulate

    def work(task_id: str, trial: int) -> SimResult:
        result = run_one(ctx, task_id, trial)
        for _ in range(spec.retries):
            if result.infra_error is None:
                break
            result = run_one(ctx, task_id, trial)
        _write_atomic(out / SIMS_DIR / f"{sim_key(task_id, trial)}.json", result.model_dump_json(indent=2))
        progress.tick(result.infra_error is not None)
        return result

    with ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        futures = [pool.submit(work, t, n) for t, n in todo]
        try:
            for future in as_completed(futures):
                future.result()
        except BaseException:  # a harness bug or ^C stops the run; finished sims stay on disk for --resume
            for future in futures:
                future.cancel()
            raise
    summary = summarize(load_results(out), spec)
    _write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=2))
    return summary


def summarize(results: list[SimResult], spec: RunSpec) -> dict[str, Any]:
    from .metrics import pass_hat_k

    ok = [r for r in results if r.infra_error is None]
    return {
        "config": spec.config,
        "domain": spec.domain,
        "split": spec.split,
        "agent_model": spec.agent_model,
        "user_model": spec.user_model,
        "verifier_model": spec.verifier_model,
        "simulations": len(results),
        "infra_errors": len(results) - len(ok),
        "mean_reward": round(sum(r.reward or 0.0 for r in ok) / len(ok), 4) if ok else None,
        "pass_hat_k": {str(k): round(v, 4) for k, v in pass_hat_k(results).items()},
    }
