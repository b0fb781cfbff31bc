"""A built wheel carries the prompts and checklists that live top-level in the repo."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from policyguard.distribution import DIST_NAME, checkout_install, install_hint

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("hatchling") is None, reason="needs hatchling (extra 'dev') to build the wheel offline"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("policyguard_agents-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed once (no dependencies) into a folder of its own, outside the checkout."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


@pytest.mark.slow
def test_wheel_carries_the_license_its_metadata_declares(wheel: Path) -> None:
    """pyproject declared Apache-2.0 while the repository had no LICENSE file to ship."""
    archive = zipfile.ZipFile(wheel)
    [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    assert "License: Apache-2.0" in archive.read(metadata).decode().splitlines()
    [license_file] = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    text = archive.read(license_file).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


@pytest.mark.slow
def test_wheel_contains_prompts_and_checklists(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for prompt in (ROOT / "prompts").glob("*.j2"):
        assert f"policyguard/_data/prompts/{prompt.name}" in names
    for checklist in (ROOT / "checklists").glob("*.yaml"):
        assert f"policyguard/_data/checklists/{checklist.name}" in names


@pytest.mark.slow
def test_wheel_contains_the_demo_data(wheel: Path) -> None:
    """``policyguard demo`` reads package data only: the tau2 policy, its notice, the records, the company rule."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("policy.md", "NOTICE", "airline.json", "company_rules.yaml"):
        assert f"policyguard/_data/demo/{name}" in names
    assert "policyguard/_data/checklists/airline.yaml" in names


@pytest.mark.slow
def test_installed_wheel_runs_the_demo(installed: Path, tmp_path: Path) -> None:
    """Outside the checkout the demo finds its data and the airline checklist in the wheel, and exits 0."""
    target = installed
    env = {"PYTHONPATH": os.pathsep.join([str(target), *_site_packages()]), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-m", "policyguard", "demo", "--json"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["ok"] is True
    assert (tmp_path / "policyguard-demo" / "trace.jsonl").is_file()


@pytest.mark.slow
def test_non_editable_install_finds_its_data(installed: Path, tmp_path: Path) -> None:
    target = installed
    code = (
        "import policyguard, policyguard.resources as r; "
        "print(policyguard.__file__); print(r.prompts_dir()); print(r.checklists_dir()); "
        "print(sorted(p.name for p in r.prompts_dir().glob('*.j2')))"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path, env=env
    ).stdout.splitlines()
    package_file, prompts, checklists, prompt_names = out
    assert package_file.startswith(str(target))
    assert prompts.startswith(str(target)) and checklists.startswith(str(target))
    assert "verifier_system.j2" in prompt_names


@pytest.mark.slow
def test_wheel_contains_what_the_bench_commands_read(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("eval.yaml", "dataset.yaml", "checklist.yaml", "policy.md"):
        assert f"policyguard/_data/benchmarks/refund/{name}" in names
    for domain in ("airline", "retail"):
        assert f"policyguard/_data/benchmarks/tau2/{domain}_labels.json" in names


@pytest.mark.slow
def test_installed_wheel_runs_bench_refund_and_finds_the_labels(installed: Path, tmp_path: Path) -> None:
    """Outside the checkout (no benchmarks/ folder next to the package) the shipped copies are used."""
    target = installed
    # the wheel's own files, then the shared venv's site-packages for the dependencies (not the checkout)
    env = {"PYTHONPATH": os.pathsep.join([str(target), *_site_packages()]), "PATH": "/usr/bin:/bin"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    labels = subprocess.run(
        [
            sys.executable,
            "-c",
            "from policyguard.bench.tau2.labels import default_labels_path, load_labels; "
            "p = default_labels_path('airline'); print(p); print(load_labels(p).domain)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.splitlines()
    assert labels[0].startswith(str(target)) and labels[1] == "airline"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "policyguard",
            "bench",
            "refund",
            "--target",
            "fixed",
            "--output",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert "eval spec not found" not in run.stderr
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "summary.json").is_file()


def _site_packages() -> list[str]:
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]


# --- the distribution name -------------------------------------------------------------------
# On PyPI, "policyguard" is an unrelated project with its own `policyguard` command; installing
# it by mistake runs someone else's code. This library ships as policyguard-agents, imports as
# policyguard and installs the `policyguard` command.

_INSTALL = re.compile(r"pip install\s+(?:-[-\w]+\s+)*['\"]?([A-Za-z0-9_.-]+)(?=[\[\s'\"`)]|$)")
_HINT_FILES = (
    "policyguard/**/*.py",
    "README.md",
    "docs/**/*.md",
    "examples/**/*",
    "benchmarks/**/*.md",
    "checklists/**/*.md",
    "mkdocs.yml",
    ".ci/run",
)


def _install_lines() -> list[tuple[str, int, str, str]]:
    found = []
    for pattern in _HINT_FILES:
        for path in sorted(ROOT.glob(pattern)):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for match in _INSTALL.finditer(line):
                    found.append((str(path.relative_to(ROOT)), number, match.group(1), line.strip()))
    return found


def test_the_distribution_name_is_the_one_every_hint_uses() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST_NAME == "policyguard-agents"
    assert project["scripts"] == {"policyguard": "policyguard.cli:main"}
    assert (
        install_hint("postgres")
        == "pip install -c constraints.txt -e '.[postgres]' (from a checkout of this repository)"
    )


def test_no_install_line_names_the_unrelated_pypi_project() -> None:
    lines = _install_lines()
    assert lines, "no install line found at all"
    wrong = [
        f"{path}:{number}: {line}"
        for path, number, name, line in lines
        if name.lower().replace("_", "-").startswith("policyguard") and name != DIST_NAME
    ]
    assert wrong == []


_CHECKOUT_INSTALL = re.compile(
    r"pip install (?:--quiet )?-c constraints\.txt -e (?:\.(?=[\s`]|$)|'\.\[[a-z0-9,{}-]+\]')"
)


def test_every_install_line_is_the_one_that_works_from_a_checkout() -> None:
    """No release is on PyPI: a line naming a package (ours or any) fails or fetches someone else's code.

    Every ``pip install`` of the README, the docs, the examples, the package's messages and CI installs this
    checkout, pinned by constraints.txt; only CI's own tools (pip itself, pytest) are installed by name.
    """
    lines = _install_lines()
    wrong = [
        f"{path}:{number}: {line}"
        for path, number, _, line in lines
        if not _CHECKOUT_INSTALL.search(line) and not line.endswith("install --quiet --upgrade pip")
    ]
    assert wrong == []
    assert checkout_install("mcp") == "pip install -c constraints.txt -e '.[mcp]'"


def test_every_missing_extra_error_is_built_by_install_hint() -> None:
    """A hand-written hint could drift from the name; the package spells `pip install` in one place only."""
    spelled = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "policyguard").rglob("*.py")
        if re.search(r"[\"']\s*pip install", path.read_text()) and path.name != "distribution.py"
    )
    assert spelled == []


@pytest.mark.slow
def test_wheel_metadata_names_the_distribution_and_the_command(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    assert f"Name: {DIST_NAME}" in archive.read(metadata).decode().splitlines()
    [entry_points] = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "policyguard = policyguard.cli:main" in archive.read(entry_points).decode()
    assert "policyguard/__init__.py" in archive.namelist()
