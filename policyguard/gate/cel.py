"""CEL checks: compile a checklist's ``check`` once, evaluate it per call.

A check is a Common Expression Language expression over four variables:

* ``args`` - map of the pending call's arguments;
* ``facts`` - map fact name -> JSON value of a trusted read (see :mod:`policyguard.gate.facts`);
* ``principal`` - the authenticated user id (string) or ``null``;
* ``now`` - a CEL timestamp (an aware :class:`datetime.datetime` from Python).

Two helper functions are registered, and only these (a small, documented set):

* ``ts(s)`` - parse an ISO-8601 timestamp string. A string without an offset
  (tau2 writes ``"2024-05-14T15:00:00"``) is read in the timezone of ``now``,
  because such policies state their times in the same local clock as their
  "current time"; a date alone (``"2024-05-14"``) is midnight in that timezone.
  CEL's own ``timestamp()`` rejects strings without an offset.
* ``sum_of(list)`` - the sum of a list of numbers (e.g. payment amounts).

Missing data is never silently true or false: ``args.x`` when the call has no
``x`` raises :class:`CelEvalError`, and the gate turns that into a BLOCK. A
check states optional fields explicitly with ``has(args.x)``. A check must
return a bool; anything else is an error, not a truthy value.

Engine choice - measured on this machine (Python 3.11, 2 shared cores, medians
of 7 timeit runs; ranges are repeat runs under varying load) with the check
``args.amount <= facts.order.captured && facts.order.user_id == principal &&
args.amount <= 500``:

* ``common-expression-language`` 0.10 (module ``cel``, Rust): 18-33 us/eval
  passing a dict; :meth:`CheckProgram.holds` (fresh ``Context`` with the helper
  functions) 20-56 us; 42-60 us/compile. Compares ``int`` with ``double``
  (JSON ``50`` vs ``50.0``) as CEL's current spec does; parse errors carry
  line:column and a caret; timestamps and durations are native and Python
  functions may return aware datetimes. Import ~0.34 s (hence lazy here).
* ``cel-python`` 0.5 (module ``celpy``, pure Python on lark): 490-680 us/eval
  including the JSON->CEL conversion (380-740 us pre-converted), 360-730
  us/compile. Rejects ``50 <= 50.0`` with "no such overload", so every check
  over JSON numbers would need ``double()`` casts; its errors are tuples of
  internal exceptions; it reads timestamps without an offset as UTC, silently.

We use ``cel``: ~20x faster, friendlier to JSON numbers, clearer messages.
(``celpy`` is not a dependency; it was measured from a scratch install.) One
wart: when a helper raises, the Rust engine also prints a line to stderr.
The engine is imported inside functions so ``import policyguard`` stays light,
and only the engine: :func:`engine` loads the package's compiled module without
running ``cel/__init__.py``, which imports the package's command-line REPL
(typer, rich, prompt_toolkit, pygments: ~0.2 s of a cold ``policyguard verify``).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any, NamedTuple

from policyguard.errors import PolicyGuardError

from .celcost import (
    CONVERT_STEPS,
    DECISION_BUDGET,
    ISOLATED_SECONDS,
    MAX_STEPS,
    STEP_SECONDS,
    WALK_LIMIT,
    Bound,
    CostParseError,
    Node,
    Summary,
    TooHeavy,
    estimate,
    parse,
    total_weight,
)
from .celhoist import Hoist, hoist, hoisted_values
from .celproject import Budget, needs, union


class Rewritten(NamedTuple):
    """A check as it runs (:mod:`.celhoist`): compiled, its hoisted paths, and its own syntax tree and bound."""

    program: Any
    hoists: frozenset[Hoist]
    tree: Node
    bound: Bound

CHECK_VARIABLES: frozenset[str] = frozenset({"args", "facts", "principal", "now"})
HELPER_FUNCTIONS: frozenset[str] = frozenset({"ts", "sum_of"})

_FACT_DOT = re.compile(r"(?<![\w.])facts\s*\.\s*([A-Za-z_]\w*)")
_FACT_INDEX = re.compile(r"(?<![\w.])facts\s*\[\s*(?:\"([^\"]+)\"|'([^']+)')\s*\]")
_BOUND = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(\s*([A-Za-z_]\w*)\s*,")


_ENGINE_LOCK = threading.Lock()


def engine() -> Any:
    """The ``cel`` package's compiled engine module (``cel.cel``: compile, Context, Program).

    Loaded from its file and registered as ``cel.cel``, so a later ``import cel``
    (which does ``from .cel import *``) reuses this one module rather than
    initialising the extension twice. When the file cannot be found that way
    (another packaging of ``cel``), ``import cel`` is used as it is.
    """
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    with _ENGINE_LOCK:  # two threads' first checks must not initialise the extension twice
        loaded = sys.modules.get("cel.cel")
        return loaded if loaded is not None else _load_engine()


def _load_engine() -> Any:
    path = _engine_file()
    if path is None:
        import cel

        return cel
    loader = importlib.machinery.ExtensionFileLoader("cel.cel", path)
    spec = importlib.util.spec_from_file_location("cel.cel", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules["cel.cel"] = module  # only once complete: engine()'s unlocked check may see it at once
    return module


def _engine_file() -> str | None:
    if "cel" in sys.modules:  # the package is loaded already (with its engine): use it
        return None
    spec = importlib.util.find_spec("cel")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = f"{folder}/cel{suffix}"
            if os.path.isfile(candidate):
                return candidate
    return None


class CelError(PolicyGuardError):
    """A CEL expression could not be compiled or evaluated."""


class CelCompileError(CelError):
    """The expression does not parse; the message is the engine's, with the position."""


