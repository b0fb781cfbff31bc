"""A hoisted value reaches the engine cut to what its checks can observe of it, and nothing they can observe.

The engine converts every value it is handed, at about a microsecond a string, map or list, so the gate hands
each rewritten check (:mod:`policyguard.gate.celhoist`) its values cut to the parts it reads
(:mod:`policyguard.gate.celproject`). What may be cut: a map's keys no check names, iterates or indexes by a
computed key; a value no check reads at all (it becomes null). What must stay: anything compared, passed to a
function, put in a list or tested with ``in``; every key of a map that is iterated, sized or indexed by a
computed key; every item of a list, so its size and order are the same. That rewritten checks decide as
written over any values is held by the generated checks of ``test_cel_hoist.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.gate.cel import Activation, compile_check, union_hoists
from policyguard.gate.celcost import WALK_LIMIT, parse
from policyguard.gate.celhoist import MISSING
from policyguard.gate.celproject import Budget, TooLarge, needs, project

FLIGHTS = [
    {"number": "HAT001", "date": "2024-05-01", "origin": "SFO", "price": 120},
    {"number": "HAT002", "date": "2024-05-02", "origin": "JFK", "price": 340},
]


def handed(source: str, variables: dict[str, Any]) -> dict[str, Any]:
    """What the engine is handed for each of the check's hoisted paths, by path."""
    program = compile_check(source)
    hoisted = program._hoisted
    assert hoisted is not None
    values = Activation(variables)._hoisted_set(hoisted.hoists).variables
    return {".".join((h.root, *h.path)): values.get(h.name, MISSING) for h in hoisted.hoists if not h.has}


def test_items_keep_only_the_fields_the_check_reads() -> None:
    source = 'facts.r.flights.exists(f, f.number == args.n && f.date == "2024-05-02")'
    got = handed(source, {"args": {"n": "HAT002"}, "facts": {"r": {"flights": FLIGHTS}}})
    assert got["facts.r.flights"] == [
        {"number": "HAT001", "date": "2024-05-01"},
        {"number": "HAT002", "date": "2024-05-02"},
    ]
    assert got["args.n"] == "HAT002"


def test_a_map_iterated_sized_or_read_by_a_computed_key_keeps_every_key() -> None:
    methods = {"gift_1": {"source": "gift_card", "balance": 10}, "card_2": {"source": "credit_card", "brand": "visa"}}
    facts = {"user": {"methods": methods, "name": "x"}}
    by_key = handed(
        'args.p in facts.user.methods && facts.user.methods[args.p].source == "gift_card"',
        {"args": {"p": "gift_1"}, "facts": facts},
    )
    assert by_key["facts.user.methods"] == {"gift_1": {"source": "gift_card"}, "card_2": {"source": "credit_card"}}
    iterated = handed("facts.user.methods.exists(k, k.startsWith('gift'))", {"facts": facts})
    assert iterated["facts.user.methods"] == {"gift_1": None, "card_2": None}  # keys read, values never
    sized = handed("facts.user.methods.size() == 2", {"facts": facts})
    assert sized["facts.user.methods"] == {"gift_1": None, "card_2": None}


def test_a_list_keeps_its_length_and_order() -> None:
    got = handed("facts.l.size() == 3 && facts.l[1].a == 2", {"facts": {"l": [{"a": 1, "b": 0}, {"a": 2}, {"b": 3}]}})
    assert got["facts.l"] == [{"a": 1}, {"a": 2}, {}]


@pytest.mark.parametrize(
    "source",
    [
        'facts.r.flights[0] == {"number": "HAT001"}',  # compared
        "facts.r.flights.exists(f, f in args.wanted)",  # an item compared by in
        "args.f in facts.r.flights",  # in over a list compares its items whole
        "facts.r.flights.exists(f, string(f) != '')",  # passed to a function
        "[facts.r.flights[0]] == args.wanted",  # put in a list
        "facts.r.flights.filter(f, f.price > 200) == args.wanted",  # filter's items are the target's
        "facts.r.flights.map(f, f).size() == 2 && facts.r.flights.map(f, f)[0] == args.f",
    ],
)
def test_a_value_used_whole_is_handed_whole(source: str) -> None:
    got = handed(source, {"args": {"wanted": [], "f": {}}, "facts": {"r": {"flights": FLIGHTS}}})
    assert got["facts.r.flights"] == FLIGHTS


