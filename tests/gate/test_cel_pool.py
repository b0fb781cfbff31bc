"""The isolated tier is a pool in two lanes: what it withstands.

A full queue is refused at once, a deadline covers the wait, a costly check is killed at its deadline and
its worker restarted, and a flood of costly checks neither delays nor refuses a cheap one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from policyguard.gate import celprocess
from policyguard.gate.celprocess import LARGE_STEPS, IsolatedBusy, IsolatedTimeout

HOSTILE = "args.a.all(x, !(x in args.b))"  # ~36M steps over these lists: seconds of engine time
IDS = [str(k) for k in range(6_000)]
HOSTILE_ARGS = {"args": {"a": IDS, "b": [f"other-{i}" for i in IDS]}}


@pytest.fixture(autouse=True)
def _fresh_pool() -> Iterator[None]:
    yield
    celprocess.configure()  # back to the defaults; stops this test's workers


def _flood(count: int, seconds: float) -> list[threading.Thread]:
    def one() -> None:
        try:
            celprocess.evaluate(HOSTILE, HOSTILE_ARGS, seconds, cost=LARGE_STEPS * 100)
        except (IsolatedTimeout, IsolatedBusy):
            pass

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def _warm() -> None:
    assert celprocess.evaluate("1 + 1 == 2", {}, 60.0) is True  # cold starts are not what these tests time


def test_a_full_queue_is_refused_at_once() -> None:
    celprocess.configure(workers=1, queue=0)
    _warm()
    threads = _flood(1, 3.0)
    time.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(IsolatedBusy, match="busy; refused at once"):
        celprocess.evaluate("true", {}, 5.0)
    assert time.monotonic() - started < 0.5
    for thread in threads:
        thread.join(10)


def test_the_deadline_covers_the_wait_for_a_worker() -> None:
    celprocess.configure(workers=1, queue=4)
    _warm()
    threads = _flood(1, 3.0)
    time.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout):
        celprocess.evaluate("true", {}, 0.3)
    assert time.monotonic() - started < 1.5  # not the 3 s the busy worker holds on
    for thread in threads:
        thread.join(10)


def test_an_over_budget_check_is_killed_after_its_time_and_its_slot_restarted() -> None:
    celprocess.configure(workers=1, queue=4)
    _warm()
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match="stopped"):
        celprocess.evaluate(HOSTILE, HOSTILE_ARGS, 0.5, cost=LARGE_STEPS * 100)
    assert time.monotonic() - started < 3
    assert celprocess.evaluate("args.x + 1", {"args": {"x": 1}}, 60.0) == 2  # the slot works again


def test_a_cheap_check_is_answered_while_over_budget_checks_flood_the_pool() -> None:
    """8 concurrent over-budget checks on 2 workers: the cheap one still gets the worker they may not all take."""
    celprocess.configure(workers=2, queue=16)
    _warm()
    _warm()
    threads = _flood(8, 1.5)
    time.sleep(0.3)
    answers: list[Any] = []
    started = time.monotonic()
    for _ in range(5):
        answers.append(celprocess.evaluate("args.x * 2", {"args": {"x": 21}}, 1.0))
    assert answers == [42] * 5
    assert time.monotonic() - started < 2.5  # each waits at most for a restart, never behind the flood
    for thread in threads:
        thread.join(30)


def test_a_freed_worker_goes_to_the_costly_check_with_the_most_time_left() -> None:
    """Not to the oldest, about to run out of time: it would be killed soon after it started, its slot restarted."""
    pool = celprocess._Pool(celprocess.PoolSettings(workers=2, queue=4))  # costly checks hold 1 worker at a time
    held, reserved = pool.acquire(True, time.monotonic() + 10)
    assert not reserved
    got: list[str] = []

    def wait(name: str, seconds: float) -> None:
        try:
            pool.acquire(True, time.monotonic() + seconds)
            got.append(name)
        except IsolatedTimeout:
            got.append(f"{name} timed out")

    oldest = threading.Thread(target=wait, args=("oldest", 1.0))
    oldest.start()
    time.sleep(0.2)
    newest = threading.Thread(target=wait, args=("newest", 5.0))
    newest.start()
    time.sleep(0.2)
    pool.release(held, reserved)
    oldest.join(5)
    newest.join(5)
    assert got == ["newest", "oldest timed out"]


def test_a_cheap_check_is_not_delayed_by_a_flood_of_costly_ones() -> None:
    """One worker of two is reserved for cheap checks: each answer within 0.5 s (alone: ~10 ms), 20 in a row."""
    celprocess.configure(workers=2, queue=16)
    _warm()
    threads = _flood(8, 1.0)
    time.sleep(0.3)
    slowest = 0.0
    for _ in range(20):
        started = time.monotonic()
        assert celprocess.evaluate("args.x * 2", {"args": {"x": 21}}, 1.0) == 42
        slowest = max(slowest, time.monotonic() - started)
    assert slowest < 0.5
    for thread in threads:
        thread.join(30)


def test_a_full_costly_lane_does_not_refuse_a_cheap_check() -> None:
    """Each lane has its own queue: costly checks past theirs are refused at once, a cheap one is answered."""
    celprocess.configure(workers=2, queue=1)
    _warm()
    threads = _flood(2, 3.0)  # one runs on the shared worker, one waits: the costly queue is full
    time.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(IsolatedBusy, match="costly checks are taken"):
        celprocess.evaluate(HOSTILE, HOSTILE_ARGS, 3.0, cost=LARGE_STEPS * 100)
    assert time.monotonic() - started < 0.5
    assert celprocess.evaluate("args.x * 2", {"args": {"x": 21}}, 1.0) == 42
    for thread in threads:
        thread.join(10)


def test_a_worker_that_died_is_replaced_for_the_next_check() -> None:
    celprocess.configure(workers=1, queue=4)
    _warm()
    pool = celprocess._current()
    (worker,) = pool.idle[False]
    assert worker is not None
    worker.kill()
    worker.wait(5)
    assert celprocess.evaluate("args.x + 1", {"args": {"x": 1}}, 60.0) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_costly_checks_run_on_spare_cpu_and_the_reserved_worker_at_normal_priority() -> None:
    celprocess.configure(workers=2, queue=4)
    pool = celprocess._current()
    worker, reserved = pool.acquire(True, time.monotonic() + 60)  # the costly lane: a shared worker
    assert not reserved
    worker = celprocess._start(pool.low(reserved))
    cheap = celprocess._start(pool.low(True))
    try:
        assert os.sched_getscheduler(worker.pid) == os.SCHED_IDLE
        assert os.sched_getscheduler(cheap.pid) == os.SCHED_OTHER
    finally:
        celprocess._stop(worker)
        celprocess._stop(cheap)
        pool.release(None, reserved)
