"""ScriptedModel: a test double shipped with the package.

It answers from a queue of steps (a response string, a :class:`ModelError` to
raise, or a function of the request), records every request, and fails loudly
on a call nobody scripted. ``assert_complete()`` fails on steps left unused.

The file format (``--model scripted:FILE.json``, :meth:`ScriptedModel.from_file`)
is one JSON list; each item answers one model call, in order (a retried call
takes the next item too). An item is one of:

* a string - the model's answer text, sent as is;
* ``{"response": VALUE}`` - ``VALUE`` (any JSON, usually a verifier verdict
  object) re-encoded as JSON text, so a script need not escape JSON in a string;
* ``{"error": KIND}`` - the call fails with :class:`ModelError` of that kind:
  ``timeout``, ``rate_limit``, ``server`` (the verifier retries these, each retry
  takes the next item), ``auth``, ``bad_request`` or ``other``.

Example for ``policyguard verify`` on a tool with two requirements: the first
call times out, the retry gets a verdict::

    [
      {"error": "timeout"},
      {"response": {
        "requirements": [
          {"id": "refund.within_captured", "status": "MET",
           "evidence": "message 5: captured 80", "evidence_messages": [5]},
          {"id": "refund.confirmed", "status": "MET",
           "evidence": "message 7: the user said yes", "evidence_messages": [7]}
        ],
        "verdict": "PASS",
        "remediation": ""
      }}
    ]

A verdict must judge every requirement id the checklist gives the tool
(``policyguard verify --print-prompt`` shows the ids and the answer schema).
Steps are numbered from 1 in every message: a bad item, an error step, an
answer the verifier cannot use and a call with no step left name the file and
the step.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from policyguard.decision import Usage
from policyguard.errors import ConfigError, ModelError, ScriptedModelError
from policyguard.trajectory import strictjson

from .base import ModelRequest, ModelResponse

Step = str | ModelError | Callable[[ModelRequest], str]


class ScriptedModel:
    """A model that plays back scripted steps, in order."""

    def __init__(self, steps: Iterable[Step] = (), name: str = "scripted", *, source: str | None = None) -> None:
        self.name = name
        self.source = source or f"ScriptedModel {name!r}"  # what its messages name: the file, when there is one
        self._steps: deque[Step] = deque(steps)
        self._played = 0
        self.calls: list[ModelRequest] = []
        self.unexpected: list[ModelRequest] = []
        self._lock = threading.Lock()

    def add(self, *steps: Step) -> ScriptedModel:
        with self._lock:
            self._steps.extend(steps)
        return self

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.calls.append(request)
            if not self._steps:
                self.unexpected.append(request)
                raise ScriptedModelError(
                    f"{self.source}: unexpected call #{len(self.calls)} ({request.purpose}): no step left, "
                    f"the script holds {self._played} step(s)"
                )
            step = self._steps.popleft()
            self._played += 1
            number = self._played
        if isinstance(step, ModelError):
            raise step
        text = step(request) if callable(step) else step
        return ModelResponse(
            text=text,
            model=f"{self.source} step {number}",
            usage=Usage(input_tokens=len(request.text()) // 4, output_tokens=len(text) // 4, calls=1),
        )

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        return self.complete(request)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def assert_complete(self) -> None:
        """Fail if a step was left unused or a call came that nobody scripted."""
        if self.unexpected:
            raise ScriptedModelError(f"ScriptedModel {self.name!r}: {len(self.unexpected)} unexpected call(s)")
        if self._steps:
            raise ScriptedModelError(f"ScriptedModel {self.name!r}: {len(self._steps)} scripted step(s) unused")

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load steps from a JSON list (the format is in this module's docstring).

        Any problem with the file is a :class:`ConfigError` naming it (and the
        step, numbered from 1).
        """
        path = Path(path)
        try:
            items = strictjson.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read scripted model steps: {exc}") from exc
        if not isinstance(items, list):
            raise ConfigError(f"{path}: a scripted model file must hold a JSON list")
        return cls(
            (_step_from_json(item, path, number) for number, item in enumerate(items, 1)),
            name=f"scripted:{path.name}",
            source=str(path),
        )


_ERROR_KINDS = {"timeout", "rate_limit", "server", "auth", "bad_request", "other"}


def _step_from_json(item: Any, path: Path, number: int) -> Step:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and set(item) == {"error"} and item["error"] in _ERROR_KINDS:
        return ModelError(item["error"], f"{path} step {number}: scripted {item['error']} error")
    if isinstance(item, dict) and set(item) == {"response"}:
        return json.dumps(item["response"])
    if isinstance(item, dict) and set(item) == {"error"}:
        kinds = ", ".join(sorted(_ERROR_KINDS))
        raise ConfigError(f"{path}: step {number}: unknown error kind {item['error']!r}; expected one of {kinds}")
    shown = repr(item) if len(repr(item)) <= 80 else repr(item)[:77] + "..."
    raise ConfigError(
        f'{path}: step {number}: expected a string, {{"response": VALUE}} or {{"error": KIND}}, got {shown}'
    )
