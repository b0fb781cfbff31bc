"""The offline replay suite: gold writes must pass, injected violations must block.

No model is needed. For every task of the domain (airline or retail) the gold
actions are replayed on a fresh tau2 environment (real tool results, in order).
Before each gold write the harness behaves like a diligent agent: it
authenticates the user and makes any read the checklist's facts need that the
gold actions lack, plus the domain's own (``domains/<name>/``; listed per
task in ``inserted_reads``), summarises the action and gets the user's "yes". Then
the write goes through the guard and must pass. With ``gate_only`` the
procedural requirements (confirmation, asking for the reason, ...) stay
UNVERIFIED and the guard allows them: "pass" for gate_only means "the formal
layer found nothing wrong".

Then every generated violation (``domains/<name>/violations.py``) is attempted after its
reads and a user "yes"; it must be blocked. Finally, for a sample of tasks (or
all), tau2's own evaluator scores the gold dialogue plus an injected violation:
blocked and removed it must keep reward 1; executed it must drop to 0.

Tasks whose gold actions contradict the written policy (``contradicting_gold`` of the
domain's profile, ``domains/<name>/``) are replayed like the others but reported apart;
the rules are not bent to pass them.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.errors import ConfigError

from . import probes
from .cases import ViolationCase
from .domain import DomainData, communicate_info, gold_actions, task_actions
from .guarding import CallChecker
from .replay_domains import replay_domain
from .transcript import Transcript, as_call, ensure_reads

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.tasks import Task


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GoldCall(_Model):
    task_id: str
    tool: str
    arguments: dict[str, Any]
    outcome: str
    stage: str
    passed: bool
    message: str | None = None
    unverified: list[str] = Field(default_factory=list)


class Miss(_Model):
    case_id: str
    cls: str
    tool: str
    arguments: dict[str, Any]
    outcome: str
    stage: str


class ClassTally(_Model):
    total: int = 0
    blocked: int = 0
    blocked_by: dict[str, int] = Field(
        default_factory=dict, description="Requirement id -> blocked cases in which it was NOT_MET."
    )

    @property
    def recall(self) -> float | None:
        return self.blocked / self.total if self.total else None


class EvaluatorCheck(_Model):
    task_id: str
    violation: str
    blocked_by_guard: bool
    reward_gold_plus_blocked: float
    reward_gold_plus_executed: float

    @property
    def ok(self) -> bool:
        return self.blocked_by_guard and self.reward_gold_plus_blocked == 1.0 and self.reward_gold_plus_executed == 0.0


class ReplayReport(_Model):
    """Everything the replay measured; ``--json`` prints it."""

    domain: str
    config: str
    probe: str | None
    checklist: str
    tasks: int
    gold_total: int
    gold_passed: int
    gold_false_blocks: int
    gold_blocked_calls: list[GoldCall]
    contradicting_gold: list[GoldCall]
    contradicting_reasons: dict[str, str]
    inserted_reads: dict[str, list[str]]
    unverified_requirements: dict[str, int]
    violations_total: int
    violations_blocked: int
    by_class: dict[str, ClassTally]
    misses: list[Miss]
    probe_results: dict[str, dict[str, ClassTally]] = Field(
        default_factory=dict, description="Per probe (A1/A2/A3): the per-class tallies of the same violations."
    )
    not_expressible: dict[str, str]
    evaluator_checks: list[EvaluatorCheck]
    runtime_s: float

    @property
    def recall(self) -> float:
        return self.violations_blocked / self.violations_total if self.violations_total else 0.0


def _passed(decision: Decision) -> bool:
    return decision.outcome == "allow"


def _confirm(transcript: Transcript, tool: str, arguments: dict[str, Any]) -> None:
    transcript.say(
        f"Here is what I am about to do: {tool} with {json.dumps(arguments, sort_keys=True)}. Do you confirm (yes/no)?"
    )
    transcript.user("Yes, please go ahead.")


class _EnvReads:
    """The environment's tools as the guard's :class:`~policyguard.guard.fetching.Fetcher` (reads only: the
    guard never fetches a tool the checklist does not declare read-only)."""

    def __init__(self, env: Any) -> None:
        self._env = env

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Any:
        from tau2.data_model.message import ToolCall as Tau2ToolCall

        from policyguard.guard.fetching import Answer

        got = self._env.get_response(Tau2ToolCall(id="guard-fetch", name=tool, arguments=arguments))
        return Answer(got.content or "", bool(got.error))


def _opening(task: Task) -> str:
    instructions = task.user_scenario.instructions
    reason = str(getattr(instructions, "reason_for_call", "") or "").strip()
    known = str(getattr(instructions, "known_info", "") or "").strip()
    return " ".join(part for part in (reason, known) if part) or "Hello, I need help with my booking."


class ReplaySuite:
    """Runs the replay for one domain's tasks with one guard."""

    def __init__(
        self,
        data: DomainData,
        checklist: Checklist,
        guard: CallChecker,
        *,
        config: str,
        probe: str | None = None,
        fetch: bool = True,
    ) -> None:
        probes.check_probe(probe)
        self.domain = replay_domain(data)
        self.data = data
        self.checklist = checklist
        self.guard = guard
        self.config = config
        self.probe = probe
        self.fetch = fetch  # an injected violation is judged with the guard able to read through the environment
        self._shared_env: Any = None
        self._scratch: Any = None
        self._cancellations: list[ViolationCase] | None = None

    # -- gold ---------------------------------------------------------------

    def replay_gold(
        self, task: Task, transcript: Transcript | None = None
    ) -> tuple[Transcript, list[GoldCall], list[str]]:
        """Replay ``task``'s gold actions; every gold write is checked by the guard first."""
        actions = task_actions(task)
        acts = [name for by, name, _ in actions if by == "user" or name in self.data.write_tools]
        if transcript is None:  # a task that changes nothing may share the read-only pristine environment
            own = acts or self.data.has_initial_states
            transcript = Transcript(self.data.task_env(task) if own else self._pristine_env(), prefix=f"t{task.id}_")
        transcript.user(_opening(task))
        user = self.domain.user_id(task)
        calls: list[GoldCall] = []
        inserted: list[str] = []
        for requestor, name, arguments in actions:
            if requestor == "user":  # the user's own tool (telecom: their device), never checked by the guard
                transcript.user_call(name, arguments)
                continue
            write = name in self.data.write_tools
            if write:
                inserted += self.domain.prepare(transcript, name, arguments, user)
                inserted += ensure_reads(
                    transcript, self.checklist, name, arguments, user, lambda tool: self._context(task, tool)
                )
                inserted += self._airline_reads(transcript, task, name, arguments)
                _confirm(transcript, name, arguments)
            pending = transcript.new_call(name, arguments)
            if write:
                decision = self.guard.check(as_call(pending), transcript.trajectory())
                calls.append(
                    GoldCall(
                        task_id=task.id,
                        tool=name,
                        arguments=arguments,
                        outcome=decision.outcome,
                        stage=decision.stage,
                        passed=_passed(decision),
                        message=None if _passed(decision) else decision.message,
                        unverified=decision.unverified,
                    )
                )
            transcript.execute(pending, write=write)
        info = communicate_info(task)
        if info:
            transcript.say("To sum up: " + ", ".join(info) + ".")
        return transcript, calls, inserted

    def _airline_reads(self, transcript: Transcript, task: Task, tool: str, arguments: dict[str, Any]) -> list[str]:
        """Reads a diligent airline agent makes that no single-record fact names (listed in ``inserted_reads``).

        Before a flight change or a booking: a direct-flight search for every
        flight the reservation does not already hold and no earlier search
        showed (the route checks read where a flight goes from search results).
        Before a certificate: the reservation the complaint is about, when no
        reservation of that user has been read, and the status of every flight
        of the user's reservations read (the facts a certificate rests on).
        """
        made: list[str] = []
        trajectory = transcript.trajectory()
        if tool in ("update_reservation_flights", "book_reservation"):
            # What the checks can learn: a flight's route from a search or the reservation itself, a flight's
            # price on a date (bookings) from a search on that date. Known as (number, date); date None = any.
            known: set[tuple[str, str | None]] = set()
            target = arguments.get("reservation_id") if tool == "update_reservation_flights" else None
            for result in trajectory.tool_results():
                if result.is_error:
                    continue
                if result.call.name == "search_direct_flight":
                    known |= {(n, result.call.arguments.get("date")) for n in _flight_numbers(result.json())}
                elif result.call.name == "search_onestop_flight":
                    known |= _dated_flights(result.json())
                elif target is not None and result.call.arguments.get("reservation_id") == target:
                    known |= {(n, None) for n in _flight_numbers(result.json())}
            flights = self.data.raw_db.get("flights", {})
            for leg in arguments.get("flights") or []:
                number = leg.get("flight_number") if isinstance(leg, dict) else None
                if not isinstance(number, str) or number not in flights:
                    continue
                date = leg.get("date")
                if (
                    (number, None) in known
                    or (number, date) in known
                    or (tool == "update_reservation_flights" and any(n == number for n, _ in known))
                ):
                    continue
                keys = {"origin": flights[number]["origin"], "destination": flights[number]["destination"],
                        "date": leg.get("date")}  # fmt: skip
                transcript.call("search_direct_flight", keys)
                made.append(f"search_direct_flight({json.dumps(keys, sort_keys=True)})")
                known.add((number, date))
        elif tool == "send_certificate":
            user = arguments.get("user_id")
            read = any(
                result.call.name == "get_reservation_details"
                and not result.is_error
                and isinstance(parsed := result.json(), dict)
                and parsed.get("user_id") == user
                for result in trajectory.tool_results()
            )
            if not read:
                for keys in self._context(task, "get_reservation_details")[:1]:
                    transcript.call("get_reservation_details", keys)
                    made.append(f"get_reservation_details({json.dumps(keys, sort_keys=True)})")
            made += self._flight_status_reads(transcript, user)
        return made

    def _flight_status_reads(self, transcript: Transcript, user: Any) -> list[str]:
        """get_flight_status for every flight of the user's reservations read whose status was not read."""
        made: list[str] = []
        seen: set[tuple[Any, Any]] = set()
        for result in transcript.trajectory().tool_results():
            if result.is_error:
                continue
            if result.call.name == "get_flight_status":
                seen.add((result.call.arguments.get("flight_number"), result.call.arguments.get("date")))
                continue
            parsed = result.json()
            if result.call.name != "get_reservation_details" or not isinstance(parsed, dict):
                continue
            if parsed.get("user_id") != user:
                continue
            for flight in parsed.get("flights") or []:
                keys = {"flight_number": flight.get("flight_number"), "date": flight.get("date")}
                if (keys["flight_number"], keys["date"]) in seen:
                    continue
                seen.add((keys["flight_number"], keys["date"]))
                transcript.call("get_flight_status", keys)
                made.append(f"get_flight_status({json.dumps(keys, sort_keys=True)})")
        return made

    def _context(self, task: Task, tool: str) -> list[dict[str, Any]]:
        """Reservations the task's customer talks about: ids named, else theirs holding a named flight."""
        if tool != "get_reservation_details":
            return []
        text = task.user_scenario.model_dump_json()
        reservations = self.data.raw_db.get("reservations", {})
        named = [rid for rid in re.findall(r"\b[A-Z0-9]{6}\b", text) if rid in reservations]
        if not named:
            flights = set(re.findall(r"\bHAT\d{3}\b", text))
            user = self.data.raw_db.get("users", {}).get(self.domain.user_id(task) or "", {})
            named = [
                rid
                for rid in user.get("reservations", [])
                if any(f["flight_number"] in flights for f in reservations.get(rid, {}).get("flights", []))
            ]
        return [{"reservation_id": rid} for rid in named]

    # -- violations ---------------------------------------------------------

    def _pristine_env(self) -> Any:
        if self._shared_env is None:
            self._shared_env = self.data.fresh_env()
        return self._shared_env

    def _initialised_env(self, case: ViolationCase) -> Any:
        """A fresh environment in the state ``case.init`` sets, as tau2 sets up a task's initial state."""
        from tau2.data_model.tasks import EnvFunctionCall

        env = self.data.fresh_env()
        calls = [EnvFunctionCall(env_type=by, func_name=name, arguments=args) for by, name, args in case.init]  # type: ignore[arg-type]
        env.set_state(None, calls, [])
        return env

    def _scratch_env(self) -> Any:
        if self._scratch is None:
            self._scratch = self.data.fresh_env()
        return self._scratch

    def _set_up(self, case: ViolationCase, where: Transcript | Any) -> Transcript | None:
        """The case's request, reads and setup writes; None when a setup write fails."""
        transcript = where if isinstance(where, Transcript) else Transcript(where, prefix="v")
        transcript.user(case.request)
        for tool, arguments in case.reads:
            transcript.call(tool, arguments, write=tool in self.data.write_tools)
        for tool, arguments in case.setup:
            _confirm(transcript, tool, arguments)
            if getattr(transcript.call(tool, arguments, write=True), "error", False):
                return None
        return transcript

    def attempt(self, case: ViolationCase, transcript: Transcript | None = None) -> Decision:
        """Attempt ``case``'s call after its reads and setup writes (on ``transcript`` or a shared env).

        A case with ``setup`` writes (an airline violation set up by an earlier
        write, e.g. a second cancellation) runs on a scratch environment shared
        by such cases (each touches its own reservation), or on a fresh one when
        a setup write fails there. A case whose reads include a write (retail)
        gets a fresh environment of its own; the others share one read-only
        environment.
        """
        if transcript is None and case.init:
            transcript = self._set_up(case, self._initialised_env(case))
            if transcript is None:
                raise ConfigError(f"violation {case.case_id}: a setup write fails after its initial state")
        elif transcript is None and case.setup:
            transcript = self._set_up(case, self._scratch_env()) or self._set_up(case, self.data.fresh_env())
            if transcript is None:
                raise ConfigError(f"violation {case.case_id}: a setup write fails on a fresh environment")
        else:
            if transcript is None:
                writes = any(tool in self.data.write_tools for tool, _ in case.reads)
                transcript = Transcript(self.data.fresh_env() if writes else self._pristine_env(), prefix="v")
            self._set_up(case, transcript)
        if not case.skip_reads:
            ensure_reads(transcript, self.checklist, case.tool, case.arguments, case.user_id)
        claim = probes.user_claim(self.probe)
        if claim is not None:
            transcript.say("Let me check whether this is possible.")
            transcript.user(claim)
        _confirm(transcript, case.tool, case.arguments)
        trajectory = transcript.trajectory()
        trajectory = probes.tamper(self.probe, trajectory)
        pending = transcript.new_call(case.tool, case.arguments)
        if self.fetch:
            fetcher = _EnvReads(transcript.env)
            return self.guard.check(as_call(pending), trajectory, fetch=fetcher)  # type: ignore[call-arg]
        return self.guard.check(as_call(pending), trajectory)

    # -- tau2's evaluator ---------------------------------------------------

    def evaluator_check(self, task: Task, case: ViolationCase) -> EvaluatorCheck:
        """Gold + ``case`` blocked and removed vs gold + ``case`` executed, both scored by tau2."""
        transcript, _, _ = self.replay_gold(task, Transcript(self.data.task_env(task), prefix=f"t{task.id}_"))
        decision = self.attempt(case, transcript)
        blocked_reward = evaluate(self.data, task, transcript.messages)
        transcript.call(case.tool, case.arguments, write=True)
        executed_reward = evaluate(self.data, task, transcript.messages)
        return EvaluatorCheck(
            task_id=task.id,
            violation=case.case_id,
            blocked_by_guard=not _passed(decision),
            reward_gold_plus_blocked=blocked_reward,
            reward_gold_plus_executed=executed_reward,
        )

    # -- the whole suite ----------------------------------------------------

    def attempt_all(self, cases: list[ViolationCase]) -> tuple[dict[str, ClassTally], list[Miss]]:
        """Attempt every case under the current probe: per-class tallies and the misses."""
        classes = self.domain.classes
        by_class: dict[str, ClassTally] = {c: ClassTally() for c in classes if c not in self.domain.not_expressible}
        misses: list[Miss] = []
        for case in cases:
            decision = self.attempt(case)
            tally = by_class[case.cls]
            tally.total += 1
            if _passed(decision):
                misses.append(
                    Miss(
                        case_id=case.case_id,
                        cls=case.cls,
                        tool=case.tool,
                        arguments=case.arguments,
                        outcome=decision.outcome,
                        stage=decision.stage,
                    )
                )
            else:
                tally.blocked += 1
                for req in decision.requirements:
                    if req.status == "NOT_MET":
                        tally.blocked_by[req.id] = tally.blocked_by.get(req.id, 0) + 1
        return by_class, misses

    def run(
        self,
        *,
        per_class: int = 12,
        evaluate_tasks: list[str] | None = None,
        extra_probes: list[str] | tuple[str, ...] = (),
    ) -> ReplayReport:
        """The whole suite; ``extra_probes`` re-attempt the violations under each probe (recall per probe)."""
        started = time.perf_counter()
        tasks = self.data.tasks
        gold_calls: list[GoldCall] = []
        contradicting: list[GoldCall] = []
        inserted: dict[str, list[str]] = {}
        unverified: dict[str, int] = {}
        for task in tasks:
            _, calls, reads = self.replay_gold(task)
            if reads:
                inserted[task.id] = reads
            for call in calls:
                (contradicting if task.id in self.domain.contradicting_gold else gold_calls).append(call)
                for rid in call.unverified:
                    unverified[rid] = unverified.get(rid, 0) + 1

        cases = self.domain.generate(self.data.raw_db, self.data.policy_text, per_class=per_class)
        by_class, misses = self.attempt_all(cases)
        probe_results: dict[str, dict[str, ClassTally]] = {}
        for probe in extra_probes:
            probes.check_probe(probe)
            main_probe, self.probe = self.probe, probe
            try:
                probe_results[probe] = self.attempt_all(cases)[0]
            finally:
                self.probe = main_probe

        checks = [
            self.evaluator_check(self.data.task(tid), self._violation_for(self.data.task(tid)))
            for tid in (evaluate_tasks or [])
        ]
        passed = sum(1 for c in gold_calls if c.passed)
        self.data.shared_db.check_untouched()
        return ReplayReport(
            domain=self.data.domain,
            config=self.config,
            probe=self.probe,
            checklist=str(getattr(self.checklist.source, "file", None) or self.checklist.version),
            tasks=len(tasks),
            gold_total=len(gold_calls),
            gold_passed=passed,
            gold_false_blocks=len(gold_calls) - passed,
            gold_blocked_calls=[c for c in gold_calls if not c.passed],
            contradicting_gold=contradicting,
            contradicting_reasons=dict(self.domain.contradicting_gold),
            inserted_reads=inserted,
            unverified_requirements=dict(sorted(unverified.items())),
            violations_total=sum(t.total for t in by_class.values()),
            violations_blocked=sum(t.blocked for t in by_class.values()),
            by_class=by_class,
            misses=misses,
            probe_results=probe_results,
            not_expressible=dict(self.domain.not_expressible),
            evaluator_checks=checks,
            runtime_s=round(time.perf_counter() - started, 3),
        )

    def _violation_for(self, task: Task) -> ViolationCase:
        """A violation tau2 executes (airline: a non-refundable cancellation) on a record the gold leaves alone."""
        touched = {str(v) for _, args in gold_actions(task) for v in args.values() if isinstance(v, str)}
        user = self.domain.user_id(task)
        if self._cancellations is None:
            self._cancellations = [
                case
                for cls in self.domain.evaluator_classes
                for case in self.domain.generate(
                    self.data.raw_db, self.data.policy_text, per_class=10_000, classes=[cls]
                )
            ]
        candidates = [c for c in self._cancellations if not (c.resources & touched)]
        own = [c for c in candidates if c.user_id == user]
        return (own or candidates)[0]