class CelEvalError(CelError):
    """Evaluation failed: a missing key or field, a type error, a non-bool check result."""


class CelBudgetError(CelEvalError):
    """The check would cost more than what is left of the decision's budget; it was not evaluated."""


_PATH = re.compile(r"^\s*(args|facts|principal)((?:\s*\.\s*[A-Za-z_]\w*)*)\s*$")


Roots = tuple[frozenset[str] | None, frozenset[str] | None]
"""The keys of ``args`` and of ``facts`` a check reads; ``None`` when it reads the whole map."""

WHOLE: Roots = (None, None)


class _View:
    """The part of a call's variables one check reads, with what the engine and the estimate need of it."""

    def __init__(
        self, variables: dict[str, Any], memo: tuple[dict[int, int], dict[int, Any]], absent: Iterable[str] = ()
    ) -> None:
        self.variables = variables
        self.context: Any = None
        self._memo = memo  # the activation's: values two checks read are walked once
        self._weight: int | None = None
        self._summary: Summary | None = None
        self._absent = tuple(absent)  # hoisted names whose paths the call lacks: reading one fails at once

    def weight(self) -> int:
        """The weight of the view (:func:`~policyguard.gate.celcost.total_weight`), each absent hoisted name
        counted as the null the summary holds for it, so it is the summary's total, the G of the cheap bound;
        -1 when over WALK_LIMIT."""
        if self._weight is None:
            try:
                self._weight = total_weight(self.variables, self._memo[0], WALK_LIMIT) + len(self._absent)
            except TooHeavy:
                self._weight = -1
        return self._weight

    def summary(self) -> Summary:
        """The shapes of the view; an absent hoisted name is a scalar, as a field the input lacks is to the
        estimate of the check as written (the engine stops there with an error), not the whole input."""
        if self._summary is None:
            variables = {**self.variables, **dict.fromkeys(self._absent)} if self._absent else self.variables
            self._summary = Summary(variables, self._memo[1])
        return self._summary


