"""Old import paths that still work for one release, each with a ``DeprecationWarning``.

The package was regrouped into concept subpackages (see ``docs/architecture.md``).
Every module that moved keeps its old path: ``policyguard/_moved/`` holds one
two-line module per old path, and ``policyguard/__init__.py`` adds that folder
to the package's ``__path__`` so ``import policyguard.store`` finds it. The
forwarding module replaces itself with the real one, so
``policyguard.store.SQLiteStore is policyguard.enforcement.store.SQLiteStore``:
one class, not a copy. A moved *package* (``policyguard.formats``...) also
forwards its submodules, through a finder installed the first time an old
package path is imported (never by ``import policyguard`` itself).

The old names ``policyguard.checklist``, ``gate``, ``verifier`` and ``guard``
are packages now and export what those modules did; ``policyguard.approvals``
(the executor's approval check until now) forwards its three names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

MOVED: dict[str, str] = {
    "policyguard.approvalflow": "policyguard.approvals.flow",
    "policyguard.approvalqueue": "policyguard.approvals.queue",
    "policyguard.canonical": "policyguard.trajectory.canonical",
    "policyguard.cel": "policyguard.gate.cel",
    "policyguard.celcost": "policyguard.gate.celcost",
    "policyguard.celprocess": "policyguard.gate.celprocess",
    "policyguard.checkgen": "policyguard.authoring.checkgen",
    "policyguard.checkgen.tools": "policyguard.authoring.tools",
    "policyguard.formats._common": "policyguard.trajectory.formats.common",
    "policyguard.checkinit": "policyguard.authoring.checkinit",
    "policyguard.counters": "policyguard.audit.counters",
    "policyguard.dialogue": "policyguard.verifier.dialogue",
    "policyguard.effects": "policyguard.gate.effects",
    "policyguard.evidence": "policyguard.verifier.evidence",
    "policyguard.executor": "policyguard.enforcement.executor",
    "policyguard.factpaths": "policyguard.gate.factpaths",
    "policyguard.facts": "policyguard.gate.facts",
    "policyguard.formats": "policyguard.trajectory.formats",
    "policyguard.grants": "policyguard.enforcement.grants",
    "policyguard.groupcommit": "policyguard.enforcement.groupcommit",
    "policyguard.harness": "policyguard.bench.harness",
    "policyguard.inputs": "policyguard.trajectory.inputs",
    "policyguard.inv1": "policyguard.audit.inv1",
    "policyguard.jsontext": "policyguard.trajectory.jsontext",
    "policyguard.jws": "policyguard.enforcement.jws",
    "policyguard.limits": "policyguard.trajectory.limits",
    "policyguard.messages": "policyguard.trajectory.messages",
    "policyguard.models": "policyguard.verifier.models",
    "policyguard.pgapprovals": "policyguard.approvals.pgqueue",
    "policyguard.pgstore": "policyguard.enforcement.pgstore",
    "policyguard.prompts": "policyguard.verifier.prompts",
    "policyguard.purge": "policyguard.enforcement.purge",
    "policyguard.refund": "policyguard.bench.refund",
    "policyguard.scoped": "policyguard.enforcement.scoped",
    "policyguard.store": "policyguard.enforcement.store",
    "policyguard.storeurl": "policyguard.enforcement.storeurl",
    "policyguard.strictjson": "policyguard.trajectory.strictjson",
    "policyguard.tau2": "policyguard.bench.tau2",
    "policyguard.toolnames": "policyguard.trajectory.toolnames",
    "policyguard.trace": "policyguard.audit.trace",
    "policyguard.validate": "policyguard.authoring.validate",
    "policyguard.verdict": "policyguard.verifier.verdict",
    "policyguard.wrapper": "policyguard.integrations.openai_loop",
    "policyguard.yamlsource": "policyguard.checklist.yamlsource",
}
"""Old module path -> where it lives now."""

_PACKAGES = (
    "policyguard.formats",
    "policyguard.models",
    "policyguard.checkgen",
    "policyguard.tau2",
    "policyguard.refund",
)


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old path works until the next release", DeprecationWarning, stacklevel=3
    )


def forward(old: str) -> ModuleType:
    """Import the module that ``old`` moved to and stand it in for ``old`` in ``sys.modules``."""
    new = MOVED[old]
    _warn(old, new)
    module = importlib.import_module(new)
    sys.modules[old] = module
    if old in _PACKAGES:
        _FINDER.install()
    return module


def moved_name(module: str, name: str, new_module: str) -> Any:
    """``name`` read from ``module``, where it no longer lives: warn and return it from ``new_module``."""
    _warn(f"{module}.{name}", f"{new_module}.{name}")
    return getattr(importlib.import_module(new_module), name)


class _Alias(importlib.abc.Loader):
    """Loads an old submodule path as the module it moved to (the same object, not a copy)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        return None


class _SubmoduleFinder(importlib.abc.MetaPathFinder):
    """Finds ``policyguard.tau2.domain`` and the like: a submodule of a package that moved."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._installed = False

    def install(self) -> None:
        with self._lock:
            if not self._installed:
                sys.meta_path.insert(0, self)
                self._installed = True

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        for old in _PACKAGES:
            if fullname.startswith(old + "."):
                new = MOVED.get(fullname) or MOVED[old] + fullname[len(old) :]
                _warn(fullname, new)
                return importlib.util.spec_from_loader(fullname, _Alias(new))
        return None


_FINDER = _SubmoduleFinder()