def _flight_numbers(value: Any) -> set[str]:
    """Every ``flight_number`` anywhere in a parsed tool result."""
    if isinstance(value, dict):
        found = {value["flight_number"]} if isinstance(value.get("flight_number"), str) else set()
        return found.union(*(_flight_numbers(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_flight_numbers(v) for v in value))
    return set()


def _dated_flights(value: Any) -> set[tuple[str, str | None]]:
    """(flight_number, date) of every flight in a one-stop search result (its legs carry their date)."""
    if isinstance(value, dict):
        number, date = value.get("flight_number"), value.get("date")
        here = {(number, date if isinstance(date, str) else None)} if isinstance(number, str) else set()
        return here.union(*(_dated_flights(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_dated_flights(v) for v in value))
    return set()


def evaluate(data: DomainData, task: Task, messages: list[Any]) -> float:
    """tau2's own reward for a dialogue: its DB-hash and communicate evaluators, combined as tau2 does.

    ``evaluate_simulation`` would do the same for the airline reward basis
    (DB x COMMUNICATE) but imports litellm and the registry (~9 s); the two
    evaluators it would call are used directly, with environments built from
    the already-parsed database.
    """
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    criteria = task.evaluation_criteria
    if criteria is None:
        return 1.0
    basis = set(criteria.reward_basis)
    unsupported = basis - {RewardType.DB, RewardType.ENV_ASSERTION, RewardType.COMMUNICATE}
    if unsupported:
        raise ConfigError(f"task {task.id}: reward basis {sorted(map(str, unsupported))} needs a model to evaluate")

    def constructor(solo_mode: bool = False) -> Any:
        return data.fresh_env()

    reward = 1.0
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        env_info = EnvironmentEvaluator.calculate_reward(
            environment_constructor=constructor, task=task, full_trajectory=messages, solo_mode=False
        )
        reward *= env_info.reward
    if RewardType.COMMUNICATE in basis:
        reward *= CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages).reward
    return float(reward)


def sample_tasks(data: DomainData, which: str) -> list[str]:
    """``none``, ``all``, ``sample`` (every tenth task) or a comma-separated list of ids."""
    ids = [t.id for t in data.tasks]
    if which == "none":
        return []
    if which == "all":
        return ids
    if which == "sample":
        return ids[::10]
    chosen = [x.strip() for x in which.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in ids]
    if unknown:
        raise ConfigError(f"unknown task id(s) for --evaluate: {', '.join(unknown)}")
    return chosen


def default_checklist_path() -> Path:
    from policyguard.resources import checklists_dir

    return Path(checklists_dir()) / "airline.yaml"
