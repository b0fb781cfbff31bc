"""The model Protocol every backend implements.

A request is a short list of prompt parts. Parts marked ``cache=True`` form the
static prefix (instructions, policy, checklist) that is identical for every call
of a deployment; backends that support prompt caching mark it so the provider
can reuse it.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from policyguard.decision import Usage


class PromptPart(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    role: Literal["system", "user"]
    content: str
    cache: bool = False


class ModelRequest(BaseModel):
    """What a stage asks a model: prompt parts and, optionally, a JSON schema for the answer."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    parts: list[PromptPart]
    response_schema: dict[str, Any] | None = None
    schema_name: str = "response"
    purpose: str = Field(default="verify", description="A label for logs: verify, classify, review...")
    max_output_tokens: int = 2048
    timeout_s: float = 60.0

    def text(self) -> str:
        """All parts joined, for backends or logs that want one string."""
        return "\n\n".join(p.content for p in self.parts)


class ModelResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    text: str
    model: str
    usage: Usage = Field(default_factory=Usage)


@runtime_checkable
class Model(Protocol):
    """A chat model: one request in, one text response out.

    Failures raise :class:`policyguard.errors.ModelError` with a ``kind``; the
    caller decides what an error means (the verifier: BLOCK).
    """

    name: str

    def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def acomplete(self, request: ModelRequest) -> ModelResponse: ...
