"""Property-based tests of the audit parser: event soup never crashes it, and never audits clean when it should not."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.audit.inv1 import INV1_KINDS, AuditReport, TraceFormatError, audit_file, audit_records

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
V1 = "sha256:" + "1" * 64

NEAR_MISSES = [
    "Execute",
    "execute ",
    " effect",
    "EFFECT",
    "exécute",
    "allow\u200b",
    "ａｌｌｏｗ",
    "executed",
    "revoke\n",
]
OTHER_KINDS = ["decision", "executor_refused", "x-note"]
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)
kinds = st.one_of(st.sampled_from([*INV1_KINDS, *NEAR_MISSES, *OTHER_KINDS]), junk)
ids = st.one_of(st.sampled_from(["c1", "c2"]), junk)
tools = st.one_of(st.sampled_from(["refund", "delete"]), junk)
hashes = st.one_of(st.sampled_from(["a" * 64, "b" * 64]), junk)
clock = st.one_of(st.integers(min_value=-3, max_value=40), junk)
times = st.one_of(st.floats(min_value=0, max_value=4e9), junk)

MISSING = object()


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that may be absent from the record."""
    return st.one_of(st.just(MISSING), strategy)


soup_record = st.fixed_dictionaries(
    {
        "event": maybe(kinds),
        "t": maybe(clock),
        "ts": maybe(times),
        "v": maybe(st.sampled_from(["policyguard.trace/1", "policyguard.trace/2", 1])),
        "call_id": maybe(ids),
        "tool": maybe(tools),
        "args_sha256": maybe(hashes),
        "policy_version": maybe(st.sampled_from([V1, "sha256:" + "2" * 64])),
        "expires_at": maybe(times),
        "idempotency_key": maybe(st.one_of(st.sampled_from(["k1", "k2"]), junk)),
    }
).map(lambda r: {k: v for k, v in r.items() if v is not MISSING})


@st.composite
def soups(draw: st.DrawFn) -> list[Any]:
    """Records in random order with random clocks, some duplicated, some not even objects."""
    records: list[Any] = draw(st.lists(st.one_of(soup_record, junk), max_size=12))
    if records and draw(st.booleans()):
        index = draw(st.integers(min_value=0, max_value=len(records) - 1))
        records.insert(draw(st.integers(min_value=0, max_value=len(records))), records[index])
    return records


def outcome(run: Any) -> AuditReport | str:
    """The audit's result: a report, or the one-line error. Any other exception fails the test."""
    try:
        return run()  # type: ignore[no-any-return]
    except TraceFormatError as exc:
        message = str(exc)
        assert message and "\n" not in message
        return message


@SETTINGS
@given(soups())
def test_event_soup_in_memory_gives_findings_or_a_one_line_error(records: list[Any]) -> None:
    result = outcome(lambda: audit_records(records))
    if isinstance(result, AuditReport):
        assert result.records == len(records) > 0
        assert all(v.kind and v.line >= 1 for v in result.violations)


@SETTINGS
@given(soups(), st.lists(st.sampled_from(["{not json", "[1, 2]", '"text"', "", "NaN", "{" * 3000]), max_size=2))
def test_event_soup_in_a_file_gives_findings_or_a_one_line_error(records: list[Any], garbage: list[str]) -> None:
    lines = [json.dumps(r, default=str) for r in records] + garbage
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "soup.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        outcome(lambda: audit_file(path))


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_reader(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bytes.jsonl"
        path.write_bytes(data)
        outcome(lambda: audit_file(path))


# -- well-formed traces: an effect without an allow before it is never clean ---------

steps = st.lists(
    st.tuples(
        st.sampled_from(INV1_KINDS),
        st.sampled_from(["c1", "c2", "c3"]),
        st.sampled_from(["refund", "delete"]),
        st.sampled_from(["a" * 64, "b" * 64]),
        st.sampled_from([None, "k1", "k2"]),
    ),
    min_size=1,
    max_size=14,
)


def build(trace_steps: list[tuple[str, str, str, str, str | None]]) -> list[dict[str, Any]]:
    records = []
    for t, (kind, call_id, tool, sha, key) in enumerate(trace_steps, start=1):
        record: dict[str, Any] = {"v": "policyguard.trace/1", "event": kind, "t": t, "ts": 1_800_000_000.0 + t}
        if kind == "revoke":
            record["policy_version"] = V1
            if key is not None:
                record["call_id"] = call_id
        else:
            record.update(call_id=call_id, tool=tool, args_sha256=sha)
        if kind == "allow":
            record.update(policy_version=V1, expires_at=1_900_000_000.0)
        if kind == "effect" and key is not None:
            record["idempotency_key"] = key
        records.append(record)
    return records


def unauthorised_effect(records: list[dict[str, Any]]) -> bool:
    """Some effect has no allow for its call_id, tool and args_sha256 anywhere before it."""
    allowed: set[tuple[str, str, str]] = set()
    for r in records:
        ids = (r.get("call_id"), r.get("tool"), r.get("args_sha256"))
        if r["event"] == "allow":
            allowed.add(ids)  # type: ignore[arg-type]
        elif r["event"] == "effect" and ids not in allowed:
            return True
    return False


@SETTINGS
@given(steps)
def test_a_trace_with_an_effect_that_no_allow_preceded_is_never_clean(trace_steps: list[Any]) -> None:
    records = build(trace_steps)
    report = audit_records(records)  # well formed: must not raise
    if unauthorised_effect(records):
        assert not report.ok, records


@SETTINGS
@given(steps)
def test_effects_and_executes_are_counted_and_every_execute_judged(trace_steps: list[Any]) -> None:
    records = build(trace_steps)
    report = audit_records(records)
    assert report.executes == sum(r["event"] == "execute" for r in records)
    assert report.effects == sum(r["event"] == "effect" for r in records)
    assert report.events == len(records)
    effects_seen = sum(r["event"] == "effect" for r in records)
    executes_seen = sum(r["event"] == "execute" for r in records)
    if effects_seen > executes_seen:  # more effects than executes: some effect is unexplained
        assert not report.ok