class Activation:
    """A call's variables, converted for CEL as its checks need them, with the call's budget.

    The engine copies every value it reads and converts every value it is
    given, so each check is handed only the keys of ``args`` and ``facts`` it
    reads (its :data:`Roots`): a check of ``facts.reservation`` never pays for
    a 4 MB search result beside it. Checks that read the same keys share one
    converted context; given ``wide``, the keys all of a decision's checks
    read, they share one context of those keys while its conversion costs at
    most half of what is left of the budget (converting each fact once, not
    once per check reading it: the replays' views overlap ~2.5-3x). The
    activation also holds the call's budget
    (:mod:`policyguard.gate.celcost`): the checks evaluated over it share
    ``budget`` steps, conversions included. Not thread-safe: build one per
    call, never share it between threads.

    A check is admitted here only if its estimate fits what is left of the
    budget; once it has run, the budget is charged the time it took (converted
    at :data:`~policyguard.gate.celcost.STEP_SECONDS` per step, the rate the
    budget is sized with) in place of its estimate. Estimates are upper bounds
    (every branch, every item, no early stop), often 100-1,000 times the work
    of an honest call; summed over a decision's checks they sent honest checks
    to the worker process. The engine time of a decision stays bounded as
    before: the checks before the last admitted one took at most the budget's
    time (``DECISION_BUDGET x STEP_SECONDS`` = 50 ms), and the last one fit the
    remainder by its estimate.
    """

    def __init__(
        self,
        variables: Mapping[str, Any],
        *,
        budget: int = DECISION_BUDGET,
        wide: Roots | None = None,
        hoists: frozenset[Hoist] | None = None,
    ) -> None:
        self.variables = variables
        self.budget = budget
        self.spent = 0
        self.isolated_left = ISOLATED_SECONDS
        self._views: dict[Roots, _View] = {}
        self._wide = wide
        self._contexts: dict[Roots, _View] = {}  # the view whose context each admitted check's roots use
        self._hoists = hoists  # every hoisted path of the decision's checks: their shared context
        self._joined = {item.name: item for item in hoists} if hoists else {}  # each with what all checks read
        self._read: dict[tuple[str, int], Any] = {}  # each hoisted value, read (and cut) once per call and need
        self._cuts = Budget(WALK_LIMIT)  # the items all of the call's cuts may walk
        self._hoisted: dict[frozenset[Hoist], _View] = {}
        self._hoisted_contexts: dict[frozenset[Hoist], _View] = {}  # as _contexts, for rewritten checks
        self._memo: tuple[dict[int, int], dict[int, Any]] = ({}, {})
        self._apart_cost = 0
        self._reserved = 0  # the estimate charged for the check being evaluated, until it is settled

    def view(self, roots: Roots = WHOLE) -> _View:
        found = self._views.get(roots)
        if found is None:
            found = self._views[roots] = _View(_narrow(self.variables, roots), self._memo)
        return found

    def charge(
        self, tree: Node, bound: Bound, source: str, roots: Roots = WHOLE, hoists: frozenset[Hoist] | None = None
    ) -> bool:
        """Spend a check's estimated cost: True to evaluate it here, False to evaluate it apart (:meth:`isolated`).

        ``hoists``: the check runs rewritten (:mod:`.celhoist`): ``tree`` and ``bound`` are the rewritten
        check's, estimated over those values, and its context holds them, not its view. Raises
        :class:`CelBudgetError` when the estimate is over :data:`~policyguard.gate.celcost.MAX_STEPS`.
        """
        view = self.view(roots) if hoists is None else self._hoisted_set(hoists)  # what the check reads
        if view.weight() < 0:  # too large to walk here: apart, where the deadline bounds it
            self._apart_cost = MAX_STEPS
            return False
        converted = self._converted(roots, view) if hoists is None else self._hoisted_for(hoists)
        convert = 0 if converted.context is not None else CONVERT_STEPS * converted.weight()
        cost = convert + (bound.poly[0] if bound.constant else bound(view.weight()))
        if self.spent + convert > self.budget and cost <= MAX_STEPS:  # apart whatever the estimate: skip its walk
            self._apart_cost = cost
            return False
        if self.spent + cost > min(self.budget, MAX_STEPS):  # the cheap bound does not fit: walk for the estimate
            cost = convert + estimate(tree, view.summary())
        if cost > MAX_STEPS:
            raise CelBudgetError(
                f"its cost on this call's values is estimated at {cost:,} steps, over the limit of {MAX_STEPS:,};"
                f" not evaluated: {_short(source)}"
            )
        if self.spent + cost > self.budget:
            self._apart_cost = cost
            return False
        self.spent += cost
        self._reserved = cost
        if hoists is None:
            self._contexts[roots] = converted
        else:
            self._hoisted_contexts[hoists] = converted
        return True

    def _hoisted_set(self, hoists: frozenset[Hoist]) -> _View:
        found = self._hoisted.get(hoists)
        if found is None:
            joined = self._joined
            cut = frozenset(joined.get(item.name, item) for item in hoists)  # each with what all checks read
            values = hoisted_values(cut, self.variables, self._read, self._cuts)
            absent = [item.name for item in hoists if item.name not in values]
            found = self._hoisted[hoists] = _View(values, self._memo, absent)
        return found

    def _hoisted_for(self, hoists: frozenset[Hoist]) -> _View:
        """The values a rewritten check's context holds: the decision's shared set when it covers them and is
        cheap enough to convert (as :meth:`_converted`), else the check's own."""
        found = self._hoisted_contexts.get(hoists)
        if found is not None:
            return found
        every = self._hoists
        if every is None or not all(item.name in self._joined for item in hoists):
            return self._hoisted_set(hoists)
        shared = self._hoisted_set(every)
        if shared.context is not None:
            return shared
        weight = shared.weight()
        return shared if 0 <= CONVERT_STEPS * weight <= (self.budget - self.spent) // 2 else self._hoisted_set(hoists)

    def _converted(self, roots: Roots, view: _View) -> _View:
        """The view whose context a check of ``roots`` uses: the wide one when it covers them and is cheap enough."""
        found = self._contexts.get(roots)
        if found is not None:
            return found
        if self._wide is None or not _covers(self._wide, roots):
            return view
        wide = self.view(self._wide)
        if wide.context is not None:
            return wide
        weight = wide.weight()
        return wide if 0 <= CONVERT_STEPS * weight <= (self.budget - self.spent) // 2 else view

    def settle(self, seconds: float) -> None:
        """Charge the check admitted by :meth:`charge` the time it took, in place of its estimate (at least a step)."""
        self.spent += max(1, int(seconds / STEP_SECONDS)) - self._reserved
        self._reserved = 0

    def isolated(self, source: str, roots: Roots = WHOLE) -> Any:
        """Evaluate ``source`` in a worker process, within what is left of the decision's time for that."""
        from . import celprocess

        if self.isolated_left <= 0:
            raise CelBudgetError(
                f"over the budget of {self.budget:,} steps per decision, and the {ISOLATED_SECONDS:g} s for"
                f" checks evaluated apart are spent; not evaluated: {_short(source)}"
            )
        started = time.perf_counter()
        try:
            return celprocess.evaluate(source, self.view(roots).variables, self.isolated_left, self._apart_cost)
        except celprocess.IsolatedTimeout as exc:
            raise CelBudgetError(
                f"over the budget of {self.budget:,} steps per decision, so evaluated apart: {exc} (the limit is"
                f" {ISOLATED_SECONDS:g} s per decision): {_short(source)}"
            ) from None
        except celprocess.IsolatedBusy as exc:
            raise CelBudgetError(
                f"over the budget of {self.budget:,} steps per decision, and {exc}: {_short(source)}"
            ) from None
        except celprocess.IsolatedError as exc:
            raise CelEvalError(str(exc)) from None
        finally:
            self.isolated_left -= time.perf_counter() - started

    def context(self, roots: Roots = WHOLE) -> Any:
        return self._built(self._contexts.get(roots) or self.view(roots))

    def hoisted_context(self, hoists: frozenset[Hoist]) -> Any:
        """The context of a check rewritten with ``hoists``: the one :meth:`charge` chose for it."""
        return self._built(self._hoisted_contexts.get(hoists) or self._hoisted_set(hoists))

    def _built(self, view: _View) -> Any:
        if view.context is None:
            cel = engine()
            now = self.variables.get("now")
            if isinstance(now, datetime) and now.tzinfo is None:
                raise CelEvalError("now must be a timezone-aware datetime")
            view.context = cel.Context(variables=dict(view.variables), functions=_helpers(now))
        return view.context


