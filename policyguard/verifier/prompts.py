"""Prompt templates: Jinja2 with ``StrictUndefined``, loaded from the shipped ``prompts/``.

A missing variable is an error, never an empty string: a prompt that silently
lost the policy or the dialogue would make the verifier judge nothing. Every
failure (missing template, undefined variable, syntax error) is raised as
:class:`policyguard.errors.TemplateError` naming the template.
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jinja2

from policyguard.errors import TemplateError
from policyguard.resources import prompts_dir


class Prompts:
    """Renders templates from one folder (the shipped ``prompts/`` by default).

    The Jinja2 Environment is built on first use and kept by the instance;
    rendering is thread-safe (Jinja2's template cache is locked).
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        self._directory = Path(directory) if directory is not None else None

    @cached_property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else prompts_dir()

    @cached_property
    def environment(self) -> jinja2.Environment:
        return jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.directory)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def render(self, template_name: str, **variables: Any) -> str:
        """Render the template file ``template_name`` (e.g. ``verifier_call.j2``)."""
        try:
            template = self.environment.get_template(template_name)
        except jinja2.TemplateNotFound as exc:
            raise TemplateError(f"{template_name}: template not found in {self.directory}") from exc
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{template_name}:{exc.lineno}: template syntax error: {exc.message}") from exc
        return _render(template, template_name, variables)

    def render_string(self, source: str, name: str = "<string>", **variables: Any) -> str:
        """Render a literal template ``source``; ``name`` labels it in errors."""
        try:
            template = self.environment.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{name}:{exc.lineno}: template syntax error: {exc.message}") from exc
        return _render(template, name, variables)


def _render(template: jinja2.Template, name: str, variables: dict[str, Any]) -> str:
    try:
        return template.render(**variables)
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{name}: undefined variable: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{name}: {exc}") from exc


@lru_cache(maxsize=1)
def default_prompts() -> Prompts:
    """The shared renderer for the shipped prompts, built on first use."""
    return Prompts()


def render(template_name: str, **variables: Any) -> str:
    """Render a shipped template. Raises :class:`TemplateError` naming it on any problem."""
    return default_prompts().render(template_name, **variables)


def render_string(source: str, name: str = "<string>", **variables: Any) -> str:
    """Render a literal template string with the same strict rules."""
    return default_prompts().render_string(source, name, **variables)
