"""The exception hierarchy.

Every real error PolicyGuard raises derives from :class:`PolicyGuardError`.
Control-flow outcomes (a call was blocked, a run must halt) are *not* exceptions:
they are :class:`policyguard.Decision` values returned by the guard.

Which errors reach the model: none. A verifier or gate failure is turned into a
BLOCK decision whose remediation goes back to the agent as the tool's error
result. Errors that stop the run are configuration and input errors
(:class:`ChecklistError`, :class:`TemplateError`, :class:`ConfigError`) raised
before any call is checked, and :class:`ScriptedModelError` in tests.
"""

from __future__ import annotations

from typing import Literal


class PolicyGuardError(Exception):
    """Root of every error raised by PolicyGuard."""


class ConfigError(PolicyGuardError):
    """A setting, argument or spec string is invalid."""


class ChecklistError(PolicyGuardError):
    """A checklist file could not be loaded. Names the file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.file or "<checklist>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": {self.field}"
        return f"{where}: {self.message}"


class TemplateError(PolicyGuardError):
    """A prompt template is missing or refers to an undefined variable."""


class FormatError(PolicyGuardError):
    """A message list could not be read in the given (or any detected) format."""


ModelErrorKind = Literal["timeout", "rate_limit", "server", "auth", "bad_request", "other"]


class ModelError(PolicyGuardError):
    """A model backend failed. ``kind`` says how; the verifier turns it into BLOCK."""

    def __init__(self, kind: ModelErrorKind, message: str = "") -> None:
        self.kind: ModelErrorKind = kind
        super().__init__(f"{kind}: {message}" if message else kind)


class ScriptedModelError(PolicyGuardError):
    """A ScriptedModel was called more often than scripted, or not consumed."""
