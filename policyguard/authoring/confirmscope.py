"""Which tools a policy's confirmation sentence is about, for ``checklist init``.

"Before renewing, tell the member the new due date and get their explicit yes"
is renew_loan's rule: written as a general rule it would demand a yes before
every write the policy has. "Before taking any actions that update the booking
database ... obtain explicit user confirmation" is about every write. A
sentence is scoped to the write tools whose distinctive name words it uses
most (``renew`` of renew_loan in "renewing"; "cancelling an order" is
cancel_order's, not return_order's); words every kind of write shares
(update, change, book...) do not count. A sentence about "any action" (every
change, all updates, actions, the database) is general, and so is one that names no tool: init
cannot tell, and the skeleton says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from policyguard.verifier.evidence import reads_like_confirmation

from .validate import normalize_policy_text, quote_in_policy

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*(?:[-*+#>]|\d+[.)])\s)")
_LEADING_MARKS = re.compile(r"^(?:\s*(?:[-*+#>]+|\d+[.)])\s+)+")
_EVERY_WRITE = re.compile(
    r"\b(?:any|every|all|each)\s+(?:\w+\s+){0,2}?(?:actions?|changes?|updates?|writes?|operations?|tool\s+calls?)\b"
    r"|\b(?:actions|operations)\b|\bthe\s+(?:\w+\s+)?database\b",
    re.I,
)
_WORDS = re.compile(r"[A-Za-z]+")
_SHARED_WORDS = frozenset(
    "get set put post patch update modify edit change create add new make remove delete send book write do run "
    "take use call find list search the and for with from into".split()
)


def confirmation_sentences(policy_text: str) -> list[str]:
    """The policy's sentences that ask for the user's confirmation, each quotable as a ``source``, in order."""
    normalized = normalize_policy_text(policy_text)
    found = []
    for piece in _SENTENCE_END.split(policy_text):
        sentence = " ".join(_LEADING_MARKS.sub("", piece).split())
        if sentence and reads_like_confirmation(sentence) and quote_in_policy(sentence, normalized):
            found.append(sentence)
    return found


def tools_named(sentence: str, tools: Iterable[str]) -> list[str]:
    """The tools of ``tools`` the sentence is about; empty when it is about every write or names none."""
    if _EVERY_WRITE.search(sentence):
        return []
    said = [word.lower() for word in _WORDS.findall(sentence)]
    scores = {tool: (tool in sentence) * 100 + sum(_uses(said, word) for word in _name_words(tool)) for tool in tools}
    best = max(scores.values(), default=0)
    return [tool for tool, score in scores.items() if score == best] if best else []


def _name_words(tool: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", tool)
    words = [word.lower() for word in _WORDS.findall(spaced)]
    return [word for word in words if len(word) >= 4 and word not in _SHARED_WORDS]


def _uses(said: list[str], word: str) -> bool:
    """Whether a word of the sentence is ``word`` or a form of it (renew: renewing, renewal; issue: issuing)."""
    stem = word[:-1] if word.endswith("e") else word
    return any(token.startswith(stem) for token in said)
