"""The CEL worker process: compiles and evaluates checks sent by :mod:`.celprocess`, one at a time.

Started as ``python -m policyguard.gate.celworker``; the parent kills it when a
check runs past its time. Messages are length-prefixed pickles on stdin and
stdout (the parent's own pipes, never a socket).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

from .cel import CelError, compile_check, evaluate_unbounded
from .celprocess import HEADER


def serve() -> None:  # pragma: no cover - runs in the worker process
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # only the protocol goes to the parent

    def send(message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(HEADER.pack(len(data)) + data)
        stdout.flush()

    programs: dict[str, Any] = {}
    send(("ready", None))
    while True:
        header = stdin.read(HEADER.size)
        if len(header) < HEADER.size:
            return
        source, variables = pickle.loads(stdin.read(HEADER.unpack(header)[0]))
        try:
            if len(programs) > 1024:  # a checklist has a few hundred checks; anything else is not kept
                programs.clear()
            program = programs.get(source) or programs.setdefault(source, compile_check(source))
            send(("ok", evaluate_unbounded(program, variables)))
        except CelError as exc:
            send(("error", str(exc)))


if __name__ == "__main__":  # pragma: no cover
    serve()
