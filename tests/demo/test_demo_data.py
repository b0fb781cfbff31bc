"""The demo's tau2 parts are tau2's own: records from db.json, tool results from tau2's tools, real task ids."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("tau2")

pytestmark = pytest.mark.tau2

HERE = Path(__file__).resolve().parent


def _source():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("demo_tau2_source", HERE / "tau2_source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_records_and_tool_results_are_what_tau2_returns() -> None:
    source = _source()
    shipped = json.loads(source.DATA.read_text(encoding="utf-8"))
    assert source.rebuilt(shipped) == shipped, "run: python tests/demo/tau2_source.py"


def test_each_conversation_acts_on_a_reservation_of_its_cited_tau2_task() -> None:
    from policyguard.bench.tau2.domain import DomainData

    domain = DomainData.load("airline")
    shipped = json.loads(_source().DATA.read_text(encoding="utf-8"))
    for conversation in shipped["conversations"]:
        task = domain.task(conversation["task_id"])
        [call] = conversation["messages"][-1]["tool_calls"]
        task_text = task.model_dump_json()
        assert call["arguments"]["reservation_id"] in task_text, conversation["name"]
        user = conversation["messages"][1]["tool_calls"][0]["arguments"]["user_id"]
        assert user in task_text, conversation["name"]
