"""The checklist: per-tool requirements, facts and effects, as a schema and as YAML files.

:mod:`.schema` is the pydantic model of a checklist file and its loaders;
:mod:`.yamlsource` reads YAML with line numbers and alias limits, so an
error names the file, line and field. Validating a checklist against the gate
and the verifier lives in :mod:`policyguard.authoring`, above both.

May use: :mod:`policyguard.trajectory` and the base modules.
"""

from .schema import (
    SCHEMA_VERSION,
    Checklist,
    EffectSpec,
    Example,
    FactSource,
    PolicyRef,
    PositiveAmount,
    PrincipalSource,
    Requirement,
    StatedPrincipal,
    ToolSpec,
    checklist_schema_json,
    glob_matches,
    is_glob,
    load_checklist,
    parse_checklist,
    schema_error_message,
)

__all__ = [
    "SCHEMA_VERSION",
    "Checklist",
    "EffectSpec",
    "Example",
    "FactSource",
    "PolicyRef",
    "PositiveAmount",
    "PrincipalSource",
    "Requirement",
    "StatedPrincipal",
    "ToolSpec",
    "checklist_schema_json",
    "glob_matches",
    "is_glob",
    "load_checklist",
    "parse_checklist",
    "schema_error_message",
]
