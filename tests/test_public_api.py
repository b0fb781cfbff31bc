"""What users import: pinned, so a change to the surface is a deliberate one."""

from __future__ import annotations

import subprocess
import sys

import policyguard

EXPECTED = {
    "CheckContext", "Checklist", "ChecklistError", "ConfigError", "Decision", "FormatError", "Gate", "Guard",
    "GuardedTools", "Message", "Model", "ModelError", "ModelRequest", "ModelResponse", "PolicyGuardError",
    "Requirement", "RequirementResult", "ScriptedModel", "ScriptedModelError", "TemplateError", "ToolCall",
    "ToolOutcome", "ToolResult", "ToolSpec", "Trace", "Trajectory", "Usage", "Verifier", "__version__",
    "after_block", "load_checklist", "parse_checklist", "read_trace", "remediation_message", "resolve_model",
    "HardGate", "StateResolver", "LLMVerifier", "GrantIssuer", "GrantVerifier", "GrantError", "generate_keypair",
    "GuardedExecutor", "SQLiteStore", "LedgerUnavailable", "validate_checklist", "to_trajectory", "from_trajectory",
    "Session", "SessionStore", "MemorySessionStore",
}  # fmt: skip


def test_public_names_are_pinned() -> None:
    assert set(policyguard.__all__) == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in policyguard.__all__:
        assert getattr(policyguard, name) is not None


def test_errors_share_one_root() -> None:
    for name in ("ChecklistError", "ConfigError", "FormatError", "ModelError", "ScriptedModelError", "TemplateError"):
        assert issubclass(getattr(policyguard, name), policyguard.PolicyGuardError)


def test_import_loads_no_llm_sdk() -> None:
    code = (
        "import sys, policyguard; from policyguard import Guard, GuardedTools, load_checklist, ScriptedModel; "
        "print(','.join(m for m in ('litellm', 'openai', 'anthropic', 'tau2', 'jwt') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
