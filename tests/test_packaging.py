"""A built wheel carries the prompts and checklists that live top-level in the repo."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
    (built,) = out.glob("policyguard-*.whl")
    return built


@pytest.mark.slow
def test_wheel_contains_prompts_and_checklists(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for prompt in (ROOT / "prompts").glob("*.j2"):
        assert f"policyguard/_data/prompts/{prompt.name}" in names
    for checklist in (ROOT / "checklists").glob("*.yaml"):
        assert f"policyguard/_data/checklists/{checklist.name}" in names


@pytest.mark.slow
def test_non_editable_install_finds_its_data(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
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