def _narrow(variables: Mapping[str, Any], roots: Roots) -> dict[str, Any]:
    """``variables`` with ``args`` and ``facts`` cut to the keys in ``roots`` (a key the call lacks stays absent)."""
    narrowed = dict(variables)
    for name, keys in zip(("args", "facts"), roots, strict=True):
        value = narrowed.get(name)
        if keys is not None and isinstance(value, Mapping):
            narrowed[name] = {key: value[key] for key in keys if key in value}
    return narrowed


def _covers(wide: Roots, roots: Roots) -> bool:
    return all(w is None or (r is not None and r <= w) for w, r in zip(wide, roots, strict=True))


def union_roots(programs: Iterable[CheckProgram]) -> Roots:
    """The keys of ``args`` and of ``facts`` any of ``programs`` reads (``None``: the whole map)."""
    keys: list[frozenset[str] | None] = [frozenset(), frozenset()]
    for program in programs:
        if program._cost is None:  # a plain path: read without the engine
            continue
        for position, found in enumerate(program._roots):
            held = keys[position]
            keys[position] = None if held is None or found is None else held | found
    return keys[0], keys[1]


def union_hoists(programs: Iterable[CheckProgram]) -> frozenset[Hoist]:
    """The hoisted paths of every rewritten check among ``programs``: the variables of their shared context."""
    found: dict[str, list[Hoist]] = {}
    for program in programs:
        hoisted = program._hoisted if program._cost is not None else None
        if hoisted is not None:
            for item in hoisted.hoists:
                found.setdefault(item.name, []).append(item)
    return frozenset(_joined(items) for items in found.values())


