"""A child process appending to one session (run with runpy in a spawned process; ``JOB`` is injected).

Each append is a call and its result, the result answering the call by a
relative reference (``answers=-1``), as a guard ingests a host's read.
"""

from __future__ import annotations

from typing import Any

from policyguard.enforcement.storeurl import open_store
from policyguard.session import NewEvent

JOB: dict[str, Any] = globals().get("JOB", {})


def main() -> None:
    store = open_store(JOB["url"], synchronous="NORMAL")
    JOB["barrier"].wait()
    for i in range(JOB["count"]):
        call_id = f"{JOB['tag']}-{i}"
        store.append_events(
            JOB["session"],
            [
                NewEvent(kind="call", call_id=call_id, tool="get_account", arguments={"i": i}),
                NewEvent(kind="result", call_id=call_id, answers=-1, content=f"result {i}"),
            ],
        )
    store.close()


if __name__ == "__main__":
    main()
