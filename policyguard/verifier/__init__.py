"""The LLM verifier: the policy, the checklist and the dialogue to a model, and a verdict back.

:mod:`.llm` builds the request and reads the verdict (fail closed);
:mod:`.prompts` renders the templates, :mod:`.dialogue` renders the
conversation as untrusted data, :mod:`.evidence` decides what counts as the
user's confirmation, :mod:`.verdict` parses the model's answer, and
:mod:`.models` are the backends (scripted, litellm, OpenAI, Anthropic; the
SDKs load only when a model is called).

May use: :mod:`policyguard.checklist`, :mod:`policyguard.trajectory` and the
base modules. Never the gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .llm import (
        CONFIRM_REMEDIATION,
        DEFAULT_KEEP_LAST_MESSAGES,
        DEFAULT_MAX_PROMPT_TOKENS,
        DEFAULT_REMEDIATION,
        FAILURE_MESSAGE,
        MODES,
        RETRYABLE,
        SYNTHETIC_ID,
        SYNTHETIC_TEXT,
        LLMVerifier,
        Mode,
        PreparedRequest,
        policy_tag_id,
    )

__all__ = [
    "CONFIRM_REMEDIATION",
    "DEFAULT_KEEP_LAST_MESSAGES",
    "DEFAULT_MAX_PROMPT_TOKENS",
    "DEFAULT_REMEDIATION",
    "FAILURE_MESSAGE",
    "MODES",
    "RETRYABLE",
    "SYNTHETIC_ID",
    "SYNTHETIC_TEXT",
    "LLMVerifier",
    "Mode",
    "PreparedRequest",
    "policy_tag_id",
]


# Loaded on first use: importing one module of this package (e.g. from the
# gate-only path) must not load the rest of it.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, ".llm"))
