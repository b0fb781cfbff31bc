"""When a check is decided without a fact it names: CEL's error absorption, made safe.

A check may name a fact that the dialogue never read and still not need it for
this call. Retail's gift card rule reads the owner's balances only when the
method is a gift card: ``is_not_gift_card || facts.owner...balance >= ...``.
Blocking such a call for the missing profile refuses correct work.

CEL evaluates ``a || b`` to ``true`` when either side is ``true``, even if the
other is an error, and ``a && b`` to ``false`` likewise; ``exists``/``all``
absorb errors the same way. An absent fact is a "no such key" error wherever
the expression selects it (``facts.owner``, ``facts.owner.x``). So when the
check evaluates to exactly ``true`` with the fact absent, no value of that
fact can make it ``false``: each place that reads it was either not reached or
its error was absorbed by a ``true`` beside it. The gate then judges the check
MET without the fact (:meth:`policyguard.gate.hardgate.HardGate.check`).

That holds only where the absent fact can show up as nothing but an error.
:func:`decidable_without_absent` refuses the two forms that observe absence
without an error:

* ``has(facts.NAME)``, which is ``false`` for an absent key (``has`` on a longer
  chain, ``has(facts.NAME.field)``, still errors when ``NAME`` is absent);
* any use of ``facts`` other than ``facts.NAME...`` (``facts`` alone, an index,
  ``"NAME" in facts``, ``facts.size()``): :func:`.factpaths.read_paths` returns
  None for these.

The analysis is on the source text and conservative: text in strings or
comments can only refuse a check, never admit one.
"""

from __future__ import annotations

import re

from .factpaths import read_paths

# has( facts . NAME followed by anything but another select: the presence test of a whole fact
_HAS_WHOLE_FACT = re.compile(r"has\s*\(\s*facts\s*\.\s*[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_])\s*(?:[^.\s]|$)")


def decidable_without_absent(source: str) -> bool:
    """Whether ``true`` from this check with some facts absent means ``true`` for any value of them."""
    if read_paths(source) is None:
        return False
    return _HAS_WHOLE_FACT.search(source) is None
