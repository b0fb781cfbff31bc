"""A JSON object that names a key twice is refused by every reader, with one line naming the key.

``{"reservation_id": "AIXC49", "reservation_id": "NO6JO3"}``: Python keeps the
last value, another language's executor may run the first, so the gate could
judge one reservation while another is cancelled. Every file, message, body and
token PolicyGuard reads goes through :mod:`policyguard.trajectory.strictjson`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policyguard.cli import main
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.strictjson import DuplicateKeyError, loads

TWICE = '{"reservation_id": "AIXC49", "reservation_id": "NO6JO3"}'
POLICY = "Cancel only the user's own reservations.\n"
CHECKLIST = f"""\
policy: {{name: airline, version: "{policy_version(POLICY)}"}}
tools:
  get_reservation: {{mutating: false}}
  cancel_reservation:
    requirements:
      - id: own
        text: Only the user's own reservation may be cancelled.
        kind: procedural
        source: Cancel only the user's own reservations.
"""
CALL = {"id": "c1", "type": "function", "function": {"name": "cancel_reservation", "arguments": TWICE}}
DIALOGUE = [{"role": "user", "content": "Cancel AIXC49."}]


def _verify(tmp_path: Path, *, call: str, dialogue: str, model: str = "none") -> list[str]:
    files = {"policy.md": POLICY, "checklist.yaml": CHECKLIST, "call.json": call, "dialogue.json": dialogue}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = ["verify", "--policy", str(tmp_path / "policy.md"), "--checklist", str(tmp_path / "checklist.yaml")]
    argv += ["--trajectory", str(tmp_path / "dialogue.json"), "--call", str(tmp_path / "call.json"), "--model", model]
    argv += ["--format", "openai_chat"]
    return [str(main(argv))]


def verify_call_arguments(tmp_path: Path) -> tuple[list[str], str]:
    """The pending call's arguments string (an OpenAI tool call) names the reservation twice."""
    return _verify(tmp_path, call=json.dumps(CALL), dialogue=json.dumps(DIALOGUE)), "call.json"


def verify_call_file(tmp_path: Path) -> tuple[list[str], str]:
    """The call file itself names the tool twice."""
    call = '{"id": "c1", "name": "get_reservation", "name": "cancel_reservation", "arguments": {}}'
    return _verify(tmp_path, call=call, dialogue=json.dumps(DIALOGUE)), "call.json"


def verify_dialogue_file(tmp_path: Path) -> tuple[list[str], str]:
    """A message of the dialogue says two different things."""
    dialogue = '[{"role": "user", "content": "Cancel AIXC49.", "content": "Cancel NO6JO3."}]'
    call = json.dumps({**CALL, "function": {**CALL["function"], "arguments": '{"reservation_id": "AIXC49"}'}})
    return _verify(tmp_path, call=call, dialogue=dialogue), "dialogue.json"


def verify_dialogue_call_arguments(tmp_path: Path) -> tuple[list[str], str]:
    """An earlier call in the dialogue names the reservation twice."""
    earlier = {"id": "r1", "type": "function", "function": {"name": "get_reservation", "arguments": TWICE}}
    dialogue = json.dumps([*DIALOGUE, {"role": "assistant", "content": None, "tool_calls": [earlier]}])
    call = json.dumps({**CALL, "function": {**CALL["function"], "arguments": '{"reservation_id": "AIXC49"}'}})
    return _verify(tmp_path, call=call, dialogue=dialogue), "dialogue.json"


def scripted_model_file(tmp_path: Path) -> tuple[list[str], str]:
    """A recorded verifier answer names the verdict twice."""
    (tmp_path / "model.json").write_text('[{"response": {"verdict": "BLOCK", "verdict": "PASS"}}]')
    call = json.dumps({**CALL, "function": {**CALL["function"], "arguments": '{"reservation_id": "AIXC49"}'}})
    return _verify(tmp_path, call=call, dialogue=json.dumps(DIALOGUE), model=f"scripted:{tmp_path / 'model.json'}"), (
        "model.json"
    )


