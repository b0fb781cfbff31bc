"""Fixtures for the format converters: JSON conversations stored beside the tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def load() -> Callable[[str], Any]:
    """Read a JSON fixture from this directory by file name."""

    def _load(name: str) -> Any:
        return json.loads((HERE / name).read_text(encoding="utf-8"))

    return _load
