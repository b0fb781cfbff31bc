"""A scripted LangChain chat model and a refund policy, for driving real ``create_agent`` graphs offline."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from policyguard.canonical import policy_version

POLICY = "Refunds need a read of the order first. Never refund more than 100 USD.\n"
CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
    tools:
      get_order: {{mutating: false}}
      issue_refund:
        requirements:
          - id: refund-ceiling
            text: A refund is at most 100 USD.
            kind: data
            source: Never refund more than 100 USD.
            check: args.amount <= 100
            examples:
              - {{args: {{amount: 80}}, complies: true}}
              - {{args: {{amount: 500}}, complies: false}}
    """
)


@pytest.fixture
def guard_files(tmp_path: Path) -> tuple[Path, Path]:
    policy = tmp_path / "policy.md"
    checklist = tmp_path / "checklist.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    checklist.write_text(CHECKLIST, encoding="utf-8")
    return policy, checklist


def scripted_chat_model(replies: Sequence[Any]) -> Any:
    """A LangChain chat model that answers with ``replies`` in order and records what it was sent.

    ``bind_tools`` returns the model itself (the tools are the agent's concern);
    a call past the script fails the test instead of inventing an answer.
    """
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(BaseChatModel):
        replies: list[AIMessage]
        seen: list[list[BaseMessage]] = []

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            self.seen.append(list(messages))
            if not self.replies:
                pytest.fail(
                    f"the scripted chat model was called {len(self.seen)} times; only {len(self.seen) - 1} replies were scripted"
                )
            return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])

    return ScriptedChatModel(replies=list(replies), seen=[])