def audit_trace_file(tmp_path: Path) -> tuple[list[str], str]:
    record = '{"v": "policyguard.trace/1", "event": "x-note", "t": 1, "ts": 1.0, "t": 2}'
    (tmp_path / "run.jsonl").write_text(record + "\n")
    return [str(main(["audit", str(tmp_path / "run.jsonl")]))], "run.jsonl:1"


def validate_tools_file(tmp_path: Path) -> tuple[list[str], str]:
    (tmp_path / "checklist.yaml").write_text(CHECKLIST)
    (tmp_path / "tools.json").write_text('[{"name": "get_reservation", "name": "cancel_reservation"}]')
    return [str(main(["checklist", "validate", str(tmp_path / "checklist.yaml"), "--tools",
                      str(tmp_path / "tools.json")]))], "tools.json"  # fmt: skip


def _raises(call: Callable[[], Any]) -> list[str]:
    try:
        call()
    except Exception as exc:  # the message is what the user sees
        return ["raised", str(exc)]
    return ["returned"]


def read_trace_file(tmp_path: Path) -> tuple[list[str], str]:
    from policyguard.audit.trace import read_trace

    (tmp_path / "run.jsonl").write_text('{"event": "decision", "event": "allow"}\n')
    return _raises(lambda: read_trace(tmp_path / "run.jsonl")), "run.jsonl:1"


def labels_file(tmp_path: Path) -> tuple[list[str], str]:
    from policyguard.bench.tau2.labels import load_labels

    (tmp_path / "labels.json").write_text('{"domain": "airline", "domain": "retail"}')
    return _raises(lambda: load_labels(tmp_path / "labels.json")), "labels.json"


def serve_body(tmp_path: Path) -> tuple[list[str], str]:
    from policyguard.serve.body import parse_json

    return _raises(lambda: parse_json(TWICE.encode())), "body"


def grant_token(tmp_path: Path) -> tuple[list[str], str]:
    from policyguard.enforcement.jws import decode

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(b'{"alg": "EdDSA", "typ": "JWT"}')
    token = f"{header}.{b64(TWICE.encode())}.{b64(bytes(64))}"
    return _raises(lambda: decode(token, lambda signature, data: True)), "payload"


def tool_result_text(tmp_path: Path) -> tuple[list[str], str]:
    """A tool result read as a fact: it is not a fact, and the reason names the key."""
    from policyguard.trajectory.messages import parse_result_text

    value, problem = parse_result_text(TWICE)
    return ["refused" if value is None else "read", problem or ""], "not JSON"


READERS = [
    verify_call_arguments,
    verify_call_file,
    verify_dialogue_file,
    verify_dialogue_call_arguments,
    scripted_model_file,
    audit_trace_file,
    validate_tools_file,
    read_trace_file,
    labels_file,
    serve_body,
    grant_token,
    tool_result_text,
]


@pytest.mark.parametrize("reader", READERS, ids=[r.__name__ for r in READERS])
def test_every_reader_refuses_a_key_named_twice_in_one_line_naming_key_and_where(
    reader: Callable[[Path], tuple[list[str], str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome, where = reader(tmp_path)
    err = capsys.readouterr().err
    if outcome[0] in ("raised", "refused"):
        message = outcome[1]
    else:
        assert outcome == ["2"], f"{outcome}, expected a refusal (exit 2, an exception, no value): {err}"
        assert err.count("\n") == 1, err
        message = err
    assert "appears twice" in message and where in message, message
    assert any(
        f"'{key}'" in message for key in ("reservation_id", "name", "content", "verdict", "t", "event", "domain")
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


@given(json_values)
def test_json_without_repeated_keys_reads_as_the_standard_library_reads_it(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text) == json.loads(text)


@given(st.text(max_size=4), json_values, json_values, st.lists(st.sampled_from(["list", "object"]), max_size=4))
def test_a_repeated_key_at_any_depth_is_refused_naming_it(
    key: str, first: Any, second: Any, wrapping: list[str]
) -> None:
    text = "{" + f"{json.dumps(key)}: {json.dumps(first)}, {json.dumps(key)}: {json.dumps(second)}" + "}"
    for kind in wrapping:
        text = f"[{text}]" if kind == "list" else '{"wrapper": ' + text + "}"
    with pytest.raises(DuplicateKeyError) as info:
        loads(text)
    assert info.value.key == key and repr(key) in str(info.value)
