"""The refund case: an eval of a refund agent with and without PolicyGuard.

Its files and the two articles it comes from are in ``benchmarks/refund`` (README.md).

``load_eval`` reads ``benchmarks/refund/eval.yaml``; ``run_eval`` runs one
target (``buggy`` or ``fixed``) and writes per-trial JSON, ``summary.json``,
``trace.jsonl`` and the sandbox ledger; the release gate fails on any
unauthorized refund and is inconclusive when the ledger cannot be read.
"""

from __future__ import annotations

from .run import RunSummary, format_summary, load_summary, run_eval
from .spec import LoadedEval, load_eval

__all__ = ["LoadedEval", "RunSummary", "format_summary", "load_eval", "load_summary", "run_eval"]
