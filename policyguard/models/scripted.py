"""ScriptedModel: a test double shipped with the package.

It answers from a queue of steps (a response string, a :class:`ModelError` to
raise, or a function of the request), records every request, and fails loudly
on a call nobody scripted. ``assert_complete()`` fails on steps left unused.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..decision import Usage
from ..errors import ConfigError, ModelError, ScriptedModelError
from .base import ModelRequest, ModelResponse

Step = str | ModelError | Callable[[ModelRequest], str]


class ScriptedModel:
    """A model that plays back scripted steps, in order."""

    def __init__(self, steps: Iterable[Step] = (), name: str = "scripted") -> None:
        self.name = name
        self._steps: deque[Step] = deque(steps)
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
                    f"ScriptedModel {self.name!r}: unexpected call #{len(self.calls)} ({request.purpose}); no step left"
                )
            step = self._steps.popleft()
        if isinstance(step, ModelError):
            raise step
        text = step(request) if callable(step) else step
        return ModelResponse(
            text=text,
            model=self.name,
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
        """Load steps from a JSON list: strings, or ``{"error": "timeout"|"rate_limit"|"server"}``.

        A step may also be a JSON object with ``"response"``: it is sent as that
        object re-encoded as JSON, so scripts can hold structured verdicts.
        """
        path = Path(path)
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read scripted model steps: {exc}") from exc
        if not isinstance(items, list):
            raise ConfigError(f"{path}: a scripted model file must hold a JSON list")
        return cls((_step_from_json(item, path, i) for i, item in enumerate(items)), name=f"scripted:{path.name}")


_ERROR_KINDS = {"timeout", "rate_limit", "server", "auth", "bad_request", "other"}


def _step_from_json(item: Any, path: Path, index: int) -> Step:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and set(item) == {"error"} and item["error"] in _ERROR_KINDS:
        return ModelError(item["error"], f"scripted error at step {index}")
    if isinstance(item, dict) and set(item) == {"response"}:
        return json.dumps(item["response"])
    raise ConfigError(
        f'{path}: step {index}: expected a string, {{"error": kind}} or {{"response": object}}, got {item!r}'
    )
