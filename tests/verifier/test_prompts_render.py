"""policyguard.verifier.prompts: strict Jinja2 rendering with errors that name the template."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from policyguard import TemplateError
from policyguard.resources import prompts_dir
from policyguard.verifier.prompts import Prompts, render, render_string


def test_shipped_templates_exist() -> None:
    names = {p.name for p in prompts_dir().glob("*.j2")}
    assert {"verifier_system.j2", "verifier_checklist.j2", "verifier_call.j2"} <= names


def test_render_a_file_template(tmp_path: Path) -> None:
    (tmp_path / "hello.j2").write_text("Hello {{ name }}!")
    assert Prompts(tmp_path).render("hello.j2", name="Ada") == "Hello Ada!"


def test_undefined_variable_names_the_template(tmp_path: Path) -> None:
    (tmp_path / "hello.j2").write_text("Hello {{ name }}!")
    with pytest.raises(TemplateError, match=r"hello\.j2.*name"):
        Prompts(tmp_path).render("hello.j2")


def test_missing_template_names_it(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=r"nope\.j2"):
        Prompts(tmp_path).render("nope.j2")


def test_syntax_error_names_the_template_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.j2").write_text("ok\n{% if %}")
    with pytest.raises(TemplateError, match=r"bad\.j2:2"):
        Prompts(tmp_path).render("bad.j2")


def test_literal_template_string() -> None:
    assert render_string("{{ a }}+{{ b }}", a=1, b=2) == "1+2"
    with pytest.raises(TemplateError, match="my-inline"):
        render_string("{{ missing }}", name="my-inline")


def test_shipped_template_with_a_missing_variable_raises() -> None:
    with pytest.raises(TemplateError, match="verifier_call.j2"):
        render("verifier_call.j2", messages=[])


def test_environment_is_built_lazily_and_cached_per_instance(tmp_path: Path) -> None:
    prompts = Prompts(tmp_path)
    assert "environment" not in vars(prompts)
    assert prompts.environment is prompts.environment


def test_importing_prompts_builds_no_environment() -> None:
    code = "import policyguard.verifier.prompts as p; assert p.default_prompts.cache_info().currsize == 0; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
