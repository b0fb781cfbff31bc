"""The cost of a CEL check on one call's values, estimated before the engine runs it.

The engine (``cel``, Rust) has no step limit and holds the interpreter lock
while it evaluates, so one expensive check freezes every other request of the
process. A check's cost depends on its inputs: ``args.item_ids.all(i,
args.item_ids.filter(x, x == i).size() ...)`` is quadratic in the call's list.
So each check is parsed once (:func:`parse`) into a small syntax tree, and
before each evaluation :func:`estimate` walks that tree over the actual
``args`` and ``facts``: a comprehension costs the length of the list it ranges
over times its body, and ``map``/``filter`` also pay the engine's accumulator,
which it copies on every step (quadratic in the result's length: measured 0.3 us
per element copied, ``benchmarks/bench_worst_case.py``). Both branches of
``&&``, ``||`` and ``?:`` are counted, so the estimate is an upper bound the
engine's short-circuiting can only beat.

The engine also copies values: selecting a field or an item (``facts.searches``,
a comprehension's ``c.result``, ``l[0]``) copies the whole selected value, nested
items included, and a comprehension copies its range about twice more while it
binds the items (:data:`BIND_COPIES`); ``map`` and ``filter`` copy their
accumulator on every step. So every value selected costs its *weight* (the count
of the items, entries and scalars inside it, strings by 256 characters), not one
step: ``args.flights.all(f, facts.searches.exists(...))`` is flights x the
weight of ``facts.searches``. Before that rule a shipped airline check was
estimated far under the budget and ran 24 s on a request under the body limit.
A field of a number, a bool, null or a short string (or of a field the input
lacks) costs a step: the engine stops there with an error.
A bare name is a reference, not a copy: ``facts``, ``args`` or a comprehension's
``c`` costs one step however large it is (measured: ``facts.s`` in a loop beside a
3,000-item fact, or ``b.size()`` on a comprehension's 3,000-item ``b``, takes the
time of a scalar read; ``facts.big.size()`` or ``c.result.size()`` takes one copy of
the selected list per read). Charging the whole variable per read made honest
airline checks over a few hundred items estimate 300,000 steps for 300 us of work.

One step is roughly one comprehension iteration of the engine or one item
copied (measured 0.1-0.5 us; ``benchmarks/bench_cel_cost.py`` and the property
test of ``tests/gate/test_cel_cost_model.py`` keep measured time within a stated
factor of the estimate; real checks on tau2's data, whose ``exists`` stop early,
run far below it). Per decision:

* a check evaluates in this process when its estimate fits what is left of
  :data:`DECISION_BUDGET` steps (~50 ms of engine time); once it has run, what
  is left shrinks by the time it took, at :data:`STEP_SECONDS` per step, not by
  its estimate (:meth:`policyguard.gate.cel.Activation.settle`);
* a check past that, up to :data:`MAX_STEPS`, runs in a separate process
  (:mod:`policyguard.gate.celprocess`) given :data:`ISOLATED_SECONDS` per decision
  and killed past them, so it cannot hold this process's interpreter lock;
* a check estimated over :data:`MAX_STEPS` is not evaluated at all.

The last two block the call, naming the check (fail closed).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

DECISION_BUDGET = 100_000
STEP_SECONDS = 0.5e-6  # the time a step is sized at: DECISION_BUDGET steps are 50 ms of engine time
CONVERT_STEPS = 4  # steps per unit of weight to convert a value into the engine (measured 1-2 us per unit)
MAX_STEPS = 500_000_000
ISOLATED_SECONDS = 1.0
WALK_LIMIT = 100_000  # items: values larger are sent apart without an estimate (its walk would take ~0.2 s)
BIND_COPIES = 2  # a comprehension copies its range about twice over, binding its items (measured 1.2-1.5)
MACROS: frozenset[str] = frozenset({"all", "exists", "exists_one", "map", "filter"})
_ACCUMULATES: frozenset[str] = frozenset({"map", "filter"})
_SCANS_TARGET: frozenset[str] = frozenset({"contains", "startsWith", "endsWith", "matches"})

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
                |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,\[\](){}])
    """,
    re.VERBOSE | re.DOTALL,
)
_RELATIONS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})


