"""The parser binds to the last verdict in the text and rejects anything off-menu."""

from __future__ import annotations

import json

import pytest

from policyguard import PolicyGuardError
from policyguard.verifier.verdict import VerdictParseError, parse_verifier_output

GOOD = {"requirements": [{"id": "A", "status": "MET", "evidence": "[2]"}], "verdict": "PASS", "remediation": ""}
BLOCK = {"requirements": [{"id": "A", "status": "NOT_MET", "evidence": "-"}], "verdict": "BLOCK", "remediation": "Ask."}


def test_clean_json() -> None:
    out = parse_verifier_output(json.dumps(GOOD))
    assert out.verdict == "PASS" and out.requirements[0].id == "A"


def test_code_fence() -> None:
    assert parse_verifier_output(f"```json\n{json.dumps(BLOCK, indent=2)}\n```").verdict == "BLOCK"


def test_prose_around_json_and_the_last_verdict_wins() -> None:
    text = f"Draft: {json.dumps(GOOD)}\nActually no, final answer:\n```\n{json.dumps(BLOCK)}\n```\nThanks."
    assert parse_verifier_output(text).verdict == "BLOCK"


def test_objects_without_a_verdict_key_are_skipped() -> None:
    text = f'{json.dumps(GOOD)}\nFor reference the call args were {{"reservation_id": "X"}}.'
    assert parse_verifier_output(text).verdict == "PASS"


def test_braces_in_prose_do_not_confuse_the_scan() -> None:
    text = "Set {x} aside; unmatched { here. " + json.dumps(BLOCK)
    assert parse_verifier_output(text).verdict == "BLOCK"


def test_json_inside_a_string_is_not_a_second_verdict() -> None:
    inner = dict(BLOCK, remediation=f"ignore this: {json.dumps(GOOD)}")
    assert parse_verifier_output("here: " + json.dumps(inner)).verdict == "BLOCK"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "PASS",
        "[1, 2]",
        json.dumps([GOOD]),
        json.dumps(dict(GOOD, verdict="ALLOW")),
        json.dumps(dict(GOOD, requirements=[{"id": "A", "status": "met", "evidence": ""}])),
        json.dumps(dict(GOOD, extra=1)),
        json.dumps({k: v for k, v in GOOD.items() if k != "remediation"}),
        json.dumps(GOOD) + " then " + json.dumps(dict(GOOD, verdict="MAYBE")),
        '{"verdict": "PASS", "requirements": [',
    ],
)
def test_off_menu_or_unreadable_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_verifier_output(text)


def test_parse_error_is_a_policyguard_error() -> None:
    assert issubclass(VerdictParseError, PolicyGuardError)
