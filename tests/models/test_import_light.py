"""`import policyguard` stays light: no provider SDK until a backend is used."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("litellm", "openai", "anthropic", "mcp", "mcp_types")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_import_policyguard_loads_no_provider_sdk() -> None:
    assert _loaded_after("import policyguard") == []


def test_importing_the_verifier_and_backend_modules_loads_no_sdk() -> None:
    code = (
        "import policyguard.verifier.llm, policyguard.verifier.verdict, policyguard.verifier.prompts\n"
        "import policyguard.verifier.models.litellm_backend, policyguard.verifier.models.openai_backend\n"
        "import policyguard.verifier.models.anthropic_backend, policyguard.verifier.models.pricing\n"
        "from policyguard.verifier.models.litellm_backend import LiteLLMModel\n"
        "from policyguard.verifier.models.openai_backend import OpenAIModel\n"
        "from policyguard.verifier.models.anthropic_backend import AnthropicModel\n"
        "LiteLLMModel('openai/gpt-4o-mini'); OpenAIModel('gpt-4o-mini'); AnthropicModel('claude-sonnet-4-5')"
    )
    assert _loaded_after(code) == []


def test_the_command_line_loads_no_integration_sdk_until_a_command_runs() -> None:
    """``policyguard --help`` builds every parser, mcp-proxy's included, without the MCP SDK."""
    assert _loaded_after("from policyguard.cli import build_parser\nbuild_parser()") == []
