"""A tool's result as a host's record keeps it, for hosts that hand results over as Python values."""

from __future__ import annotations

import json
from typing import Any


def result_text(result: Any) -> str:
    """A string as it is; anything else as sorted JSON (``str`` for what JSON cannot hold)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, sort_keys=True, default=str)
    except ValueError:  # a circular structure, or NaN where JSON refuses it
        return str(result)
