"""The package's shape is a contract: concepts as subpackages, layered, no cycles, the benchmarks outside the core.

``.importlinter`` states the layers; ``lint-imports`` (CI runs it too) checks
every import, including the ones inside functions. These tests run it, show
that it does fail when a lower layer reaches up or a cycle appears, and keep
``docs/architecture.md`` and the package root in step with it.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import doc_block

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "policyguard"

pytest.importorskip("importlinter", reason="lint-imports comes with the dev extra (import-linter)")

ROOT_ENTRIES = {
    # the public API and the command
    "__init__.py",
    "__main__.py",
    # the base: what every layer may import
    "errors.py",
    "decision.py",
    "stages.py",
    "resources.py",
    "distribution.py",
    "loopback.py",
    "_lazy.py",
    "_data",
    # the concepts, bottom-up
    "trajectory",
    "checklist",
    "audit",
    "gate",
    "verifier",
    "session",
    "authoring",
    "enforcement",
    "approvals",
    "guard",
    # the edges
    "integrations",
    "serve",
    "review",
    "bench",
    "demo.py",
    "cli",
}


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--no-cache"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return [line.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]


def test_the_package_keeps_every_import_contract() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "0 broken" in done.stdout


def test_the_contracts_fail_when_the_gate_imports_the_guard_or_two_modules_import_each_other(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "policyguard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    facts = tmp_path / "policyguard" / "gate" / "facts.py"
    facts.write_text(facts.read_text() + "\n\ndef _up() -> None:\n    from policyguard.guard import Guard  # noqa: F401\n")
    limits = tmp_path / "policyguard" / "trajectory" / "limits.py"
    limits.write_text(limits.read_text() + "\n\ndef _around() -> None:\n    from . import messages  # noqa: F401\n")
    bench = tmp_path / "policyguard" / "approvals" / "queue.py"
    bench.write_text(bench.read_text() + "\n\ndef _bench() -> None:\n    import policyguard.bench.harness  # noqa: F401\n")

    done = _lint(tmp_path)

    assert done.returncode == 1
    assert "Contracts: 2 kept, 3 broken." in done.stdout, done.stdout[-4000:]
    assert "policyguard.gate is not allowed to import policyguard.guard" in done.stdout
    assert "No cycles are allowed in policyguard.trajectory" in done.stdout
    assert "policyguard.approvals is not allowed to import policyguard.bench" in done.stdout


def test_the_package_root_holds_the_concepts_not_a_list_of_modules() -> None:
    entries = {path.name for path in PACKAGE.iterdir() if path.name != "__pycache__"}
    assert entries == ROOT_ENTRIES


def test_every_layer_named_in_the_contract_is_in_the_package_root() -> None:
    named = {name.strip() for layer in _layers() for name in layer.replace(":", "|").split("|")}
    present = {path.stem for path in PACKAGE.iterdir() if path.name in ROOT_ENTRIES}
    assert named <= present
    assert present - named == {"__init__", "__main__", "_data"}


@pytest.mark.parametrize("package", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()))
def test_each_concept_package_says_what_it_is_and_what_it_may_use(package: str) -> None:
    text = (PACKAGE / package / "__init__.py").read_text()
    assert text.startswith('"""'), f"policyguard/{package}/__init__.py has no docstring"
    docstring = text[3 : text.index('"""', 3)]
    assert "May use:" in docstring, f"policyguard/{package}/__init__.py: the docstring does not say what it may use"


def test_the_architecture_page_draws_the_layers_of_the_contract() -> None:
    drawn = [line.strip() for line in doc_block("docs/architecture.md", "layers").splitlines() if line.strip()]
    rows = [row.split("  ")[0].strip() for row in drawn if not row.startswith(("│", "▼", "|"))]
    expected = [" | ".join(name.strip() for name in layer.split("|")) for layer in _layers()]
    assert rows == expected


def test_one_module_of_a_concept_does_not_load_the_rest_of_it() -> None:
    """The gate-only path reads the verifier's evidence rules; that must not load the LLM verifier and its backends."""
    probe = (
        "import sys\n"
        "import policyguard.verifier.evidence, policyguard.gate.effects, policyguard.checklist\n"
        "print(','.join(m for m in ('policyguard.verifier.llm', 'policyguard.verifier.models', "
        "'policyguard.gate.hardgate', 'policyguard.gate.cel') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == ""


def test_the_call_path_on_the_architecture_page_names_methods_that_exist() -> None:
    """Every ``Class.method (package/module)`` in the drawing is a real method of a class in that module."""
    import importlib
    import re

    steps = re.findall(r"(\w+)\.(\w+) \(([\w/]+)\)", doc_block("docs/architecture.md", "call-path"))
    assert len(steps) >= 10
    for cls, method, where in steps:
        module = importlib.import_module("policyguard." + where.replace("/", "."))
        assert callable(getattr(getattr(module, cls), method)), f"{cls}.{method} in policyguard/{where}.py"
