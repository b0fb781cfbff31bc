"""Tool names as an attacker writes them: near misses of a known tool.

A guard matches tools by exact name. ``Cancel_reservation``,
``"cancel_reservation "``, fullwidth letters, a zero-width space or a
``functions.`` prefix are *other* names: they are never treated as the tool
they resemble (that would let a name the executor does not know be judged by
the wrong rules). They are unknown tools, and the message names the known tool
they most resemble so an honest agent can correct itself.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

_INVISIBLE = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"}


def fold(name: str) -> str:
    """``name`` reduced for comparison only: NFKC, case-folded, invisible characters and spaces dropped."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = "".join(ch for ch in text if ch not in _INVISIBLE and not ch.isspace())
    for sep in (".", "/", ":"):
        if sep in text:  # functions.cancel_reservation, mcp/server:tool
            text = text.rsplit(sep, 1)[-1]
    return text


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most resembles, or None when nothing is close."""
    names = [k for k in known if not any(ch in k for ch in "*?[")]
    if not names:
        return None
    folded = fold(name)
    for candidate in names:
        if fold(candidate) == folded:
            return candidate
    by_fold = {fold(candidate): candidate for candidate in names}
    import difflib  # only when a name is not found: a call to a known tool does not load it

    close = difflib.get_close_matches(folded, list(by_fold), n=1, cutoff=0.75)
    return by_fold[close[0]] if close else None


def unknown_tool_message(name: str, known: Iterable[str]) -> str:
    """The remediation for a call to a tool the checklist does not name."""
    shown = ascii(name)[1:-1] if not name.isprintable() or name != name.strip() else name
    guess = nearest(name, known)
    hint = f" Did you mean {guess!r}? Call it by its exact name." if guess is not None and guess != name else ""
    return (
        f"The tool {shown!r} is not one this policy knows, so the call was not performed.{hint} "
        "Use only the tools you were given."
    )
