"""Projection: a hoisted value is handed to the engine cut to the parts its checks read.

The engine converts every value it is given, at about 1 us per string, map or
list (``common-expression-language`` 0.10 tries eight other types before a
string), so a check that reads ``l.flight_number`` of each flight converts the
flights' origins, destinations and prices too. :func:`needs` reads a rewritten
check (:mod:`.celhoist`) and records, for each hoisted variable, what of its
value the check can observe; :func:`project` cuts a value to that.

What counts as observing a value, and what is kept:

* ``x.f``, ``x["f"]``, ``has(x.f)`` - the key ``f`` (and what is read of it);
* a comprehension over ``x``, ``x[e]`` with a computed key, ``x.size()``,
  ``size(x)``, ``e in x`` - every key and item of ``x`` (a comprehension over
  a map binds its keys, which are never cut); ``e in x`` compares a list's
  items whole;
* ``x == null``, ``x != null``, ``type(x)`` - that ``x`` stays of its type;
* reads through ``c ? x : y``, ``[x, y][i]``, ``[x, y].all(v, ...)`` and
  ``x.filter(...)`` are reads of ``x`` (and ``y``);
* any other use (a comparison, a function's argument, an item of a list
  literal used as a list, a comprehension variable used as a value) - the
  whole value.

A value nothing observes becomes ``null``. Every kept map stays a map and every
kept list a list of the same length, so a rewritten check over projected
values reads the same values, takes the same branches and fails where it would
fail over the whole ones; and any failure is decided again by the check as
written over the call's own values (:meth:`policyguard.gate.cel.CheckProgram.evaluate`).
``tests/gate/test_cel_hoist.py`` compares both forms on generated values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .celcost import Node, plain_key


class Need:
    """What a check can observe of one value (see the module's list); built once per check, then read-only."""

    __slots__ = (
        "whole", "keys", "tested", "kept", "fields", "elements", "items", "empty", "_merged", "_listed", "_frozen"
    )  # fmt: skip

    def __init__(self) -> None:
        self.whole = False  # read as a value: kept as it is
        self.keys = False  # iterated, indexed by a computed key, sized or tested with in: every key stays
        self.tested = False  # `e in x`: a list's items are compared whole
        self.kept = False  # its type is observed (`x != null`, `type(x)`, a step through it)
        self.fields: dict[str, Need] = {}
        self.elements: Need | None = None  # what is read of an item (a list's) or a value (a map's) by a computed key
        self.items: Need | None = None  # what a comprehension reads of what it binds: a list's items, a map's keys
        self.empty = False  # nothing observes the value (set when frozen)
        self._merged: dict[str, Need] = {}  # a map's named values, with what a computed key reads of them
        self._listed: Need | None = None  # a list's items: what a comprehension and a computed index read
        self._frozen = False

    def field(self, name: str) -> Need:
        self.kept = True
        found = self.fields.get(name)
        if found is None:
            found = self.fields[name] = Need()
        return found

    def each(self) -> Need:
        """The need of what a computed index reads (every key stays)."""
        self.kept = self.keys = True
        if self.elements is None:
            self.elements = Need()
        return self.elements

    def bound(self) -> Need:
        """The need of what a comprehension over the value binds (every key stays)."""
        self.kept = self.keys = True
        if self.items is None:
            self.items = Need()
        return self.items

    def _freeze(self) -> Need:
        if self._frozen:  # a union's parts are frozen already: their merges are not made again
            return self
        self._frozen = True
        for child in self.fields.values():
            child._freeze()
        parts = [part for part in (self.elements, self.items) if part is not None]
        for part in parts:
            part._freeze()
        if self.elements is not None:
            self._merged = {name: union([child, self.elements]) for name, child in self.fields.items()}
        self._listed = union(parts) if len(parts) == 2 else parts[0] if parts else None
        self.empty = not (self.whole or self.keys or self.tested or self.kept or self.fields or parts)
        return self


def union(needs: Iterable[Need]) -> Need:
    """One need observing everything any of ``needs`` observes (frozen)."""
    out = Need()
    elements: list[Need] = []
    items: list[Need] = []
    fields: dict[str, list[Need]] = {}
    for need in needs:
        out.whole |= need.whole
        out.keys |= need.keys
        out.tested |= need.tested
        out.kept |= need.kept
        if need.elements is not None:
            elements.append(need.elements)
        if need.items is not None:
            items.append(need.items)
        for name, child in need.fields.items():
            fields.setdefault(name, []).append(child)
    out.fields = {name: union(children) for name, children in fields.items()}
    out.elements = union(elements) if elements else None
    out.items = union(items) if items else None
    return out._freeze()


def needs(tree: Node, names: Iterable[str]) -> dict[str, Need]:
    """What ``tree`` can observe of each of the variables ``names`` (the hoisted ones; none is ever bound)."""
    roots = {name: Need() for name in names}
    _Reader(roots).read(tree, {})
    return {name: need._freeze() for name, need in roots.items()}


_NULL = Node("lit", "null")
_FUNCTION = Node("lit")  # the target of a global function call (size(x), type(x))


Parts = tuple[Need, ...]
"""The needs of the values an expression can stand for (a variable's parts); empty when it stands for none."""

_NONE: Parts = ()


class _Reader:
    def __init__(self, roots: dict[str, Need]) -> None:
        self.roots = roots

    def read(self, node: Node, scope: dict[str, Parts]) -> None:
        """Record ``node``'s reads, its own value used whole."""
        for need in self.path(node, scope):
            need.whole = True

    def path(self, node: Node, scope: dict[str, Parts]) -> Parts:
        """The needs of the values ``node`` can stand for, the reads of its parts recorded."""
        kind, children = node.kind, node.children
        if kind == "ident":
            if node.name in scope:
                return scope[node.name]
            root = self.roots.get(node.name)
            return _NONE if root is None else (root,)
        if kind == "select":
            return tuple(need.field(node.name) for need in self.path(children[0], scope))
        if kind == "index":
            base = self._items(children[0], scope)
            key = children[1]
            name = plain_key(key.name) if key.kind == "lit" else None  # any other key is a computed one
            if base and name is not None and children[0].kind != "list":
                return tuple(need.field(name) for need in base)
            self.read(key, scope)
            return base if children[0].kind == "list" else tuple(need.each() for need in base)
        if kind == "has":
            target = children[0]
            if target.kind != "select":
                self.read(target, scope)
                return _NONE
            for need in self.path(target.children[0], scope):
                need.field(target.name)
            return _NONE
        if kind == "macro":
            return self._macro(node, scope)
        if kind == "bind":
            variable, value, body = children
            self.read(body, {**scope, variable.name: self.path(value, scope)})
            return _NONE
        if kind == "call":
            return self._call(node, scope)
        if kind == "cond":  # its value is one of the branches'
            self.read(children[0], scope)
            return self.path(children[1], scope) + self.path(children[2], scope)
        if kind == "binary" and node.name in ("==", "!=") and _NULL in children:
            other = children[1] if children[0] == _NULL else children[0]
            for need in self.path(other, scope):
                need.kept = True
            return _NONE
        if kind == "binary" and node.name == "in":
            self.read(children[0], scope)
            for need in self.path(children[1], scope):  # a list literal's items are read whole
                need.each()
                need.tested = True
            return _NONE
        for child in children:  # lit, list, map, unary, binary: every operand used whole
            self.read(child, scope)
        return _NONE

    def _items(self, node: Node, scope: dict[str, Parts]) -> Parts:
        """What a comprehension over ``node`` or an index into it reads through: for a list literal, its
        items' values; else ``node``'s own values."""
        if node.kind != "list":
            return self.path(node, scope)
        return tuple(need for item in node.children for need in self.path(item, scope))

    def _macro(self, node: Node, scope: dict[str, Parts]) -> Parts:
        target, variable, *bodies = node.children
        found = self._items(target, scope)
        inner = {**scope, variable.name: found if target.kind == "list" else tuple(need.bound() for need in found)}
        for body in bodies:
            self.read(body, inner)
        if node.name != "filter":
            return _NONE
        if target.kind == "list":  # a new list of the literal's items: read whole
            for need in found:
                need.whole = True
            return _NONE
        return found  # its items are the target's items (or a map's keys)

    def _call(self, node: Node, scope: dict[str, Parts]) -> Parts:
        target, *arguments = node.children
        sized = node.name == "size" and (
            (not arguments and target.kind != "lit") or (len(arguments) == 1 and target == _FUNCTION)
        )
        if sized or (node.name == "type" and len(arguments) == 1 and target == _FUNCTION):  # x.size(), size(x), type(x)
            for need in self.path(arguments[0] if arguments else target, scope):
                need.kept = True
                need.keys |= sized
            return _NONE
        for child in node.children:
            self.read(child, scope)
        return _NONE


class Budget:
    """The entries and items :func:`project` may still walk for one call (shared by all its values)."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class TooLarge(Exception):
    """:func:`project` stopped: the call's values have more entries and items than its budget."""


def project(value: Any, need: Need, budget: Budget) -> Any:
    """``value`` cut to what ``need`` observes; raises :class:`TooLarge` once ``budget`` is spent (and at once
    after that: a value that cannot be cut is handed whole, and the caller's own walk of it is bounded)."""
    return _project(value, need, budget)


def _project(value: Any, need: Need, budget: Budget) -> Any:
    if need.whole:
        return value
    if need.empty:  # nothing reads it: only its key's presence counts
        return None
    kind = type(value)
    if kind is dict:
        budget.left -= len(value)
        if budget.left < 0:
            raise TooLarge
        fields = need.fields
        if not need.keys:
            return {key: _project(value[key], child, budget) for key, child in fields.items() if key in value}
        merged, elements = need._merged, need.elements  # a comprehension binds a map's keys: kept as they are
        out = {}
        for key, child in value.items():
            inner = merged.get(key) or fields.get(key) or elements
            out[key] = None if inner is None else _project(child, inner, budget)
        return out
    if kind is list or kind is tuple:
        if need.tested or need.fields:  # compared whole by `in`, or read by a field (the engine's error)
            return value
        budget.left -= len(value)
        if budget.left < 0:
            raise TooLarge
        listed = need._listed
        if listed is None:
            return [None] * len(value) if need.keys else []
        return [_project(item, listed, budget) for item in value]
    return value
