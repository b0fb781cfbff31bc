"""Check the verifier's citations: a MET must rest on messages the model was actually shown.

The verifier model cites, per requirement, the indexes of the messages its
judgement rests on (``evidence_messages``). For a requirement judged MET,
:func:`citation_problem` rejects the judgement when

* it cites no message;
* it cites an index that is not a message the model was shown: negative,
  beyond the dialogue, the pending call, an elided message, the agent's system
  prompt, or (in tools-only mode) a message left out of the prompt;
* it is a *confirmation requirement* and cites no USER message after the
  agent's last message to the user before the action (the last assistant
  message with text and no tool call, :func:`policyguard.verifier.dialogue.last_statement`),
  or the agent never said anything to the user before acting.

A requirement is a confirmation requirement when the checklist says so
(``confirmation: true``, :func:`is_confirmation`). As a fallback, a
``procedural`` requirement whose text reads like one is treated as one too
(:func:`reads_like_confirmation`: the user, customer, member... confirms, says
yes, agrees or consents in the same clause, something is confirmed "with the
user", or "an explicit yes"), so a
checklist written before the flag existed loses no check; ``checklist
validate`` warns about such a requirement until the flag is written. Wording
can only add the check, never remove it: there is no way to mark a requirement
as *not* a confirmation. "The agent confirmed the facts with the tools" reads
like none.
The verifier treats a rejected MET as NOT_MET and records why. The check is
deterministic, cheap (a few set lookups per requirement), and a necessary
condition only: a citation that passes it can still be wrong, which is the
model's judgement to make.
"""

from __future__ import annotations

import re

from policyguard.checklist.schema import Requirement

from .dialogue import DialogueView
from .verdict import RequirementJudgement

_PARTY = r"(?:user|customer|member|client|caller|passenger|travell?er|guest|patient|buyer)s?(?:'s?)?"
_ASSENT = r"""(?:confirm|(?:say|said|answer|repl(?:y|ie))\w*\s+["'“‘]?yes\b|agree|consent)"""
CONFIRMATION = re.compile(
    rf"\b{_PARTY}\b[^.;:]*?\b{_ASSENT}|\bconfirm\w*\b[^.;:]*?\bwith\s+the\s+{_PARTY}\b"
    rf"|\bexplicit(?:ly)?\s+[\"'“‘]?(?:yes\b|consent|agreement)",
    re.IGNORECASE,
)
"""Text that reads like the user's confirmation: a party (user, customer, member...) and then "confirm...",
"said yes", "agree..." or "consent..." in the same clause, "confirm... with the user", or "explicit yes"."""


def reads_like_confirmation(text: str) -> bool:
    """Whether ``text`` reads like a requirement for the user's confirmation (:data:`CONFIRMATION`)."""
    return CONFIRMATION.search(text) is not None


def is_confirmation(requirement: Requirement) -> bool:
    """Whether a MET of ``requirement`` must cite the user's reply: flagged, or procedural and worded like one."""
    return requirement.confirmation or (requirement.kind == "procedural" and reads_like_confirmation(requirement.text))


def citation_problem(judgement: RequirementJudgement, *, confirmation: bool, view: DialogueView) -> str | None:
    """Why a MET judgement's citations cannot stand, or None (also None for any other status)."""
    if judgement.status != "MET":
        return None
    cited = judgement.evidence_messages
    if not cited:
        return "cites no message"
    absent = sorted({i for i in cited if i < 0 or i >= view.total_messages})
    if absent:
        return f"cites message(s) {_list(absent)}, which do not exist (the dialogue has {view.total_messages})"
    hidden = sorted({i for i in cited if i not in view.citable})
    if hidden:
        return f"cites message(s) {_list(hidden)}, which were not shown to the verifier"
    if not confirmation:
        return None
    last = view.last_statement
    if last is None:
        return "is a confirmation, but the agent said nothing to the user before the action"
    if not any(view.citable[i] == "user" and last < i < view.pending_index for i in cited):
        return f"is a confirmation, but cites no user message after the agent's last message to the user ({last})"
    return None


def _list(indexes: list[int]) -> str:
    shown = ", ".join(str(i) for i in indexes[:10])
    return shown + (f" and {len(indexes) - 10} more" if len(indexes) > 10 else "")