def _joined(items: list[Hoist]) -> Hoist:
    """One hoist for the checks that share its path: it keeps what any of them reads."""
    if len(items) == 1:
        return items[0]
    read = [item.need for item in items if item.need is not None]
    return replace(items[0], need=union(read) if len(read) == len(items) else None)  # None: handed whole


def roots_of(tree: Node) -> Roots:
    """The keys of ``args`` and ``facts`` that ``tree`` reads: ``args.x``, ``has(facts.y)``, ``facts["z"]``.

    Any other use of ``args`` or ``facts`` (``args.size()``, ``facts[k]``) reads the whole map.
    """
    keys: dict[str, set[str] | None] = {"args": set(), "facts": set()}

    def walk(node: Node, shadowed: frozenset[str]) -> None:
        if node.kind in ("macro", "bind"):
            if node.kind == "macro":
                target, variable, *bodies = node.children
            else:
                variable, target, *bodies = node.children
            walk(target, shadowed)
            for body in bodies:
                walk(body, shadowed | {variable.name})
            return
        head = node.children[0] if node.children else None
        if head is not None and head.kind == "ident" and head.name in keys and head.name not in shadowed:
            found = keys[head.name]
            key = node.name if node.kind == "select" else _string(node.children[1]) if node.kind == "index" else None
            if key is not None:
                if found is not None:
                    found.add(key)
                for child in node.children[1:]:
                    walk(child, shadowed)
                return
        if node.kind == "ident" and node.name in keys and node.name not in shadowed:
            keys[node.name] = None
        for child in node.children:
            walk(child, shadowed)

    walk(tree, frozenset())
    args, facts = keys["args"], keys["facts"]
    return (None if args is None else frozenset(args), None if facts is None else frozenset(facts))


