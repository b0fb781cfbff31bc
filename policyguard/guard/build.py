"""A guard built from files: a policy file, a checklist file and a model spec (:meth:`Guard.from_files`).

Every problem with a file (missing, unreadable, not UTF-8, a checklist pinned
to another policy, a scripted model file, the trace file) raises a
:class:`~policyguard.errors.PolicyGuardError` subclass whose message names the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.errors import ChecklistError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from policyguard.stages import Verifier

_G = TypeVar("_G")
_VERIFIER_MODES = ("checklist", "raw", "raw_traj", "checklist_only")


def from_files(
    build: Callable[..., _G],
    *,
    policy: str | Path,
    checklist: str | Path,
    model: str,
    mode: str,
    verifier_mode: str,
    use_gate: bool,
    trace_path: str | Path | None,
    on_unverified: str = "allow",
    **settings: Any,
) -> _G:
    """``build(checklist, policy_text, ...)`` (the guard class) over the loaded files; ``settings`` are passed
    on unchanged. ``model="none"`` builds no verifier and allows unverified requirements unless
    ``on_unverified="block"``. ``mode`` is the guard's (enforce, shadow); a verifier mode given there (the
    older spelling) is taken as ``verifier_mode``."""
    from policyguard.gate.hardgate import HardGate
    from policyguard.verifier.models import resolve_model

    if mode in _VERIFIER_MODES:
        mode, verifier_mode = "enforce", mode
    if on_unverified not in ("allow", "block"):
        raise ConfigError(f"on_unverified must be 'allow' or 'block', got {on_unverified!r}")
    loaded: Checklist = load_checklist(checklist)
    policy_text = _read_policy(Path(policy))
    backend = resolve_model(model)
    verifier: Verifier | None = None
    if backend is not None:
        from policyguard.verifier.llm import LLMVerifier

        verifier = LLMVerifier(backend, mode=verifier_mode)  # type: ignore[arg-type]
    try:
        trace = Trace(trace_path) if trace_path else None
    except OSError as exc:
        raise ConfigError(f"{trace_path}: cannot open the trace file: {exc.strerror or exc}") from None
    try:
        return build(
            loaded,
            policy_text,
            gate=HardGate(loaded) if use_gate else None,
            verifier=verifier,
            allow_unverified=backend is None and on_unverified == "allow",
            trace=trace,
            mode=mode,
            **settings,
        )
    except ChecklistError as exc:  # the policy pin: name both files
        if exc.field != "policy.version":
            raise
        raise ChecklistError(
            f"{exc.message} ({policy})", file=exc.file or str(checklist), line=exc.line, field=exc.field
        ) from None


def _read_policy(path: Path) -> str:
    """The policy text; a missing or unreadable file is a :class:`ConfigError` naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: the policy is not UTF-8 text: {exc}") from None
