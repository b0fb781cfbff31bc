"""Canonical JSON and argument hashes.

Two calls with the same arguments must hash the same whatever the key order or
whitespace, so grants, audit events and idempotency all use this one encoding:
sorted keys, no insignificant whitespace, UTF-8, no NaN.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

UNHASHABLE_ARGS = "unhashable"
"""The ``args_sha256`` recorded for a call whose arguments have no canonical encoding (always blocked)."""


def canonical_json(value: Any) -> str:
    """Encode ``value`` as canonical JSON (sorted keys, compact, UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def args_sha256(arguments: dict[str, Any]) -> str:
    """The sha256 of a call's canonical arguments, as 64 hex digits."""
    return sha256_hex(canonical_json(arguments))


def policy_version(policy_text: str) -> str:
    """A policy's version: ``sha256:`` and the hash of its exact text."""
    return "sha256:" + sha256_hex(policy_text)
