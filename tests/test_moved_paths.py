"""Old import paths keep working for a release after the package was regrouped into concept subpackages.

Each old module path imports, warns once with a ``DeprecationWarning`` naming
where the module lives now, and *is* that module (one class object, not a
copy: ``isinstance`` and ``except`` keep working across old and new paths).
The four old modules whose names are packages now (``checklist``, ``gate``,
``verifier``, ``guard``) export the same public names without a warning;
``policyguard.approvals`` forwards the executor's approval check with one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

MOVED = [
    ("policyguard.approvalflow", "policyguard.approvals.flow"),
    ("policyguard.approvalqueue", "policyguard.approvals.queue"),
    ("policyguard.canonical", "policyguard.trajectory.canonical"),
    ("policyguard.cel", "policyguard.gate.cel"),
    ("policyguard.celcost", "policyguard.gate.celcost"),
    ("policyguard.celprocess", "policyguard.gate.celprocess"),
    ("policyguard.checkgen", "policyguard.authoring.checkgen"),
    ("policyguard.checkgen.ask", "policyguard.authoring.checkgen.ask"),
    ("policyguard.checkgen.assemble", "policyguard.authoring.checkgen.assemble"),
    ("policyguard.checkgen.cache", "policyguard.authoring.checkgen.cache"),
    ("policyguard.checkgen.cli", "policyguard.authoring.checkgen.cli"),
    ("policyguard.checkgen.pipeline", "policyguard.authoring.checkgen.pipeline"),
    ("policyguard.checkgen.schemas", "policyguard.authoring.checkgen.schemas"),
    ("policyguard.checkgen.tools", "policyguard.authoring.tools"),
    ("policyguard.checkinit", "policyguard.authoring.checkinit"),
    ("policyguard.counters", "policyguard.audit.counters"),
    ("policyguard.dialogue", "policyguard.verifier.dialogue"),
    ("policyguard.effects", "policyguard.gate.effects"),
    ("policyguard.evidence", "policyguard.verifier.evidence"),
    ("policyguard.executor", "policyguard.enforcement.executor"),
    ("policyguard.factpaths", "policyguard.gate.factpaths"),
    ("policyguard.facts", "policyguard.gate.facts"),
    ("policyguard.formats", "policyguard.trajectory.formats"),
    ("policyguard.formats._common", "policyguard.trajectory.formats.common"),
    ("policyguard.formats.anthropic", "policyguard.trajectory.formats.anthropic"),
    ("policyguard.formats.chat_history", "policyguard.trajectory.formats.chat_history"),
    ("policyguard.formats.detect", "policyguard.trajectory.formats.detect"),
    ("policyguard.formats.langchain", "policyguard.trajectory.formats.langchain"),
    ("policyguard.formats.openai_chat", "policyguard.trajectory.formats.openai_chat"),
    ("policyguard.formats.openai_responses", "policyguard.trajectory.formats.openai_responses"),
    ("policyguard.grants", "policyguard.enforcement.grants"),
    ("policyguard.groupcommit", "policyguard.enforcement.groupcommit"),
    ("policyguard.harness", "policyguard.bench.harness"),
    ("policyguard.inputs", "policyguard.trajectory.inputs"),
    ("policyguard.inv1", "policyguard.audit.inv1"),
    ("policyguard.jsontext", "policyguard.trajectory.jsontext"),
    ("policyguard.jws", "policyguard.enforcement.jws"),
    ("policyguard.limits", "policyguard.trajectory.limits"),
    ("policyguard.messages", "policyguard.trajectory.messages"),
    ("policyguard.models", "policyguard.verifier.models"),
    ("policyguard.models.anthropic_backend", "policyguard.verifier.models.anthropic_backend"),
    ("policyguard.models.base", "policyguard.verifier.models.base"),
    ("policyguard.models.litellm_backend", "policyguard.verifier.models.litellm_backend"),
    ("policyguard.models.litellm_names", "policyguard.verifier.models.litellm_names"),
    ("policyguard.models.openai_backend", "policyguard.verifier.models.openai_backend"),
    ("policyguard.models.pricing", "policyguard.verifier.models.pricing"),
    ("policyguard.models.scripted", "policyguard.verifier.models.scripted"),
    ("policyguard.models.sdk", "policyguard.verifier.models.sdk"),
    ("policyguard.pgapprovals", "policyguard.approvals.pgqueue"),
    ("policyguard.pgstore", "policyguard.enforcement.pgstore"),
    ("policyguard.prompts", "policyguard.verifier.prompts"),
    ("policyguard.purge", "policyguard.enforcement.purge"),
    ("policyguard.refund", "policyguard.bench.refund"),
    ("policyguard.refund.run", "policyguard.bench.refund.run"),
    ("policyguard.refund.sandbox", "policyguard.bench.refund.sandbox"),
    ("policyguard.refund.scoring", "policyguard.bench.refund.scoring"),
    ("policyguard.refund.spec", "policyguard.bench.refund.spec"),
    ("policyguard.refund.targets", "policyguard.bench.refund.targets"),
    ("policyguard.scoped", "policyguard.enforcement.scoped"),
    ("policyguard.store", "policyguard.enforcement.store"),
    ("policyguard.storeurl", "policyguard.enforcement.storeurl"),
    ("policyguard.strictjson", "policyguard.trajectory.strictjson"),
    ("policyguard.tau2", "policyguard.bench.tau2"),
    ("policyguard.tau2.agent", "policyguard.bench.tau2.agent"),
    ("policyguard.tau2.cowdb", "policyguard.bench.tau2.cowdb"),
    ("policyguard.tau2.domain", "policyguard.bench.tau2.domain"),
    ("policyguard.tau2.guarding", "policyguard.bench.tau2.guarding"),
    ("policyguard.tau2.labels", "policyguard.bench.tau2.labels"),
    ("policyguard.tau2.metrics", "policyguard.bench.tau2.metrics"),
    ("policyguard.tau2.probes", "policyguard.bench.tau2.probes"),
    ("policyguard.tau2.replay", "policyguard.bench.tau2.replay"),
    ("policyguard.tau2.replay_domains", "policyguard.bench.tau2.replay_domains"),
    ("policyguard.tau2.replay_view", "policyguard.bench.tau2.replay_view"),
    ("policyguard.tau2.report", "policyguard.bench.tau2.report"),
    ("policyguard.tau2.results", "policyguard.bench.tau2.results"),
    ("policyguard.tau2.runner", "policyguard.bench.tau2.runner"),
    ("policyguard.tau2.scripted", "policyguard.bench.tau2.scripted"),
    ("policyguard.tau2.sims", "policyguard.bench.tau2.sims"),
    ("policyguard.tau2.sims.load", "policyguard.bench.tau2.sims.load"),
    ("policyguard.tau2.sims.model", "policyguard.bench.tau2.sims.model"),
    ("policyguard.tau2.sims.replay", "policyguard.bench.tau2.sims.replay"),
    ("policyguard.tau2.sims.view", "policyguard.bench.tau2.sims.view"),
    ("policyguard.tau2.transcript", "policyguard.bench.tau2.transcript"),
    ("policyguard.tau2.violations", "policyguard.bench.tau2.violations"),
    ("policyguard.tau2.violations_retail", "policyguard.bench.tau2.violations_retail"),
    ("policyguard.toolnames", "policyguard.trajectory.toolnames"),
    ("policyguard.trace", "policyguard.audit.trace"),
    ("policyguard.validate", "policyguard.authoring.validate"),
    ("policyguard.verdict", "policyguard.verifier.verdict"),
    ("policyguard.wrapper", "policyguard.integrations.openai_loop"),
    ("policyguard.yamlsource", "policyguard.checklist.yamlsource"),
]
"""Every module path of the flat layout that moved, and where it lives now."""

SAME_NAME = {
    "policyguard.checklist": ("policyguard.checklist.schema", ["Checklist", "load_checklist", "parse_checklist", "ToolSpec"]),
    "policyguard.gate": ("policyguard.gate.hardgate", ["HardGate", "compile_checklist_checks"]),
    "policyguard.verifier": ("policyguard.verifier.llm", ["LLMVerifier", "policy_tag_id", "MODES"]),
    "policyguard.guard": ("policyguard.guard.core", ["Guard", "after_block", "remediation_message"]),
}


def _run(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter (a clean ``sys.modules``) and read the JSON it prints."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_old_module_path_is_the_module_it_moved_to_and_warns_naming_it() -> None:
    pytest.importorskip("tau2", reason="the old policyguard.tau2 paths import tau2 (extra 'tau2')")
    results = _run(
        f"""
        import importlib, json, sys, warnings
        out = {{}}
        for old, new in {MOVED!r}:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = importlib.import_module(old)
            messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
            out[old] = {{
                "same": module is sys.modules[new] if new in sys.modules else module is importlib.import_module(new),
                "warned": any(old in m and new in m for m in messages),
            }}
        print(json.dumps(out))
        """
    )
    wrong = {old: r for old, r in results.items() if r != {"same": True, "warned": True}}
    assert wrong == {}
    assert len(results) == len(MOVED)


def test_a_class_from_an_old_path_is_the_class_from_the_new_path() -> None:
    results = _run(
        """
        import json, warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        from policyguard.store import SQLiteStore as old_store
        from policyguard.enforcement.store import SQLiteStore
        from policyguard.formats.openai_chat import read as old_read
        from policyguard.trajectory.formats.openai_chat import read
        from policyguard.messages import DuplicateCallId as old_error
        from policyguard.trajectory.messages import DuplicateCallId
        print(json.dumps([old_store is SQLiteStore, old_read is read, old_error is DuplicateCallId]))
        """
    )
    assert results == [True, True, True]


@pytest.mark.parametrize("old", sorted(SAME_NAME))
def test_an_old_module_that_is_a_package_now_exports_the_same_names_without_a_warning(old: str) -> None:
    new, names = SAME_NAME[old]
    results = _run(
        f"""
        import importlib, json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            package = importlib.import_module({old!r})
        module = importlib.import_module({new!r})
        same = [getattr(package, name) is getattr(module, name) for name in {names!r}]
        print(json.dumps({{"same": same, "warnings": [str(w.message) for w in caught]}}))
        """
    )
    assert results == {"same": [True] * len(names), "warnings": []}


def test_the_approval_check_read_from_its_old_module_warns_and_is_the_same_class() -> None:
    results = _run(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from policyguard.approvals import RecordApprovals
        from policyguard.enforcement.approvalcheck import RecordApprovals as current
        print(json.dumps([RecordApprovals is current, [str(w.message) for w in caught]]))
        """
    )
    assert results[0] is True
    assert any("policyguard.enforcement.approvalcheck.RecordApprovals" in m for m in results[1])


def test_import_policyguard_installs_no_import_hook() -> None:
    """The old package paths' finder is installed only when such a path is imported, never by the import."""
    results = _run(
        """
        import json, sys
        before = list(sys.meta_path)
        import policyguard
        policyguard.Guard
        after_import = list(sys.meta_path) == before
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        import policyguard.formats.openai_chat
        print(json.dumps([after_import, len(sys.meta_path) - len(before)]))
        """
    )
    assert results == [True, 1]
