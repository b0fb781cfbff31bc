"""Finding JSON objects in a model's free text.

Models wrap JSON in prose and code fences. Callers bind to the *last* object
(the final answer, not a draft), and decide themselves what a missing or
invalid one means (for the verifier: BLOCK).
"""

from __future__ import annotations

import json
from typing import Any


def top_level_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text`` that is not nested inside another one, in order."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = text.find("{", end)
    return found
