"""Replay real agent runs: would the guard have let each write through?

Input is one or more tau2 results files (``tau2.data_model.simulation.Results``,
what ``tau2 run`` and the public leaderboard publish) or folders written by
``policyguard bench tau2`` (each simulation keeps its tau2 dialogue; a guarded
run's dialogue holds only the calls its guard let through). For every call an agent
made to a *mutating* tool (per the checklist; a tool the checklist does not
name counts as mutating, and the guard blocks it), the guard decides the call on
exactly the dialogue before the assistant message that made it, with the tool
results as recorded; nothing is re-executed and no environment is built. The
calls of one assistant message are judged call by call, each after the calls
before it with their recorded results, the way
:class:`~policyguard.bench.tau2.agent.GuardedAgent` runs them live (it sends the calls
before a write and judges the write once their results are in). A results file
holds no system prompt; the guard does not need one (the policy comes with the
checklist).

Each write gets a label:

* ``gold`` - its tool and arguments match one of the task's gold actions, compared
  the way tau2's evaluator compares actions (``Action.compare_with_tool_call``:
  same name; the arguments the call passes, or only the action's
  ``compare_args`` when it lists them, are equal);
* ``contradicting_gold`` - a gold write of a task whose gold contradicts the
  written policy (:data:`policyguard.bench.tau2.domains.airline.labels.POLICY_CONTRADICTING_GOLD`), reported apart as
  in the offline replay;
* ``extra`` - not gold, in a simulation that earned reward 1;
* ``non_gold`` - not gold, in a simulation that did not (reward < 1 or none).
  This is NOT the same as a policy violation: many failures are wrong choices
  the policy allows.

A label file (:class:`LabelFile`) gives true per-call labels; a call it names is
labelled ``violation`` or ``compliant`` instead.

A blocked write is a *read-first* block when the gate blocked it only because
something was not read (every NOT_MET requirement's evidence is a missing fact,
a missing principal or a prerequisite read not made), or when it was a second
change in one message (the agent must see the first change's result): the
remediation says what to do, so an agent could follow it and retry. Any other block (a check that is
false or cannot be evaluated, an unknown tool, a bad call, the verifier) is a
*hard* refusal.

Two rates of blocked compliant writes are reported (:mod:`.metric`): *raw*, every
gold/extra write as labelled, and *settled*, which sets apart, and counts on their
own, writes on tasks whose gold contradicts the policy (:mod:`.excluded`), writes the
environment refused, and writes that ran before (gold matched one to one). A
simulation's task is the one tau2 evaluated it against (:mod:`.tasks`).
"""

from .excluded import EXCLUDED_TASKS, Exclusion, excluded_tasks
from .load import RunSource, load_results_file, load_source
from .metric import RAW_RULE, SETTLED_RULE, CountedAs
from .model import (
    GOLD_RULE,
    LABELS,
    NON_GOLD_NOTE,
    BlockKind,
    CallLabel,
    Label,
    LabelFile,
    SimCall,
    SimsReport,
    load_label_file,
)
from .replay import SimsReplay, assistant_actions, block_kind, is_gold, replay_results
from .view import label_rows, markdown_table, render

__all__ = [
    "EXCLUDED_TASKS",
    "GOLD_RULE",
    "LABELS",
    "NON_GOLD_NOTE",
    "RAW_RULE",
    "SETTLED_RULE",
    "BlockKind",
    "CallLabel",
    "CountedAs",
    "Exclusion",
    "Label",
    "LabelFile",
    "RunSource",
    "SimCall",
    "SimsReplay",
    "SimsReport",
    "assistant_actions",
    "block_kind",
    "excluded_tasks",
    "is_gold",
    "label_rows",
    "load_label_file",
    "load_results_file",
    "load_source",
    "markdown_table",
    "render",
    "replay_results",
]
