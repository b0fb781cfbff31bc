"""The words of what a user wrote: what a value stated in the dialogue (a user id) must match, whole.

May use: the standard library only.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[\w.@-]+")


def user_words(text: str) -> list[str]:
    """The words of ``text``: runs of letters, digits and ``_.@-``, a final ``.`` dropped (``I'm u1.`` -> ``I``,
    ``m``, ``u1``), in order, repeats kept."""
    return [word.rstrip(".") for word in _WORD.findall(text)]
