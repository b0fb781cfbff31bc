"""The files a generation run keeps: a response cache and per-step records.

* The **response cache** maps a request's content hash (model name, rendered
  prompt parts, response schema) to the raw text the model answered. A re-run
  with the same policy, tools and model asks the model nothing and gets the
  same checklist. Only answers that parsed are cached, so a malformed reply is
  asked again rather than replayed forever.
* The **step records** (``OUT.yaml.steps/``) hold, for each step, the prompt,
  every raw response, the parsed result and notes, for a person to audit. With
  ``--resume`` a step whose record has the same request hash is taken from the
  record (so a hand-corrected step output is honoured) and the model is not
  asked.

Every file is written atomically (temp file + rename): a crash never leaves a
half-written record, cache entry or checklist.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from policyguard.trajectory.canonical import canonical_json, sha256_hex
from policyguard.verifier.models.base import ModelRequest


def request_key(model_name: str, request: ModelRequest) -> str:
    """The content hash a response is cached under: model, prompt parts, response schema."""
    content = {
        "model": model_name,
        "parts": [{"role": p.role, "content": p.content} for p in request.parts],
        "schema": request.response_schema,
    }
    return sha256_hex(canonical_json(content))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ResponseCache:
    """Raw model responses by request hash, one JSON file per entry."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> str | None:
        entry = _read_json(self._path(key))
        if entry is None or entry.get("key") != key or not isinstance(entry.get("response"), str):
            return None
        return str(entry["response"])

    def put(self, key: str, response: str, *, model: str, purpose: str) -> None:
        entry = {"key": key, "model": model, "purpose": purpose, "response": response}
        atomic_write_text(self._path(key), json.dumps(entry, indent=2, ensure_ascii=False) + "\n")


_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


class StepRecords:
    """One JSON record per pipeline step, named ``<n>-<step>[-<tool>].json``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / f"{_UNSAFE.sub('_', name)}.json"

    def read(self, name: str) -> dict[str, Any] | None:
        return _read_json(self.path(name))

    def write(self, name: str, record: dict[str, Any]) -> Path:
        path = self.path(name)
        atomic_write_text(path, json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n")
        return path