class CostParseError(ValueError):
    """The expression uses syntax the cost estimate does not know; the message says where."""


@dataclass(frozen=True)
class Node:
    """One node of a check's syntax tree: ``kind`` and its children, ``name`` for names, fields and calls."""

    kind: str  # lit, ident, select, has, index, call, list, map, unary, binary, cond, macro, bind
    name: str = ""
    children: tuple[Node, ...] = ()


def parse(source: str) -> Node:
    """The syntax tree of ``source``; raises :class:`CostParseError` on syntax it does not know."""
    return _Parser(source).whole()


Token = tuple[str, str, int, int]
"""(kind, text, start, end): kind is string, number, name or op."""


def plain_key(literal: str) -> str | None:
    """The key a string literal names, when Python reads it as CEL does: quoted, not raw, bytes or
    triple-quoted, and without an escape (CEL's escapes are not all Python's); else None."""
    if literal[:1] not in ("'", '"') or literal.startswith(("'''", '"""')) or "\\" in literal:
        return None
    key = ast.literal_eval(literal)
    return key if isinstance(key, str) else None


def tokens(source: str) -> list[Token]:
    """The tokens of ``source``, spaces and comments left out; raises :class:`CostParseError` on a character
    no token starts with."""
    found: list[Token] = []
    position = 0
    while position < len(source):
        match = _TOKEN.match(source, position)
        if match is None:
            raise CostParseError(f"unexpected character {source[position]!r} at offset {position}")
        kind = match.lastgroup or ""
        if kind != "space":
            found.append((kind, match.group(), match.start(), match.end()))
        position = match.end()
    return found


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens: list[tuple[str, str]] = [(kind, text) for kind, text, _, _ in tokens(source)]
        self.at = 0

    def whole(self) -> Node:
        node = self.expr()
        if self.at != len(self.tokens):
            raise CostParseError(f"unexpected {self.tokens[self.at][1]!r}")
        return node

    def peek(self) -> str:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise CostParseError("unexpected end of expression")
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise CostParseError(f"expected {expected!r}, got {token[1]!r}")
        self.at += 1
        return token

    def expr(self) -> Node:
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take("?")
        yes = self.binary(0)
        self.take(":")
        return Node("cond", children=(test, yes, self.expr()))

    _LEVELS: tuple[frozenset[str], ...] = (
        frozenset({"||"}),
        frozenset({"&&"}),
        _RELATIONS,
        frozenset({"+", "-"}),
        frozenset({"*", "/", "%"}),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level] and self.tokens[self.at][0] in ("op", "name"):
            operator = self.take()[1]
            node = Node("binary", operator, (node, self.binary(level + 1)))
        return node

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            operator = self.take()[1]
            return Node("unary", operator, (self.unary(),))
        return self.member(self.primary())

    def member(self, node: Node) -> Node:
        while self.peek() in (".", "["):
            if self.take()[1] == "[":
                node = Node("index", children=(node, self.expr()))
                self.take("]")
                continue
            kind, name = self.take()
            if kind != "name":
                raise CostParseError(f"expected a field or method name after '.', got {name!r}")
            if self.peek() != "(":
                node = Node("select", name, (node,))
                continue
            arguments = self.arguments(")")
            if name in MACROS and len(arguments) in (2, 3) and arguments[0].kind == "ident":
                node = Node("macro", name, (node, *arguments))
            elif node.kind == "ident" and node.name == "cel" and name == "bind" and len(arguments) == 3:
                node = Node("bind", children=tuple(arguments))
            else:
                node = Node("call", name, (node, *arguments))
        return node

    def arguments(self, close: str) -> list[Node]:
        self.take()  # the opening bracket
        items: list[Node] = []
        while self.peek() != close:
            items.append(self.expr())
            if self.peek() != close:
                self.take(",")
        self.take(close)
        return items

    def primary(self) -> Node:
        kind, text = self.tokens[self.at] if self.at < len(self.tokens) else ("", "")
        if kind in ("string", "number"):
            self.take()
            return Node("lit", text)
        if kind == "name":
            self.take()
            if self.peek() != "(":
                return Node("lit", text) if text in ("true", "false", "null") else Node("ident", text)
            arguments = self.arguments(")")
            if text == "has" and len(arguments) == 1:
                return Node("has", children=tuple(arguments))
            return Node("call", text, (Node("lit"), *arguments))
        if text == "(":
            self.take()
            node = self.expr()
            self.take(")")
            return node
        if text == "[":
            return Node("list", children=tuple(self.arguments("]")))
        if text == "{":
            self.take()
            entries: list[Node] = []
            while self.peek() != "}":
                entries.append(self.expr())
                self.take(":")
                entries.append(self.expr())
                if self.peek() != "}":
                    self.take(",")
            self.take("}")
            return Node("map", children=tuple(entries))
        raise CostParseError(f"unexpected {text or 'end of expression'!r}")


