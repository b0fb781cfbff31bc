"""What one finished simulation leaves behind: one JSON file, the unit of checkpointing."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .agent import CallEvent


class ExecutedCall(BaseModel):
    """A tool call that reached the environment (the runtime view)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any]
    error: bool = False
    index: int = 0


class SimResult(BaseModel):
    """One simulation of one task, one trial, under one configuration.

    ``infra_error`` is set when the run was ended by infrastructure (provider
    error, timeout, crash) rather than by the agent or user; such runs are
    excluded from pass^k and counted apart. ``attempts`` is the verdict view
    (every mutating call the agent attempted, with the guard's decision);
    ``executed`` the runtime view (calls that reached the environment).
    """

    model_config = ConfigDict(extra="forbid")

    domain: str
    config: str
    task_id: str
    trial: int
    seed: int
    reward: float | None = None
    termination_reason: str | None = None
    infra_error: str | None = None
    attempts: list[CallEvent] = Field(default_factory=list)
    executed: list[ExecutedCall] = Field(default_factory=list)
    messages: int = 0
    agent_user_turns: int = 0
    agent_cost_usd: float | None = None
    user_cost_usd: float | None = None
    verifier_cost_usd: float | None = None
    duration_s: float = 0.0
    agent_model: str | None = None
    user_model: str | None = None
    verifier_model: str | None = None
    confirmed_before: list[bool] = Field(
        default_factory=list, description="Per executed write: did a user message with 'yes' come since the last write?"
    )
    prerequisites_read: list[bool] = Field(
        default_factory=list, description="Per executed write: were the checklist's prerequisite reads made before it?"
    )
    simulation: dict[str, Any] | None = Field(
        default=None,
        description="tau2's SimulationRun as JSON (the dialogue the orchestrator kept, raw model output dropped), "
        "so 'bench sims' can replay the run through another checklist or configuration.",
    )

    @property
    def key(self) -> str:
        return sim_key(self.task_id, self.trial)


def sim_key(task_id: str, trial: int) -> str:
    return f"task-{task_id}_trial-{trial}"
