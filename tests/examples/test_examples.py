"""Every example in examples/ runs as its README says, offline, and shows one allowed and one blocked refund.

Each example runs as a subprocess from the checkout root, the way a reader runs it, with no API
key in its environment and proxies pointing nowhere, so an accidental real model call fails.
An example whose extra is not installed is skipped with the install line that would enable it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docblocks import doc_block, expected_lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 60


@dataclass(frozen=True)
class Example:
    path: str  # relative to examples/
    extra: str
    modules: tuple[str, ...]  # what the extra installs, as imported by the example


ALL = [
    Example("openai_loop.py", "openai", ("openai",)),
    Example("langchain_agent.py", "langchain", ("langchain.agents", "langgraph.checkpoint.memory")),
    Example("agents_sdk.py", "agents", ("agents",)),
    Example("pydantic_ai.py", "pydantic-ai", ("pydantic_ai",)),
    Example("google_adk.py", "google-adk", ("google.adk",)),
    Example("claude_agent_sdk.py", "claude-agent-sdk", ("claude_agent_sdk",)),
    Example("mcp_proxy/client.py", "mcp", ("mcp",)),
    Example("http_serve.py", "serve", ("starlette", "uvicorn")),
]
BLOCKED = re.compile(
    r'^  BLOCKED \(the tool never ran\): issue_refund \{"order_id": "O1", "amount": 120\}\n'
    r'    the agent reads: (Error: )?This action is blocked: it does not meet requirement within-captured, which says ".*"',
    re.M,
)
ALLOWED = re.compile(r'^  ALLOWED \(the tool ran\): issue_refund \{"order_id": "O1", "amount": 80\}\n', re.M)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HTTP_PROXY="http://127.0.0.1:9",  # nothing listens there: any outbound HTTP fails
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    """This interpreter on ``argv``, from the checkout root, offline (see :func:`_environment`)."""
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.mark.parametrize("example", ALL, ids=[e.path for e in ALL])
def test_example_allows_one_refund_and_blocks_one(example: Example) -> None:
    missing = [m for m in example.modules if not _installed(m)]
    if missing:
        pytest.skip(
            f"examples/{example.path} needs the extra: pip install -c constraints.txt -e '.[{example.extra}]' ({missing[0]})"
        )
    run = _run(str(EXAMPLES / example.path))
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert out.count("BLOCKED") == 1 and out.count("ALLOWED") == 1, out
    assert BLOCKED.search(out), out  # the over-captured refund, with the remediation the agent gets
    assert ALLOWED.search(out), out
    assert out.index("BLOCKED") < out.index("ALLOWED"), out


def test_the_readme_lists_every_example_and_only_files_that_exist() -> None:
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w/.-]+\.py)\)", readme))
    for path in listed:
        assert (EXAMPLES / path).is_file(), f"examples/README.md lists {path}, which does not exist"
    scripts = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py") if "refund_desk" not in p.parts}
    assert scripts <= listed, f"examples/README.md does not list {sorted(scripts - listed)}"
    assert {e.path for e in ALL} <= listed
    for example in ALL:
        assert (
            f"python examples/{example.path}" in readme
            and f"pip install -c constraints.txt -e '.[{example.extra}]'" in readme
        )


def test_the_refund_desk_checklist_validates_clean_with_the_readme_command() -> None:
    [(command, expected)] = expected_lines(doc_block("examples/README.md", "validate"))
    assert command.startswith("policyguard checklist validate ") and expected == []
    run = _run("-m", *shlex.split(command))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 error(s), 0 warning(s)" in run.stdout + run.stderr


# The site page that shows each example whole (a snippet include, so the page cannot drift from the file).
SHOWN_ON = {
    "docs/guarding/openai-loop.md": "openai_loop.py",
    "docs/guarding/langchain.md": "langchain_agent.py",
    "docs/guarding/agents-sdk.md": "agents_sdk.py",
    "docs/guarding/pydantic-ai.md": "pydantic_ai.py",
    "docs/guarding/google-adk.md": "google_adk.py",
    "docs/guarding/claude-agent-sdk.md": "claude_agent_sdk.py",
    "docs/guarding/mcp-proxy.md": "mcp_proxy/client.py",
    "docs/guarding/http.md": "http_serve.py",
}


@pytest.mark.parametrize("page", sorted(SHOWN_ON))
def test_each_integration_page_shows_its_example_file_whole(page: str) -> None:
    assert doc_block(page, "example").strip() == f'--8<-- "examples/{SHOWN_ON[page]}"'
    assert SHOWN_ON[page] in {example.path for example in ALL}  # run by test_example_allows_one_refund_and_blocks_one