class Shape:
    """What an expression can evaluate to, merged over every value it can be.

    ``size`` bounds its length (a list's items, a map's entries; a string
    counts one per 256 characters, as the engine compares and scans strings
    far faster than it steps); ``weight`` bounds what the engine copies when
    it reads the value (its items, entries and scalars, nested ones included);
    ``items`` is the shape of what a comprehension
    over it binds (list items, map keys), ``values`` of what an index reads
    (list items, map values), ``fields`` of each key read with ``.name``.
    """

    __slots__ = ("size", "weight", "items", "values", "fields", "_pending")

    def __init__(self, size: int = 0, weight: int | None = None) -> None:
        self.size = size
        self.weight = size if weight is None else weight
        self.items: Shape | None = None
        self.values: Shape | None = None
        self.fields: dict[str, Shape] | None = None
        self._pending: tuple[str, list[Shape]] | None = None  # merges made when first read: most are never read

    def defer(self, how: str, shapes: list[Shape]) -> None:
        """Merge ``shapes`` into ``items``/``values`` (``how``: items, values) or into all three (merge) when read."""
        self._pending = (how, shapes)
        if how != "values":
            del self.items
        del self.values
        if how == "merge":
            del self.fields

    def __getattr__(self, name: str) -> Any:  # only for an unset slot: a deferred merge
        if name not in ("items", "values", "fields") or self._pending is None:
            raise AttributeError(name)
        self._settle()
        return object.__getattribute__(self, name)

    def _settle(self) -> None:
        assert self._pending is not None
        how, shapes = self._pending
        self._pending = None
        if how == "items":  # a list's: what its items can be
            self.items = self.values = _merge(shapes)
        elif how == "values":  # a map's values
            self.values = _merge(shapes)
        else:  # one shape bounding each of shapes
            parts = [s.items for s in shapes if s.items is not None]
            self.items = _merge(parts) if parts else None
            parts = [s.values for s in shapes if s.values is not None]
            self.values = _merge(parts) if parts else None
            by_field: dict[str, list[Shape]] = {}
            maps = False  # fields are known when any is a map or a list: a field of a long string is an error
            for s in shapes:
                maps = maps or s.fields is not None
                for key, child in (s.fields or {}).items():
                    by_field.setdefault(key, []).append(child)
            self.fields = {key: _merge(children) for key, children in by_field.items()} if maps else None


SCALAR = Shape()