def _string(node: Node) -> str | None:
    if node.kind != "lit" or node.name[:1] not in ("'", '"'):
        return None
    try:
        value = ast.literal_eval(node.name)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class CheckProgram:
    """A compiled check. Immutable and safe to share between threads."""

    source: str
    _program: Any = field(repr=False, compare=False)
    _facts: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    _path: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    _cost: tuple[Node, Bound] | None = field(default=None, repr=False, compare=False)
    _roots: Roots = field(default=WHOLE, repr=False, compare=False)
    _rewrite: _Rewrite | None = field(default=None, repr=False, compare=False)

    @property
    def _hoisted(self) -> Rewritten | None:
        """The check rewritten to read its paths as variables (:mod:`.celhoist`), compiled; None if it is not."""
        return None if self._rewrite is None else self._rewrite.get()

    def variables(self) -> set[str]:
        """The top-level variables the expression reads (comprehension variables excluded)."""
        bound = set(_BOUND.findall(self.source)) | set(_BIND.findall(self.source))
        if _BIND.search(self.source):
            bound.add("cel")
        return set(self._program.variables()) - bound

    def fact_names(self) -> set[str]:
        """The names X the expression uses as ``facts.X`` or ``facts["X"]``."""
        return set(self._facts)

    def evaluate(self, variables: Mapping[str, Any] | Activation) -> Any:
        """The expression's value; raises :class:`CelEvalError` on any evaluation failure."""
        activation = variables if isinstance(variables, Activation) else Activation(variables)
        if self._path is not None:  # a plain path such as args.order_id: no engine needed
            return self._walk(activation.variables)
        if self._cost is None:
            return self._execute(activation)
        hoisted = self._hoisted
        if hoisted is not None:  # charged by its own estimate over the values it is handed
            if not activation.charge(hoisted.tree, hoisted.bound, self.source, self._roots, hoisted.hoists):
                return activation.isolated(self.source, self._roots)
            started = time.perf_counter()
            try:
                return hoisted.program.execute(activation.hoisted_context(hoisted.hoists))
            except Exception:  # noqa: S110 - the original check, below, decides and names the problem
                pass
            finally:
                activation.settle(time.perf_counter() - started)
        if not activation.charge(*self._cost, self.source, self._roots):
            return activation.isolated(self.source, self._roots)
        started = time.perf_counter()
        try:
            return self._execute(activation)
        finally:
            activation.settle(time.perf_counter() - started)

    def _execute(self, activation: Activation) -> Any:
        try:
            return self._program.execute(activation.context(self._roots))
        except KeyError as exc:
            key = exc.args[0] if exc.args else "?"
            raise CelEvalError(
                f"no such key or field {key!r} in {self.source!r} (test optional fields with has(...))"
            ) from exc
        except (TypeError, ValueError, RuntimeError, ArithmeticError, IndexError) as exc:
            raise CelEvalError(f"{self.source!r}: {exc}") from exc

    def holds(self, variables: Mapping[str, Any] | Activation) -> bool:
        """True only if the expression evaluates to exactly ``true``; a non-bool is an error."""
        result = self.evaluate(variables)
        if not isinstance(result, bool):
            raise CelEvalError(f"check must return a bool, got {type(result).__name__}: {self.source!r}")
        return result

    def _walk(self, variables: Mapping[str, Any]) -> Any:
        assert self._path is not None
        head, *rest = self._path
        if head not in variables:
            raise CelEvalError(f"no such key or field {head!r} in {self.source!r}")
        value = variables[head]
        for key in rest:
            if not isinstance(value, Mapping) or key not in value:
                raise CelEvalError(
                    f"no such key or field {key!r} in {self.source!r} (test optional fields with has(...))"
                )
            value = value[key]
        return value


def evaluate_unbounded(program: CheckProgram, variables: Mapping[str, Any]) -> Any:
    """``program``'s value with no budget: only for :mod:`policyguard.gate.celprocess`'s worker (killed instead)."""
    return program._execute(Activation(variables))


