"""Which task each simulation of a results file played.

A simulation's ``task_id`` is normally its task, but some published files do not
follow it: in the ToolOrchestra submissions the simulation recorded as airline task 0
was evaluated against task 27's gold actions. tau2's evaluator keeps the actions it
checked in ``reward_info.action_checks``, and every action id belongs to one task,
so those checks name the task the simulation was really judged as. Gold matching and
the excluded tasks both use that task. A simulation without action checks keeps its
``task_id``, unless another simulation of the same file shows that the file's ids
are not its tasks: then its task is :data:`UNKNOWN_TASK` (no gold, never excluded).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.simulation import SimulationRun
    from tau2.data_model.tasks import Task

UNKNOWN_TASK = "unknown"


def action_owners(*task_lists: Iterable[Task]) -> dict[str, str]:
    """Action id -> the id of the task that lists it (the first list that has the id wins)."""
    owners: dict[str, str] = {}
    for tasks in task_lists:
        for task in tasks:
            criteria = task.evaluation_criteria
            for action in (criteria.actions or []) if criteria is not None else []:
                owners.setdefault(action.action_id, str(task.id))
    return owners


def evaluated_task(sim: SimulationRun, owners: dict[str, str]) -> str | None:
    """The one task whose actions tau2 checked the simulation against; None when the checks do not name one."""
    checks = sim.reward_info.action_checks if sim.reward_info is not None else None
    found = {owners.get(check.action.action_id) for check in checks or []}
    if len(found) != 1 or None in found:
        return None
    return found.pop()


def played_tasks(simulations: Sequence[SimulationRun], owners: dict[str, str]) -> list[str]:
    """The task each simulation played, in order (see the module docstring)."""
    evaluated = [evaluated_task(sim, owners) for sim in simulations]
    follows = all(task is None or task == str(sim.task_id) for sim, task in zip(simulations, evaluated, strict=True))
    fallback = [str(sim.task_id) if follows else UNKNOWN_TASK for sim in simulations]
    return [task if task is not None else other for task, other in zip(evaluated, fallback, strict=True)]