class Summary:
    """The shapes of one call's variables, built once per decision (linear in the input)."""

    def __init__(self, variables: Mapping[str, Any], memo: dict[int, Shape] | None = None) -> None:
        self._memo = {} if memo is None else memo  # by id: a value read twice (or shared) is walked once
        self.variables = {name: self._shape(value) for name, value in variables.items()}
        self.total = sum(1 + shape.weight for shape in self.variables.values())
        self.largest = self.total  # the G of Bound: no length or weight of the input is larger
        self.everything = Shape(self.total)  # the shape of a value the estimate cannot follow
        self.everything.items = self.everything.values = self.everything

    def _shape(self, value: Any) -> Shape:
        if isinstance(value, _CONTAINERS):
            found = self._memo.get(id(value))
            if found is None:
                found = self._memo[id(value)] = self._container(value)
            return found
        if isinstance(value, _TEXTS) and len(value) >= 256:
            return Shape(len(value) >> 8)
        return SCALAR

    def _container(self, value: Any) -> Shape:
        if isinstance(value, dict):
            shape = Shape(len(value))
            keys = max(map(len, value), default=0) >> 8
            shape.items = Shape(keys) if keys else SCALAR
            fields = shape.fields = {key: self._shape(child) for key, child in value.items()}
            shape.defer("values", list(fields.values()))
            shape.weight = 1 + sum(2 + (len(key) >> 8) + child.weight for key, child in fields.items())
        elif isinstance(value, list | tuple):
            children = [self._shape(child) for child in value]
            shape = Shape(len(value), 1 + len(children) + sum(child.weight for child in children))
            shape.defer("items", children)
            shape.fields = {}  # a list has no fields: reading one is an error at once, not an unknown value
        return shape


def _merge(shapes: list[Shape]) -> Shape:
    """One shape that bounds each of ``shapes`` (linear in their total size)."""
    distinct = list({id(s): s for s in shapes if s is not SCALAR}.values())
    if not distinct:
        return SCALAR
    if len(distinct) == 1:
        return distinct[0]
    merged = Shape(max(s.size for s in distinct), max(s.weight for s in distinct))
    merged.defer("merge", distinct)
    return merged


class TooHeavy(Exception):
    """:func:`total_weight` stopped: the values have more than its ``limit`` items."""


def total_weight(variables: Mapping[str, Any], memo: dict[int, int] | None = None, limit: int | None = None) -> int:
    """The G of :class:`Bound`: the weight of all of ``variables`` (:attr:`Summary.total`, without the shapes).

    Raises :class:`TooHeavy` once more than ``limit`` items were walked: the walk is Python, and past a few
    hundred thousand items its own time matters; the caller then knows enough (far over the budget).
    """
    memo = {} if memo is None else memo  # by id: a value read twice (or shared) is walked once
    walked = 0

    def weigh(value: Any) -> int:  # a dict, list or tuple; scalars are weighed inline (most values are)
        nonlocal walked
        found = memo.get(id(value))
        if found is not None:
            return found
        walked += len(value)
        if limit is not None and walked > limit:
            raise TooHeavy
        found = 1
        children: Any = value
        if isinstance(value, dict):
            found += sum(2 + (len(key) >> 8) for key in value)
            children = value.values()
        else:
            found += len(value)
        for child in children:
            if isinstance(child, _CONTAINERS):
                found += weigh(child)
            elif isinstance(child, _TEXTS):
                found += len(child) >> 8
        memo[id(value)] = found
        return found

    total = 0
    for value in variables.values():
        total += 1
        if isinstance(value, _CONTAINERS):
            total += weigh(value)
        elif isinstance(value, _TEXTS):
            total += len(value) >> 8
    return total


_CONTAINERS = (dict, list, tuple)
_TEXTS = (str, bytes)


_S = TypeVar("_S")
_R = TypeVar("_R")


def _in_scope(scopes: dict[str, _S], name: str, shape: _S, cost: Callable[[], _R]) -> _R:
    """``cost()`` with ``name`` bound to ``shape`` (a macro's variable), the outer binding restored after."""
    outer = scopes.get(name)
    scopes[name] = shape
    try:
        return cost()
    finally:
        if outer is None:
            del scopes[name]
        else:
            scopes[name] = outer


