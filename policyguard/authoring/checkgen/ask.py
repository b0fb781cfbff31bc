"""One pipeline step's exchange with the model: record, cache, parse, retry once.

A step renders its prompt, asks for JSON matching the step's pydantic schema
and reads the last JSON object of the reply. A malformed reply is asked again
once, with the parse error appended; a second malformed reply fails the step
with :class:`StepFailed` - a step's output is never silently dropped. Every
attempt, raw response and the parsed result go to the step's record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from policyguard.errors import ModelError, PolicyGuardError
from policyguard.verifier.models.base import Model, ModelRequest, PromptPart

from .cache import ResponseCache, StepRecords, request_key
from .schemas import MalformedResponse, Out, parse_response, response_schema


class CheckgenError(PolicyGuardError):
    """Checklist generation could not finish; nothing was written to the output."""


class StepFailed(CheckgenError):
    """A step got no usable answer: two malformed replies, or a model error."""

    def __init__(self, message: str, *, step: str, malformed: bool) -> None:
        self.step = step
        self.malformed = malformed
        super().__init__(message)


_RETRY_NOTE = (
    "Your previous answer could not be used: {error}. "
    "Answer again with exactly one JSON object that matches the requested schema, and nothing after it."
)


class StepAsker:
    """Asks the model for one step's structured answer, through the cache and the step records."""

    def __init__(
        self,
        model: Model,
        cache: ResponseCache,
        records: StepRecords,
        *,
        resume: bool = False,
        log: Callable[[str], None] | None = None,
        max_output_tokens: int = 8192,
        timeout_s: float = 300.0,
    ) -> None:
        self.model = model
        self.cache = cache
        self.records = records
        self.resume = resume
        self.log = log or (lambda _msg: None)
        self.max_output_tokens = max_output_tokens
        self.timeout_s = timeout_s
        self.model_calls = 0

    def ask(self, step: str, purpose: str, prompt: str, schema: type[Out]) -> Out:
        """The step's parsed answer; raises :class:`StepFailed` if there is none."""
        request = ModelRequest(
            parts=[PromptPart(role="user", content=prompt)],
            response_schema=response_schema(schema),
            schema_name=schema.__name__,
            purpose=purpose,
            max_output_tokens=self.max_output_tokens,
            timeout_s=self.timeout_s,
        )
        key = request_key(self.model.name, request)
        record: dict[str, Any] = {
            "step": step,
            "purpose": purpose,
            "model": self.model.name,
            "request_key": key,
            "prompt": prompt,
            "attempts": [],
            "ok": False,
            "parsed": None,
        }
        if self.resume:
            resumed = self._from_record(step, key, schema)
            if resumed is not None:
                self.log(f"{step}: resumed from {self.records.path(step)}")
                return resumed
        cached = self.cache.get(key)
        if cached is not None:
            try:
                parsed = parse_response(cached, schema)
            except MalformedResponse:
                pass  # a stale entry (e.g. the schema changed): ask again
            else:
                record["attempts"].append({"source": "cache", "response": cached, "error": None})
                return self._done(step, record, parsed)
        errors: list[str] = []
        attempt_request = request
        for attempt in (1, 2):
            try:
                self.model_calls += 1
                response = self.model.complete(attempt_request)
            except ModelError as exc:
                record["attempts"].append({"source": "model", "response": None, "error": f"model error: {exc}"})
                self.records.write(step, record)
                raise StepFailed(
                    f"step {step}: the model failed ({exc}); record: {self.records.path(step)}",
                    step=step,
                    malformed=False,
                ) from exc
            try:
                parsed = parse_response(response.text, schema)
            except MalformedResponse as exc:
                errors.append(str(exc))
                record["attempts"].append({"source": "model", "response": response.text, "error": str(exc)})
                self.log(f"{step}: malformed response (attempt {attempt}): {exc}")
                attempt_request = request.model_copy(
                    update={"parts": [*request.parts, PromptPart(role="user", content=_RETRY_NOTE.format(error=exc))]}
                )
                continue
            record["attempts"].append({"source": "model", "response": response.text, "error": None})
            self.cache.put(key, response.text, model=self.model.name, purpose=purpose)
            return self._done(step, record, parsed)
        self.records.write(step, record)
        raise StepFailed(
            f"step {step}: the model's response was malformed twice ({'; then: '.join(errors)}); "
            f"record: {self.records.path(step)}",
            step=step,
            malformed=True,
        )

    def _done(self, step: str, record: dict[str, Any], parsed: Out) -> Out:
        record["ok"] = True
        record["parsed"] = parsed.model_dump(mode="json")
        self.records.write(step, record)
        return parsed

    def _from_record(self, step: str, key: str, schema: type[Out]) -> Out | None:
        record = self.records.read(step)
        if record is None or record.get("request_key") != key or record.get("ok") is not True:
            return None
        try:
            return schema.model_validate(record.get("parsed"))
        except ValidationError as exc:
            raise CheckgenError(
                f"--resume: {self.records.path(step)}: 'parsed' does not fit the {schema.__name__} schema: "
                f"{exc.errors()[0]['msg']} at {'.'.join(str(p) for p in exc.errors()[0]['loc'])}"
            ) from exc
