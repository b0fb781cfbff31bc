"""Hoisting: a check's ``facts.x.y`` and ``args.x`` paths become variables of their own.

The engine copies every value it selects out of a map, nested items included
(:mod:`policyguard.gate.celcost`), while a variable costs one reference. So
``facts.reservation.user_id == principal`` copies the whole reservation to
read one string: 24 us where the same read from a top-level variable takes
0.5 us (50-entry map, this machine). And the first evaluation over a new
context clones every variable in it once more.

:func:`hoist` rewrites a check so that each maximal field path from ``args``
or ``facts`` (``facts.reservation.flights``, ``args["order_id"]``) is one
variable, whose value Python reads out of the call's maps before the engine
runs; ``has(facts.x)`` becomes a boolean variable. Every other part of the
text stays as it was. A variable whose path does not resolve (a missing key,
a step that is not a map) is left out of the context, so the rewritten check
fails where the original fails; the caller then evaluates the original, which
says what is wrong in its own words (:meth:`policyguard.gate.cel.CheckProgram.evaluate`).

A check is not rewritten (``None``) when it reads ``args`` or ``facts`` as a
whole (``args.size()``, ``facts[k]``), binds a comprehension variable named
``args``, ``facts`` or with the hoisted names' prefix, or indexes with a
string that is not a plain literal (raw, bytes, triple-quoted, or with an
escape: CEL's escapes are not all Python's, and the key must be the one the
engine reads). ``tests/gate/test_cel_hoist.py`` compares both forms on
generated values and on every shipped check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .celcost import CostParseError, Node, Token, plain_key, tokens
from .celproject import Budget, Need, TooLarge, project

PREFIX = "_pg"
_ROOTS = frozenset({"args", "facts"})
MISSING: Any = object()


@dataclass(frozen=True, slots=True, eq=False)
class Hoist:
    """One variable of a rewritten check: the value at ``path`` in ``root``, or (``has``) whether its last key
    is in the map before it. Equal when named alike (:func:`hoist_name` names each root, path and ``has``
    apart) and cut by the same need (two needs of one path are two cuts of its value); hashed by the name,
    whose hash Python keeps."""

    name: str
    root: str
    path: tuple[str, ...]
    has: bool = False
    need: Need | None = field(default=None)  # what the checks read of it (:mod:`.celproject`)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hoist) and other.name == self.name and other.need is self.need

    def __hash__(self) -> int:
        return hash(self.name)

    def value(self, variables: Mapping[str, Any]) -> Any:
        """The variable's value for these call variables; :data:`MISSING` when its path does not resolve.

        Only plain dicts are walked: anything else (a list, a string, another mapping type) is left to the
        original check, which raises or decides as the engine does.
        """
        steps = self.path[:-1] if self.has else self.path
        value = variables.get(self.root, MISSING)
        for key in steps:
            if type(value) is not dict or key not in value:
                return MISSING
            value = value[key]
        if self.has:
            return self.path[-1] in value if type(value) is dict else MISSING
        return value


def hoist_name(root: str, path: tuple[str, ...], has: bool) -> str:
    """A CEL identifier unique to (root, path, has): each key hex-encoded after ``_``, so no two paths meet."""
    return f"{PREFIX}{'h' if has else 'v'}_{root}" + "".join("_" + key.encode().hex() for key in path)


def _bound_names(node: Node) -> set[str]:
    found = set()
    if node.kind == "macro":
        found.add(node.children[1].name)
    elif node.kind == "bind":
        found.add(node.children[0].name)
    for child in node.children:
        found |= _bound_names(child)
    return found


def hoist(source: str, tree: Node) -> tuple[str, frozenset[Hoist]] | None:
    """``source`` with its ``args``/``facts`` paths as variables, and those variables; None when not rewritten.

    ``tree`` is ``source`` parsed by :func:`policyguard.gate.celcost.parse` (which has accepted its tokens).
    """
    if any(name in _ROOTS or name.startswith(PREFIX) for name in _bound_names(tree)):
        return None
    try:
        found: list[Token] = tokens(source)
    except CostParseError:  # parse() accepted it, so this does not happen; decline rather than guess
        return None

    def text(index: int) -> str:
        return found[index][1] if 0 <= index < len(found) else ""

    out: list[str] = []
    hoists: set[Hoist] = set()
    copied = 0  # the source up to here is in out
    at = 0
    while at < len(found):
        kind, word, start, _ = found[at]
        if kind != "name" or word not in _ROOTS or text(at - 1) == ".":
            at += 1
            continue
        keys: list[str] = []
        ends: list[int] = []  # the end offset of each key's last token
        following = at + 1
        while True:
            if text(following) == "." and found[following + 1 : following + 2] and found[following + 1][0] == "name":
                if text(following + 2) == "(":  # a method call on the path: not a field
                    break
                keys.append(found[following + 1][1])
                ends.append(found[following + 1][3])
                following += 2
            elif text(following) == "[" and text(following + 2) == "]" and found[following + 1][0] == "string":
                key = plain_key(found[following + 1][1])
                if key is None:
                    return None  # raw, bytes, triple-quoted or escaped: CEL's reading may not be Python's
                keys.append(key)
                ends.append(found[following + 2][3])
                following += 3
            else:
                break
        if not keys:  # the whole map is read: leave the check as it is
            return None
        in_has = text(at - 1) == "(" and text(at - 2) == "has" and text(at - 3) != "." and text(following) == ")"
        if in_has and len(keys) == 1:  # has(facts.x): one boolean, replacing the whole call
            item = Hoist(hoist_name(word, tuple(keys), True), word, tuple(keys), has=True)
            out += [source[copied : found[at - 2][2]], item.name]
            copied = found[following][3]
            hoists.add(item)
            at = following + 1
            continue
        if in_has:  # has(facts.x.y): the map at facts.x becomes the variable, has() tests its last key
            keys, ends = keys[:-1], ends[:-1]
        item = Hoist(hoist_name(word, tuple(keys), False), word, tuple(keys))
        out += [source[copied:start], item.name]
        copied = ends[-1]
        hoists.add(item)
        at = following
    out.append(source[copied:])
    return "".join(out), frozenset(hoists)


def hoisted_values(
    hoists: frozenset[Hoist],
    variables: Mapping[str, Any],
    read: dict[tuple[str, int], Any],
    budget: Budget,
) -> dict[str, Any]:
    """The context of a rewritten check: each hoist that resolves, cut to what is read of it
    (:func:`~policyguard.gate.celproject.project`), and ``principal`` and ``now`` as they are.

    ``read``: the values already read for this call, by name and need (a decision's checks share the
    decision's need of each path, so each value is cut once and walked once; two needs of one path are two
    cuts); a value read here is added to it. ``budget``: the items the call's cuts may still walk; a value
    left when it is spent is handed whole (the caller's own walk of it then finds it too large to evaluate
    here).
    """
    values = {name: variables[name] for name in ("principal", "now") if name in variables}
    for item in hoists:
        key = (item.name, id(item.need))  # a need lives as long as its check or the gate's cache of the tool
        found = read.get(key, _UNREAD)
        if found is _UNREAD:
            found = read[key] = _read(item, variables, budget)
        if found is not MISSING:
            values[item.name] = found
    return values


_UNREAD: Any = object()


def _read(item: Hoist, variables: Mapping[str, Any], budget: Budget) -> Any:
    found = item.value(variables)
    if found is MISSING or item.need is None:
        return found
    try:
        return project(found, item.need, budget)
    except TooLarge:
        return found
