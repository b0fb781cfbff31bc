"""Which parts of the facts a check can read, so only those are converted for the CEL engine.

Handing a value to the engine converts all of it (~2 us per string or number
here), and a trusted record holds far more than the checks read: a reservation
check that reads ``facts.reservation.status`` does not need the passengers.
:func:`read_paths` finds every ``facts.NAME.FIELD...`` chain in a check's source
and :func:`prune` keeps, of each fact, only the subtrees those chains reach.

The analysis is conservative: it may keep too much, never too little.

* A chain keeps the whole value at its end (``facts.order.items.size()`` keeps
  ``items``; ``facts.order == x`` keeps ``order``), so whatever an operator,
  macro, function or index does with that value sees all of it.
* A use of ``facts`` that is not ``facts.NAME`` (``facts["x"]``, ``facts``
  alone, a back-quoted identifier anywhere) returns ``None``: keep every fact whole.
* Text inside string literals and comments is scanned like code: it can only
  add paths.
* Pruning keeps only keys of JSON objects; a list or scalar on a path is kept
  whole. A key a chain names but the record lacks stays absent, so ``has()``
  and "no such key" errors come out as on the whole record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SELECT = re.compile(r"\s*\.\s*(" + _IDENT + r")")
_CALL = re.compile(r"\s*\(")
_MACRO_VAR = re.compile(r"\s*\(\s*(" + _IDENT + r")\s*,")
_SIZE_CALL = re.compile(r"\s*\.\s*size\s*\(\s*\)")
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_NULL_TEST = re.compile(r"\s*[!=]=\s*null(?![A-Za-z0-9_])\s*(?:$|&&|\|\||[)\],}?:])")
_OPERAND_START = ("&&", "||", "(", "[", ",", "{", "?", ":")
ELEMENT = "[]"  # trie key: every element of a list
PRESENT = "?"  # path suffix: only whether the value is null is read

Paths = frozenset[tuple[str, ...]]
Trie = dict[str, Any]  # key -> Trie; an empty Trie means "keep this value whole"


def read_paths(source: str) -> Paths | None:
    """Every ``facts`` path the expression may read (fact name first), or None when it cannot be bounded.

    ``[]`` in a path stands for every element of a list iterated by a macro
    (``facts.calls.all(c, c.error)`` reads ``("calls", "[]", "error")``).
    """
    if "`" in source:
        return None
    paths = _root_paths(source, 0, len(source), "facts")
    if paths is None or () in paths:
        return None
    return frozenset(paths)


def _root_paths(source: str, start: int, end: int, name: str) -> set[tuple[str, ...]] | None:
    """The paths read through identifier ``name`` in ``source[start:end]``; ``()`` means the whole value."""
    pattern = re.compile(r"(?<![A-Za-z0-9_.])" + re.escape(name) + r"(?![A-Za-z0-9_])")
    paths: set[tuple[str, ...]] = set()
    for match in pattern.finditer(source, start, end):
        found = _chain_paths(source, match.end(), end, null_test_ok=_operand_start(source, match.start()))
        if found is None:
            return None
        paths |= found
    return paths


def _operand_start(source: str, at: int) -> bool:
    """True when nothing binding tighter than ``==`` precedes position ``at``."""
    before = source[:at].rstrip()
    return not before or before.endswith(_OPERAND_START)


def _chain_paths(source: str, position: int, end: int, *, null_test_ok: bool) -> set[tuple[str, ...]] | None:
    """The paths one use reads: its ``.field`` chain, into a macro's body when it iterates a list.

    A chain that is a whole operand of ``== null`` / ``!= null`` (nothing
    binding tighter on either side) reads only whether the value is null.
    """
    chain: list[str] = []
    while (step := _SELECT.match(source, position, end)) is not None:
        chain.append(step.group(1))
        position = step.end()
    if chain and null_test_ok and _NULL_TEST.match(source, position, end):
        return {(*chain, PRESENT)}
    if not chain or not _CALL.match(source, position, end):
        return {tuple(chain)}
    method = chain.pop()  # x.items.size(): "size" is a method, the value read is items
    head = tuple(chain)
    var = _MACRO_VAR.match(source, position, end)
    if method not in _MACROS or var is None:
        return {head}
    close = closing_paren(source, _CALL.match(source, position, end).end() - 1, end)  # type: ignore[union-attr]
    if close is None:
        return None
    if method == "filter" and not _SIZE_CALL.match(source, close + 1, end):
        return {head}  # the filtered elements themselves flow on: keep them whole
    inner = _root_paths(source, var.end(), close, var.group(1))
    if inner is None:
        return {head}
    if not inner:
        return {(*head, ELEMENT)}
    return {(*head, ELEMENT, *path) for path in inner}


def closing_paren(source: str, open_at: int, end: int | None = None) -> int | None:
    """The index of the ``)`` matching ``source[open_at] == "("`` (strings and comments skipped), or None."""
    end = len(source) if end is None else end
    depth = 0
    i = open_at
    while i < end:
        ch = source[i]
        if ch == "/" and source.startswith("//", i):
            newline = source.find("\n", i)
            i = end if newline < 0 else newline + 1
            continue
        if ch in "\"'":
            after = _string_end(source, i, end)
            if after is None:
                return None
            i = after
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i if ch == ")" else None
        i += 1
    return None


def _string_end(source: str, i: int, end: int) -> int | None:
    """The index after the string literal opening at ``i`` (raw when an ``r``/``R`` prefix precedes)."""
    raw = i > 0 and source[i - 1] in "rR" and (i < 2 or not (source[i - 2].isalnum() or source[i - 2] == "_"))
    quote = source[i] * 3 if source.startswith(source[i] * 3, i) else source[i]
    j = i + len(quote)
    while j < end:
        if not raw and source[j] == "\\":
            j += 2
            continue
        if source.startswith(quote, j):
            return j + len(quote)
        if len(quote) == 1 and source[j] == "\n":
            return None
        j += 1
    return None


def paths_trie(all_paths: Iterable[Paths]) -> Trie:
    """One trie of the union of several expressions' paths; a path that is a prefix of another wins.

    A null test alone (``x.result != null``) keeps a stand-in of the same
    null-ness; next to a deeper path (``x.result.exists(r, r.id == 1)``) that
    path keeps the value present.
    """
    trie: Trie = {}
    union: set[tuple[str, ...]] = set()
    for paths in all_paths:
        union |= paths
    tests = {path[:-1] for path in union if path and path[-1] == PRESENT}
    for path in sorted(union - {(*t, PRESENT) for t in tests}, key=len):  # shorter first: a prefix kept whole wins
        _insert(trie, path)
    for path in sorted(tests, key=len, reverse=True):  # longer first: a.x's test keeps a present for a's
        if not _present(trie, path):
            _insert(trie, (*path, PRESENT))
    return trie


def _insert(trie: Trie, path: tuple[str, ...]) -> None:
    node = trie
    for key in path[:-1]:
        child = node.get(key)
        if child is not None and not child:
            return  # this prefix is already kept whole
        node = node.setdefault(key, {})
    node[path[-1]] = {}


def _present(trie: Trie, path: tuple[str, ...]) -> bool:
    node = trie
    for key in path:
        if not node and node is not trie:
            return True  # a prefix is kept whole
        if key not in node:
            return False
        node = node[key]
    return True


def prune_facts(facts: Mapping[str, Any], trie: Trie) -> dict[str, Any]:
    """The facts the trie names, each pruned to its paths (the root's empty trie keeps nothing)."""
    return {name: prune(facts[name], sub) for name, sub in trie.items() if name in facts}


def prune(value: Any, trie: Trie) -> Any:
    """``value`` with only what the trie names: object keys, and list elements under ``[]``; the rest whole.

    An object iterated by a macro (``[]`` on a map: its keys) is kept whole.
    """
    if not trie:
        return value
    if trie.keys() == {PRESENT}:  # only "is it null?" is read: an empty stand-in answers the same
        return {} if isinstance(value, Mapping | list) else value
    if isinstance(value, list):
        element = trie.get(ELEMENT)
        return value if element is None else [prune(item, element) for item in value]
    if not isinstance(value, Mapping) or ELEMENT in trie:
        return value
    return {key: prune(value[key], sub) for key, sub in trie.items() if key in value and key != PRESENT}
