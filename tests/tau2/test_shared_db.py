"""Fresh tau2 databases share one validated copy until a record is read by key, and stay independent.

The replay builds dozens of environments; validating the database for each was
most of its time. These tests are the proof that sharing changes nothing: a
write on one fresh database is invisible to the next, the shared tables never
change, a change that slips past the copy is caught, and the whole replay's
output is the same as with a privately validated database per environment.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.cowdb import CopyOnAccess, PristineChanged, SharedTables  # noqa: E402
from policyguard.bench.tau2.domain import DomainData  # noqa: E402
from policyguard.bench.tau2.guarding import build_guard  # noqa: E402
from policyguard.bench.tau2.replay import ReplaySuite  # noqa: E402
from policyguard.checklist.schema import load_checklist  # noqa: E402
from policyguard.resources import shipped_checklist  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def airline() -> DomainData:
    return DomainData.load("airline")


@pytest.fixture(scope="module")
def retail() -> DomainData:
    return DomainData.load("retail")


def _cancel(data: DomainData, reservation_id: str) -> Any:
    env = data.fresh_env()
    assert env.tools is not None
    return env, env.tools.cancel_reservation(reservation_id=reservation_id)


def test_a_fresh_database_equals_the_validated_one(airline: DomainData, retail: DomainData) -> None:
    for data in (airline, retail):
        shared = data.fresh_env().tools
        private = data.fresh_env(private=True).tools
        assert shared is not None and private is not None
        assert shared.get_db_hash() == private.get_db_hash()
        assert shared.db.model_dump() == private.db.model_dump()


def test_a_write_on_one_fresh_database_is_not_seen_by_the_next(airline: DomainData) -> None:
    env, result = _cancel(airline, "Z7GOZK")
    assert result.status == "cancelled"
    assert env.tools.db.reservations["Z7GOZK"].status == "cancelled"
    later = airline.fresh_env().tools
    assert later is not None
    assert later.db.reservations["Z7GOZK"].status != "cancelled"
    airline.shared_db.check_untouched()


def test_a_booking_adds_a_record_only_to_its_own_database(airline: DomainData) -> None:
    env = airline.fresh_env()
    env.tools.db.reservations["NEW001"] = copy.deepcopy(env.tools.db.reservations["Z7GOZK"])
    assert "NEW001" in env.tools.db.reservations
    assert "NEW001" not in airline.fresh_env().tools.db.reservations
    airline.shared_db.check_untouched()


def test_a_change_to_a_record_reached_by_a_scan_is_caught(retail: DomainData) -> None:
    """A tool that changed a record it found by iterating would change every later database: refused."""
    shared = SharedTables(retail.fresh_env(private=True).tools.db)
    db = shared.fresh()
    first = next(iter(db.users.values()))
    first.email = "attacker@example.com"
    with pytest.raises(PristineChanged, match="changed a database record"):
        shared.check_untouched()


def test_reads_by_key_copy_and_scans_only_read() -> None:
    class Record:
        def __init__(self, n: int) -> None:
            self.n = n

    pristine = {"a": Record(1), "b": Record(2)}
    table = CopyOnAccess(pristine)
    assert table["a"] is not pristine["a"]
    assert table["a"] is table["a"]  # copied once, then the table's own
    assert table.get("b") is not pristine["b"]
    assert table.get("missing", "default") == "default"
    table["a"].n = 99
    assert pristine["a"].n == 1
    assert table.setdefault("c", Record(3)).n == 3
    assert "c" not in pristine
    assert table.pop("c").n == 3 and "c" not in table
    with pytest.raises(KeyError):
        table.pop("c")
    assert table.pop("c", None) is None


def test_copies_of_a_table_share_nothing_with_the_pristine_records() -> None:
    pristine = {"a": [1, 2]}
    for clone in (CopyOnAccess(pristine).copy(), copy.deepcopy(CopyOnAccess(pristine)),
                  pickle.loads(pickle.dumps(CopyOnAccess(pristine)))):  # fmt: skip
        assert type(clone) is dict
        clone["a"].append(3)
        assert pristine["a"] == [1, 2]


def _replay_json(data: DomainData, *, private: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if private:
        build = DomainData.fresh_env
        monkeypatch.setattr(DomainData, "fresh_env", lambda self, private=False: build(self, private=True))
    checklist = load_checklist(shipped_checklist(data.domain))
    guard = build_guard("gate_only", checklist, data.policy_text)
    assert guard is not None
    report = ReplaySuite(data, checklist, guard, config="gate_only").run(evaluate_tasks=["4", "10"])
    monkeypatch.undo()
    out = json.loads(report.model_dump_json())
    out.pop("runtime_s")
    return out


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_the_replay_is_identical_with_shared_and_with_private_databases(
    domain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = DomainData.load(domain)
    shared = _replay_json(data, private=False, monkeypatch=monkeypatch)
    private = _replay_json(DomainData.load(domain), private=True, monkeypatch=monkeypatch)
    assert shared == private
    assert shared["violations_blocked"] == shared["violations_total"] > 0