def estimate(tree: Node, summary: Summary) -> int:
    """An upper bound on the engine's steps to evaluate ``tree`` over the summarised variables."""
    return _compiled(tree)(_Estimate(summary))[0]


class _Estimate:
    """What one estimate walks with: the summarised variables and the shapes the macros' variables are bound to."""

    def __init__(self, summary: Summary) -> None:
        self.everything = summary.everything
        self.total = summary.total
        self.variables = summary.variables
        self.scopes = dict(summary.variables)

    def scoped(self, step: _Step, name: str, shape: Shape) -> tuple[int, Shape]:
        """``step`` with ``name`` bound to ``shape`` (a macro's variable), the outer binding restored after."""
        scopes = self.scopes
        outer = scopes.get(name)
        scopes[name] = shape
        try:
            return step(self)
        finally:
            if outer is None:
                del scopes[name]
            else:
                scopes[name] = outer

    def below(self, body: Node, variable: str) -> int | None:
        """A bound on how many distinct naturals ``k`` make ``body`` true, from a conjunct ``k < X.size()``.

        ``X.size()`` (or ``size(X)``, either minus a literal) where ``X`` is a path of fields of ``args`` or
        ``facts`` holding a list or a map: its length is in the summary, exact. A string's length is not
        (strings are counted by 256 characters), nor is a path through a comprehension's variable (merged).
        """
        if body.kind == "binary" and body.name == "&&":
            bounds = [b for b in (self.below(side, variable) for side in body.children) if b is not None]
            return min(bounds, default=None)
        if body.kind != "binary" or body.name != "<" or body.children[0] != Node("ident", variable):
            return None
        limit = body.children[1]
        if limit.kind == "binary" and limit.name == "-" and _natural(limit.children[1]):
            limit = limit.children[0]
        if limit.kind != "call" or limit.name != "size":
            return None
        path = limit.children[-1]
        if len(limit.children) != (2 if limit.children[0] == Node("lit") else 1):
            return None
        shape = self.path(path)
        return None if shape is None or shape.items is None else shape.size

    def path(self, node: Node) -> Shape | None:
        """The summarised shape of ``args.a.b`` or ``facts.x`` (fields only, the variable not rebound), else None."""
        if node.kind == "ident":
            shape = self.variables.get(node.name)
            return shape if shape is not None and self.scopes.get(node.name) is shape else None
        if node.kind != "select":
            return None
        parent = self.path(node.children[0])
        if parent is None or parent.fields is None:
            return None
        return parent.fields.get(node.name)

    def join(self, shapes: list[Shape]) -> Shape:
        """A shape any of ``shapes`` fits: itself when they are one; else as large as anything."""
        distinct = {id(s): s for s in shapes if s is not SCALAR}
        if not distinct:
            return SCALAR
        if len(distinct) == 1:
            return next(iter(distinct.values()))
        shape = Shape(sum(s.size for s in distinct.values()), sum(s.weight for s in distinct.values()))
        shape.items = shape.values = self.everything
        return shape


_Step = Callable[[_Estimate], tuple[int, Shape]]
_LIT = (1, SCALAR)


def _compiled(tree: Node) -> _Step:
    """``tree``'s estimate as nested closures, built once per tree (kept on it): the walk runs per decision."""
    found = tree.__dict__.get("_step")
    if found is None:
        found = _step(tree)
        object.__setattr__(tree, "_step", found)  # not a field: equality and hashing ignore it
    return found