def _short(source: str) -> str:
    return repr(" ".join(source.split())[:120])


def compile_check(expression: str) -> CheckProgram:
    """Compile ``expression``; raises :class:`CelCompileError` with the engine's message."""
    cel = engine()

    if not expression.strip():
        raise CelCompileError("empty CEL expression")
    try:
        program = cel.compile(expression)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise CelCompileError(str(exc)) from exc
    path = _plain_path(expression)
    cost = None
    roots = WHOLE
    rewrite = None
    if path is None:
        try:
            tree = parse(expression)
            cost = (tree, Bound(tree))
        except CostParseError as exc:
            raise CelCompileError(
                f"the cost of this expression cannot be estimated, so it cannot be used: {exc}"
            ) from None
        roots = roots_of(tree)
        rewrite = _Rewrite(expression, tree)
    return CheckProgram(
        source=expression,
        _program=program,
        _facts=_fact_names(expression),
        _path=path,
        _cost=cost,
        _roots=roots,
        _rewrite=rewrite,
    )


class _Rewrite:
    """A check's hoisted form, made on first use: rewriting and compiling cost ~0.3 ms a check, which a command
    that loads a checklist to decide one call (a hook, ``verify``) should pay only for the tool it decides.

    Two threads may both make it; each makes the same, and either result is kept.
    """

    __slots__ = ("_source", "_tree", "_made")

    def __init__(self, source: str, tree: Node) -> None:
        self._source = source
        self._tree = tree
        self._made: tuple[Rewritten | None] | None = None

    def get(self) -> Rewritten | None:
        made = self._made
        if made is None:
            made = self._made = (self._make(),)
        return made[0]

    def _make(self) -> Rewritten | None:
        rewritten = hoist(self._source, self._tree)
        if rewritten is None:
            return None
        text, hoists = rewritten
        try:
            program = engine().compile(text)
            tree = parse(text)
        except (ValueError, RuntimeError, TypeError):  # CostParseError is a ValueError
            return None
        read = needs(tree, [item.name for item in hoists if not item.has])
        hoists = frozenset(replace(item, need=read.get(item.name)) for item in hoists)
        return Rewritten(program, hoists, tree, Bound(tree))


def _fact_names(source: str) -> frozenset[str]:
    names = set(_FACT_DOT.findall(source))
    for double, single in _FACT_INDEX.findall(source):
        names.add(double or single)
    return frozenset(names)


def _plain_path(source: str) -> tuple[str, ...] | None:
    """``("args", "order_id")`` for a bare path expression, else None (the engine evaluates it)."""
    match = _PATH.match(source)
    if match is None:
        return None
    rest = [part.strip() for part in match.group(2).split(".") if part.strip()]
    return (match.group(1), *rest)


def parse_timestamp(text: str, default_tz: tzinfo | None) -> datetime:
    """Parse an ISO-8601 string; a naive one takes ``default_tz`` (error when there is none)."""
    if not isinstance(text, str):
        raise ValueError(f"ts() expects a string, got {type(text).__name__}")
    text = text.strip()
    if text.endswith(("Z", "z")):  # Python 3.10's fromisoformat has no "Z"
        text = text[:-1] + "+00:00"
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        if default_tz is None:
            raise ValueError(f"timestamp {text!r} has no offset and now has no timezone")
        value = value.replace(tzinfo=default_tz)
    return value


def _helpers(now: Any) -> dict[str, Callable[..., Any]]:
    default_tz = now.tzinfo if isinstance(now, datetime) else None

    def ts(text: str) -> datetime:
        return parse_timestamp(text, default_tz)

    def sum_of(values: list[Any]) -> int | float:
        if not isinstance(values, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        ):
            raise ValueError("sum_of() expects a list of numbers")
        return sum(values)

    return {"ts": ts, "sum_of": sum_of}
