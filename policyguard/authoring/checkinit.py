"""``checklist init``: a checklist skeleton for a policy and a tool list, no model needed.

The skeleton lists every tool. A tool is read-only (``mutating: false``) only
when the tool itself declares so (MCP ``readOnlyHint: true``, ``x-mutating:
false``, tau2 ``ToolType.READ``/``THINK``), as read by
:mod:`policyguard.authoring.tools`; every other tool is mutating, because an
undeclared write waved through as a read would skip every check. The policy is
pinned by name, sha256 version and path.

Each mutating tool gets one ``TODO`` requirement whose ``source`` is not a
quote of the policy, so ``checklist validate --policy`` fails, naming the file
and line, until a person writes the real requirement.

When a sentence of the policy asks for the user's confirmation (it reads like
one, :func:`policyguard.verifier.evidence.reads_like_confirmation`), the skeleton also
has a requirement quoting the first such sentence, marked ``confirmation: true``:
the verifier then accepts a MET only when it cites the user's own reply after the
agent's last message, whatever the requirement's wording becomes. It goes on the
write tools the sentence is about ("Before renewing ..." is renew_loan's), and is
a general rule, for every write, only when the sentence is about every write or
names no tool (:mod:`policyguard.authoring.confirmscope`).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from policyguard.errors import ConfigError
from policyguard.trajectory.canonical import policy_version

from .confirmscope import confirmation_sentences, tools_named
from .tools import ToolInfo, load_tools

TODO_SOURCE = "TODO: quote the policy sentence this requirement comes from"
CONFIRMATION_TEXT = "The agent listed this action's details and the user said yes afterwards."


class InitError(ConfigError):
    """A file ``checklist init`` needs cannot be read, or the output cannot be written."""


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def _tool_lines(tool: ToolInfo, key: str, confirmation: str | None) -> list[str]:
    """The tool's entry; ``key`` names its requirement ids, ``confirmation`` is a sentence about this tool."""
    lines = [f"  {tool.name if _plain_id(tool.name) else _quoted(tool.name)}:"]
    if tool.declared_mutating is False:
        lines.append(f"    mutating: false  # declared read-only by {tool.declared_by}")
    elif tool.declared_mutating is True:
        lines.append(f"    mutating: true  # declared writing by {tool.declared_by}")
    else:
        lines.append("    mutating: true  # nothing declared: treated as writing; set false only if it just reads")
    if tool.description.strip():
        lines.append(f"    description: {_quoted(' '.join(tool.description.split()))}")
    if tool.declared_mutating is not False:
        lines += [
            "    requirements:",
            f"      - id: {key}-todo",
            f"        text: {_quoted(f'TODO: what must hold before {tool.name} runs')}",
            "        kind: procedural  # or data, with a CEL check over args, facts, principal and now",
            f"        source: {_quoted(TODO_SOURCE)}",
        ]
        if confirmation is not None:
            lines += [f"    {line}" for line in _confirmation_lines(f"{key}-confirmed", confirmation)]
    return lines


def confirmation_sentence(policy_text: str) -> str | None:
    """The first policy sentence that asks for the user's confirmation, quotable as a ``source``; or None."""
    return next(iter(confirmation_sentences(policy_text)), None)


def _confirmation_lines(rid: str, sentence: str) -> list[str]:
    return [
        f"  - id: {rid}",
        f"    text: {_quoted(CONFIRMATION_TEXT)}",
        "    kind: procedural",
        "    confirmation: true  # the verifier must cite the user's own reply after the agent's last message",
        f"    source: {_quoted(sentence)}",
    ]


def _plain_id(name: str) -> bool:
    return (
        bool(name)
        and name[0].isascii()
        and name[0].isalnum()
        and all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)
    )


def skeleton(
    policy_name: str,
    policy_text: str,
    policy_path: str,
    tools: list[ToolInfo],
    tools_spec: str,
    output: str = "THIS.yaml",
) -> str:
    """The YAML text of a checklist skeleton (see the module doc)."""
    lines = [
        f"# Checklist skeleton written by `policyguard checklist init` from {tools_spec}.",
        "# Replace every TODO requirement, then run:",
        f"#   policyguard checklist validate {output} --policy {policy_path} --tools {tools_spec}",
        "# A guide: docs/checklists/writing.md",
        "schema_version: 1",
        "policy:",
        f"  name: {_quoted(policy_name)}",
        f"  version: {_quoted(policy_version(policy_text))}",
        f"  path: {_quoted(policy_path)}",
        "facts: {}",
        "tools:",
    ]
    writes = [tool.name for tool in tools if tool.declared_mutating is not False]
    sentence = confirmation_sentence(policy_text)
    scoped = tools_named(sentence, writes) if sentence is not None else []
    for number, tool in enumerate(tools, 1):
        key = tool.name if _plain_id(tool.name) else f"tool{number}"  # ids are unique across tools
        lines += _tool_lines(tool, key, sentence if tool.name in scoped else None)
    if sentence is not None and writes and not scoped:
        lines += ["general_rules:", *_confirmation_lines("user-confirmed", sentence)]
    return "\n".join(lines) + "\n"


def write_skeleton(policy: str | Path, tools_spec: str, output: str | Path, *, force: bool = False) -> str:
    """Write the skeleton to ``output`` atomically; refuse an existing file unless ``force``.

    Raises :class:`InitError` (or :class:`~policyguard.authoring.tools.ToolsError`)
    with one line naming the file. Returns the text written.
    """
    policy, output = Path(policy), Path(output)
    try:
        policy_text = policy.read_text(encoding="utf-8")
    except OSError as exc:
        raise InitError(f"{policy}: cannot read policy: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InitError(f"{policy}: cannot read policy: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    tools = load_tools(tools_spec)
    if output.exists() and not force:
        raise InitError(f"{output}: already exists; pass --force to overwrite it")
    if output.is_dir():
        raise InitError(f"{output}: is a directory")
    parent = output.parent if str(output.parent) else Path(".")
    try:
        relative = os.path.relpath(policy.resolve(), parent.resolve())
    except ValueError:  # another drive on Windows
        relative = str(policy)
    text = skeleton(policy.stem, policy_text, Path(relative).as_posix(), tools, tools_spec, output.name)
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise InitError(f"{output}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temp, output)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise InitError(f"{output}: cannot write: {exc.strerror or exc}") from exc
    return text
