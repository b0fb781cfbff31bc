"""Where the shipped prompts, checklists and benchmark files live.

In the repository they are the top-level ``prompts/``, ``checklists/`` and
``benchmarks/`` folders; a built wheel carries copies under
``policyguard/_data/`` (for ``benchmarks/``: the refund eval and the tau2
label files the ``bench`` commands read). Both
layouts resolve here, so installed and source checkouts behave the same.
The demo's data is package data in both: ``policyguard/_data/demo/``.
"""

from __future__ import annotations

from pathlib import Path

from policyguard.errors import ConfigError

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"shipped {name}/ folder not found next to the policyguard package")


def prompts_dir() -> Path:
    return _data_dir("prompts")


def checklists_dir() -> Path:
    return _data_dir("checklists")


def shipped_checklist(name: str) -> Path:
    """The path of a shipped checklist, e.g. ``shipped_checklist("airline")``."""
    path = checklists_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no shipped checklist named {name!r} (looked for {path})")
    return path


def demo_file(name: str) -> Path:
    """A file of ``policyguard demo`` (``policyguard/_data/demo/``): the tau2 policy, records, conversations."""
    path = _PACKAGE / "_data" / "demo" / name
    if not path.is_file():
        raise ConfigError(f"the demo's {name} is missing (looked for {path}); reinstall policyguard")
    return path


def benchmark_file(*parts: str) -> Path:
    """A file the ``bench`` commands ship, e.g. ``benchmark_file("refund", "eval.yaml")``.

    The path may not exist (the caller reports that with its own hint); the
    folder is the wheel's ``_data/benchmarks`` or the checkout's ``benchmarks``.
    """
    for base in (_PACKAGE / "_data" / "benchmarks", _PACKAGE.parent / "benchmarks"):
        if base.is_dir():
            return base.joinpath(*parts)
    return _PACKAGE.parent.joinpath("benchmarks", *parts)
