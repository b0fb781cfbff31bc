"""CEL checks: compile once, evaluate per call, and never guess on missing data."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest

from policyguard.gate.cel import CelCompileError, CelEvalError, compile_check

EASTERN = timezone(timedelta(hours=-5))
NOW = datetime(2024, 5, 15, 15, 0, tzinfo=EASTERN)


def variables(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "args": {"order_id": "O1", "amount": 50},
        "facts": {"order": {"captured": 120.0, "user_id": "alice"}},
        "principal": "alice",
        "now": NOW,
    }
    base.update(overrides)
    return base


def test_a_realistic_check_holds_and_compares_json_ints_with_doubles() -> None:
    program = compile_check(
        "args.amount <= facts.order.captured && facts.order.user_id == principal && args.amount <= 500"
    )
    assert program.holds(variables()) is True
    assert program.holds(variables(args={"order_id": "O1", "amount": 121})) is False


def test_syntax_error_raises_compile_error_with_the_engines_position() -> None:
    with pytest.raises(CelCompileError, match=r"1:16"):
        compile_check("args.amount <= ")


def test_empty_expression_does_not_compile() -> None:
    with pytest.raises(CelCompileError):
        compile_check("   ")


def test_missing_key_is_an_error_not_false() -> None:
    program = compile_check("args.currency == 'USD'")
    with pytest.raises(CelEvalError, match="currency"):
        program.holds(variables())


def test_missing_key_is_an_error_not_true_under_negation() -> None:
    program = compile_check("!(args.currency != 'USD')")
    with pytest.raises(CelEvalError):
        program.holds(variables())


def test_has_makes_optional_fields_explicit() -> None:
    program = compile_check("!has(args.currency) || args.currency == 'USD'")
    assert program.holds(variables()) is True
    assert program.holds(variables(args={"currency": "EUR"})) is False


def test_type_error_is_an_eval_error() -> None:
    with pytest.raises(CelEvalError):
        compile_check("args.amount + 'x' == 'y'").holds(variables())


@pytest.mark.parametrize("expression", ["args.amount", "'true'", "null", "[true]"])
def test_holds_rejects_non_bool_results(expression: str) -> None:
    with pytest.raises(CelEvalError, match="check must return a bool"):
        compile_check(expression).holds(variables())


def test_evaluate_returns_non_bool_values() -> None:
    assert compile_check("args.amount * 2").evaluate(variables()) == 100


def test_naive_timestamp_is_read_in_the_timezone_of_now() -> None:
    # 15:00 without offset is 15:00 Eastern (= now), not 15:00 UTC (5 hours earlier).
    assert compile_check("ts('2024-05-15T15:00:00') == now").holds(variables()) is True
    assert compile_check("now - ts('2024-05-14T15:00:00') == duration('24h')").holds(variables()) is True
    assert compile_check("ts('2024-05-15T15:00:00Z') < now").holds(variables()) is True
    assert compile_check("ts('2024-05-15') == now - duration('15h')").holds(variables()) is True


def test_timestamp_with_offset_keeps_its_offset() -> None:
    assert compile_check("ts('2024-05-15T20:00:00+00:00') == now").holds(variables()) is True


def test_bad_timestamp_string_is_an_eval_error() -> None:
    with pytest.raises(CelEvalError):
        compile_check("ts('yesterday') < now").holds(variables())


def test_naive_now_is_refused() -> None:
    with pytest.raises(CelEvalError, match="timezone-aware"):
        compile_check("true").holds(variables(now=datetime(2024, 5, 15)))


def test_sum_of_adds_numbers_and_rejects_anything_else() -> None:
    assert compile_check("sum_of([1, 2.5, 3]) == 6.5").holds(variables()) is True
    with pytest.raises(CelEvalError):
        compile_check("sum_of(['a']) == 1").holds(variables())


def test_unknown_function_is_an_eval_error() -> None:
    with pytest.raises(CelEvalError):
        compile_check("lookup(args.order_id)").holds(variables())


def test_variables_and_fact_names_are_what_the_source_references() -> None:
    program = compile_check(
        "args.items.all(i, i.price <= facts.order.captured) && facts['user'].tier == 'gold' && principal != null"
    )
    assert program.variables() == {"args", "facts", "principal"}
    assert program.fact_names() == {"order", "user"}
    assert compile_check("args.facts.x == 1").fact_names() == set()


def test_a_compiled_program_is_shared_safely_between_threads() -> None:
    program = compile_check("args.amount <= facts.order.captured")

    def run(amount: int) -> bool:
        return program.holds(variables(args={"amount": amount}))

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, range(0, 240)))
    assert results == [amount <= 120 for amount in range(0, 240)]