def _step(node: Node) -> _Step:
    """The rule of :func:`estimate` for ``node``: (steps to evaluate it once, the shape of what it can be)."""
    kind, name = node.kind, node.name
    if kind == "lit":
        return lambda env: _LIT
    if kind == "ident":  # a reference: the engine copies what is selected from it, not the variable

        def ident(env: _Estimate) -> tuple[int, Shape]:
            return 1, env.scopes.get(name, env.everything)

        return ident
    if kind == "macro":
        return _macro(node)
    if kind == "bind":
        init, body = _step(node.children[1]), _step(node.children[2])
        bound = node.children[0].name

        def bind(env: _Estimate) -> tuple[int, Shape]:
            steps, shape = init(env)
            inner, result = env.scoped(body, bound, shape)
            return 1 + steps + inner, result

        return bind
    children = [_step(child) for child in node.children]
    if kind in ("has", "unary"):

        def flat(env: _Estimate) -> tuple[int, Shape]:
            return 1 + sum(child(env)[0] for child in children), SCALAR

        return flat
    if kind == "select":  # a field the input never has is SCALAR: the engine stops there with an error
        (parent,) = children

        def select(env: _Estimate) -> tuple[int, Shape]:
            steps, shape = parent(env)
            if shape is SCALAR:  # a field of a number, a bool, null or a short string: an error at once
                return 1 + steps, SCALAR
            fields = shape.fields  # None: a value whose fields are not known (a join, dyn()): it may be anything
            found = env.everything if fields is None else fields.get(name, SCALAR)
            return 1 + steps + found.weight, found

        return select
    if kind == "index":
        target, key = children

        def index(env: _Estimate) -> tuple[int, Shape]:
            steps, shape = target(env)
            found = shape.values or SCALAR
            return 1 + steps + key(env)[0] + found.weight, found

        return index
    if kind in ("list", "map"):
        stride = 2 if kind == "map" else 1

        def literal(env: _Estimate) -> tuple[int, Shape]:
            costs = [child(env) for child in children]
            shapes = [s for _, s in costs]
            shape = Shape(len(shapes) // stride, 1 + len(shapes) + sum(s.weight for s in shapes))
            shape.items = shape.values = env.join(shapes[::stride])  # a map's items are its keys
            if stride == 2:  # and an index reads its values: {"a": args.l}["a"].all(...) walks args.l
                shape.values = env.join(shapes[1::2])
            return 1 + sum(c for c, _ in costs), shape

        return literal
    if kind == "binary":
        return _binary(name, *children)
    if kind == "cond":
        test, yes, no = children

        def cond(env: _Estimate) -> tuple[int, Shape]:
            (a, _), (b, left), (c, right) = test(env), yes(env), no(env)
            return 1 + a + b + c, env.join([left, right])

        return cond
    if kind == "call":  # a function reads each argument once; a string search, the target per pattern
        if name in _SCANS_TARGET:

            def scan(env: _Estimate) -> tuple[int, Shape]:
                costs = [child(env) for child in children]
                sizes = [s.size for _, s in costs]
                return 1 + sum(c for c, _ in costs) + sizes[0] * max(1, *sizes[1:]), SCALAR

            return scan
        dyn = name == "dyn"

        def call(env: _Estimate) -> tuple[int, Shape]:
            steps = 1
            for child in children:
                cost, shape = child(env)
                steps += cost + shape.weight
            return steps, env.everything if dyn else SCALAR

        return call
    raise AssertionError(f"unknown node kind {kind!r}")


def _binary(operator: str, left_step: _Step, right_step: _Step) -> _Step:
    def binary(env: _Estimate) -> tuple[int, Shape]:
        (a, left), (b, right) = left_step(env), right_step(env)
        steps = 1 + a + b
        if operator == "in":
            return steps + right.weight, SCALAR
        if operator == "==" or operator == "!=":
            return steps + min(left.weight, right.weight), SCALAR
        if operator == "+":
            shape = Shape(left.size + right.size, left.weight + right.weight)
            shape.items = shape.values = env.join([left.items or SCALAR, right.items or SCALAR])
            return steps + shape.weight, shape
        return steps, SCALAR

    return binary


def _macro(node: Node) -> _Step:
    """``range.all(x, body)`` and friends: the body once per element; ``map``/``filter`` copy their result."""
    target, variable, *bodies = node.children
    range_step, body_steps, name = _step(target), [_step(body) for body in bodies], variable.name
    accumulates, keeps = node.name in _ACCUMULATES, node.name == "filter"
    cut = keeps and _naturals(target)  # [0, 1, ..., 15].filter(k, k < args.item_ids.size() && ...): at most that many

    def macro(env: _Estimate) -> tuple[int, Shape]:
        steps, shape = range_step(env)
        element = shape.items or SCALAR
        per_element = 1
        result = element
        for body in body_steps:
            inner, result = env.scoped(body, name, element)
            per_element += inner
        n = shape.size
        steps += 1 + BIND_COPIES * shape.weight + n * per_element
        if not accumulates:
            return steps, SCALAR
        out = Shape(n, shape.weight if keeps else 1 + n * (1 + result.weight))
        if keeps:
            out.items, out.values, out.fields = shape.items, shape.values, shape.fields
            if cut:
                kept = env.below(bodies[0], name)
                out.size = n if kept is None else min(n, kept)
        else:
            out.items = out.values = result
        return steps + n * (out.weight + env.total), out  # each step copies the accumulator and the activation

    return macro


_NATURAL = re.compile(r"\d+")


def _natural(node: Node) -> bool:
    return node.kind == "lit" and _NATURAL.fullmatch(node.name) is not None


def _naturals(node: Node) -> bool:
    """Whether ``node`` is a list literal of distinct non-negative integers (``[0, 1, 2]``)."""
    if node.kind != "list" or not all(_natural(item) for item in node.children):
        return False
    values = [int(item.name) for item in node.children]
    return len(set(values)) == len(values)


Poly = tuple[int, ...]  # coefficients of a polynomial in G, lowest power first


class Bound:
    """A check's cost as a polynomial in G, the weight of the whole input (no length or weight in it is larger).

    Built once per check from the same rules as :func:`estimate`, with every
    input value as long as the largest: ``bound(G)`` is cheap (no walk of the
    input) and never below the estimate, so a decision whose checks fit the
    budget by this bound skips the estimate. A check without comprehensions
    has a constant bound.
    """

    def __init__(self, tree: Node) -> None:
        self.poly = _Static().cost(tree)[0]

    @property
    def constant(self) -> bool:
        return len(self.poly) == 1

    def __call__(self, largest: int) -> int:
        total = 0
        for coefficient in reversed(self.poly):
            total = total * largest + coefficient
        return total


def _add(*polys: Poly) -> Poly:
    out = [0] * max(len(p) for p in polys)
    for p in polys:
        for power, coefficient in enumerate(p):
            out[power] += coefficient
    return tuple(out)


def _mul(a: Poly, b: Poly) -> Poly:
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return tuple(out)


def _lower(a: Poly, b: Poly) -> Poly:
    """One of two bounds of ``min(a, b)``: the one of lower degree (either would do)."""
    return a if (len(a), a[::-1]) <= (len(b), b[::-1]) else b


_ONE: Poly = (1,)
_ZERO: Poly = (0,)
_G: Poly = (0, 1)


class _StaticShape:
    """:class:`Shape`'s bounds as polynomials; ``values`` (what an index reads) is ``items`` unless given."""

    __slots__ = ("size", "weight", "items", "values")

    def __init__(
        self,
        size: Poly,
        items: _StaticShape | None = None,
        weight: Poly | None = None,
        values: _StaticShape | None = None,
    ) -> None:
        self.size = size
        self.weight = size if weight is None else weight
        self.items = items
        self.values = items if values is None else values


_STATIC_SCALAR = _StaticShape(_ZERO)
_ANY = _StaticShape(_G)
_ANY.items = _ANY.values = _ANY


class _Static:
    """:class:`_Estimate`'s rules over polynomials: every variable, field and element is as large as G."""

    def __init__(self) -> None:
        self.scopes: dict[str, _StaticShape] = {}

    def cost(self, node: Node) -> tuple[Poly, _StaticShape]:
        kind = node.kind
        if kind == "lit":
            return _ONE, _STATIC_SCALAR
        if kind == "ident":
            return _ONE, self.scopes.get(node.name, _ANY)
        if kind == "macro":
            return self.macro(node)
        if kind == "bind":
            name, init, body = node.children
            steps, shape = self.cost(init)
            inner, result = self.scoped(body, name.name, shape)
            return _add(_ONE, steps, inner), result
        costs = [self.cost(child) for child in node.children]
        steps = _add(_ONE, *(c for c, _ in costs))
        shapes = [s for _, s in costs]
        if kind in ("has", "unary"):
            return steps, _STATIC_SCALAR
        if kind == "select":  # a field of the input, or of a value whose fields are unknown: the whole input
            return _add(steps, _G), _ANY
        if kind == "index":  # what the target's values can be: a list literal's items may add up to more than G
            found = shapes[0].values or _STATIC_SCALAR
            return _add(steps, found.weight), found
        if kind in ("list", "map"):
            weight = _add((1 + len(shapes),), *(s.weight for s in shapes))
            if kind == "list":
                return steps, _StaticShape((len(shapes),), self.join(shapes), weight)
            items, values = self.join(shapes[::2]), self.join(shapes[1::2])
            return steps, _StaticShape((len(shapes) // 2,), items, weight, values)
        if kind == "binary":
            left, right = shapes
            if node.name == "in":
                return _add(steps, right.weight), _STATIC_SCALAR
            if node.name in ("==", "!="):
                return _add(steps, _lower(left.weight, right.weight)), _STATIC_SCALAR
            if node.name == "+":
                size, weight = _add(left.size, right.size), _add(left.weight, right.weight)
                items = self.join([left.items or _ANY, right.items or _ANY])
                return _add(steps, weight), _StaticShape(size, items, weight)
            return steps, _STATIC_SCALAR
        if kind == "cond":
            return steps, self.join(shapes[1:])
        if kind == "call":
            if node.name in _SCANS_TARGET:
                pattern = _add(*(s.size for s in shapes[1:])) if len(shapes) > 1 else _ONE
                return _add(steps, _mul(shapes[0].size, _add(_ONE, pattern))), _STATIC_SCALAR
            return _add(steps, *(s.weight for s in shapes)), _ANY if node.name == "dyn" else _STATIC_SCALAR
        raise AssertionError(f"unknown node kind {kind!r}")

    def macro(self, node: Node) -> tuple[Poly, _StaticShape]:
        target, variable, *bodies = node.children
        steps, shape = self.cost(target)
        element = shape.items or _STATIC_SCALAR
        per_element = _ONE
        result = element
        for body in bodies:
            inner, result = self.scoped(body, variable.name, element)
            per_element = _add(per_element, inner)
        n = shape.size
        steps = _add(steps, _ONE, _mul((BIND_COPIES,), shape.weight), _mul(n, per_element))
        if node.name not in _ACCUMULATES:
            return steps, _STATIC_SCALAR
        if node.name == "filter":
            out = _StaticShape(n, element, shape.weight, shape.values)
        else:
            out = _StaticShape(n, result, _add(_ONE, _mul(n, _add(_ONE, result.weight))))
        return _add(steps, _mul(n, _add(out.weight, _G))), out

    def scoped(self, body: Node, name: str, shape: _StaticShape) -> tuple[Poly, _StaticShape]:
        return _in_scope(self.scopes, name, shape, lambda: self.cost(body))

    def join(self, shapes: list[_StaticShape]) -> _StaticShape:
        """:meth:`_Estimate.join`'s bound. Not deduplicated: one static shape (``_ANY``) stands for values the
        estimate may hold apart, a map and a list inside it (``c ? args.a : args.a.b``), whose join weighs their
        sum, up to twice the input's weight."""
        parts = [s for s in shapes if s is not _STATIC_SCALAR]
        if len(parts) <= 1:
            return parts[0] if parts else _STATIC_SCALAR
        return _StaticShape(_add(*(s.size for s in parts)), _ANY, _add(*(s.weight for s in parts)))