def test_a_value_only_tested_for_presence_becomes_null_and_its_key_stays() -> None:
    got = handed("has(facts.r.flights) && has(facts.r.user)", {"facts": {"r": {"flights": FLIGHTS, "user": "u"}}})
    assert got["facts.r"] == {"flights": None, "user": None}


def test_a_test_for_null_or_of_the_type_keeps_the_kind_of_the_value() -> None:
    got = handed(
        "facts.r.flights != null && type(facts.r.user) == type({})",
        {"facts": {"r": {"flights": FLIGHTS, "user": {"id": "u", "name": "n"}}}},
    )
    assert got["facts.r.flights"] == [] and got["facts.r.user"] == {}


def test_what_is_read_through_a_branch_or_a_list_literal_is_kept_in_each_value_it_can_be() -> None:
    source = "(has(args.c) ? facts.a : facts.b).x == 1 && [facts.a, facts.b].all(v, v.y == 2)"
    got = handed(source, {"args": {}, "facts": {"a": {"x": 1, "y": 2, "z": 3}, "b": {"x": 0, "y": 2, "z": 3}}})
    assert got["facts.a"] == {"x": 1, "y": 2} and got["facts.b"] == {"x": 0, "y": 2}


def test_checks_sharing_a_path_each_find_what_they_read_in_the_decisions_context() -> None:
    first = compile_check("facts.r.flights.all(f, f.price > 0)")
    second = compile_check("facts.r.flights.exists(f, f.number == 'HAT002')")
    variables = {"facts": {"r": {"flights": FLIGHTS}}}
    shared = Activation(variables, hoists=union_hoists([first, second]))
    assert first.holds(shared) and second.holds(shared)
    (joined,) = union_hoists([first, second])
    assert project(FLIGHTS, joined.need, Budget(WALK_LIMIT)) == [  # type: ignore[arg-type]
        {"price": 120, "number": "HAT001"},
        {"price": 340, "number": "HAT002"},
    ]


def test_a_value_too_large_to_cut_is_handed_whole() -> None:
    tree = parse("_pgv_x.all(i, i.a > 0)")
    need = needs(tree, ["_pgv_x"])["_pgv_x"]
    with pytest.raises(TooLarge):
        project([{"a": 1, "b": 2}] * 10, need, Budget(5))
    big = [{"a": 1, "b": 2}] * (WALK_LIMIT + 1)
    assert handed("facts.x.all(i, i.a > 0)", {"facts": {"x": big}})["facts.x"] is big


def test_a_key_with_an_escape_is_read_as_a_computed_key() -> None:
    """Python's reading of a CEL escape may name another key than the engine's: every key stays."""
    got = handed(r'[facts.m.n][0]["k\x41"] == 1', {"facts": {"m": {"n": {"kA": 1, "other": 2}}}})
    assert got["facts.m.n"] == {"kA": 1, "other": 2}


def test_the_cuts_of_one_call_walk_at_most_the_walk_limit_together() -> None:
    """Each value's cut is bounded, and so are all of a call's together: once spent, values are handed whole
    (and then found too large to evaluate here, by the walk that bounds them)."""
    half = [{"x": 1, "y": 2}] * (WALK_LIMIT // 6 + 10)  # a list and its maps: just over half the limit
    got = handed("facts.a.all(i, i.x > 0) && facts.b.all(i, i.x > 0)", {"facts": {"a": half, "b": list(half)}})
    assert sum(value is not half and value != list(half) for value in got.values()) == 1


def test_two_checks_that_read_one_path_differently_each_get_their_own_cut_without_a_decisions_paths() -> None:
    """Found in review: the values were kept by name only, so on an activation given no decision-wide paths
    the second check got the first one's cut (one key of two, and a size of 1)."""
    presence, size = compile_check("has(facts.r.x.a)"), compile_check("facts.r.x.size() == 2")
    activation = Activation({"facts": {"r": {"x": {"a": 1, "b": 2}}}})
    assert presence.holds(activation) and size.holds(activation)
