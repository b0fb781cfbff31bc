"""Cold start: how long a fresh process takes to import the library and to decide one call.

Run: ``python benchmarks/bench_cold_start.py [--runs 10]``. Prints the median
wall time of ``--runs`` fresh interpreters for

(a) ``python -c "from policyguard import Guard, load_checklist"`` (target <= 100 ms);
(b) ``python -m policyguard verify --model none`` on an airline case - the
    shipped airline checklist (53 checks), tau2's airline policy, a real replay
    dialogue and its pending ``update_reservation_baggages`` call, gate only
    (target <= 300 ms);
(c) ``python -c "pass"``, the interpreter's own start, for scale;
(d) importing pydantic and PyYAML and validating one model: what (a) cannot
    go below while the checklist is pydantic models read from YAML;
(e) ``python -c "import pydantic"`` alone.

``--importtime`` also prints the ten slowest imports of (b) (``python -X importtime``).
Needs the ``tau2`` extra (for the airline policy text).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _airline_case(folder: Path) -> list[str]:
    """Write the policy, trajectory and call of one replay decision; the verify arguments for them."""
    import importlib.util

    import tau2

    from policyguard.resources import shipped_checklist
    from policyguard.trajectory.formats import from_trajectory

    spec = importlib.util.spec_from_file_location("gate_decisions", ROOT / "benchmarks" / "gate_decisions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _, cases = module.load_cases()
    call, trajectory, _, _ = next(c for c in cases if c[0].name == "update_reservation_baggages")
    (folder / "trajectory.json").write_text(json.dumps(from_trajectory(trajectory, "openai_chat")), encoding="utf-8")
    (folder / "call.json").write_text(
        json.dumps(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
        ),
        encoding="utf-8",
    )
    policy = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "airline" / "policy.md"
    return [
        "verify",
        "--policy", str(policy),
        "--checklist", str(shipped_checklist("airline")),
        "--trajectory", str(folder / "trajectory.json"),
        "--call", str(folder / "call.json"),
        "--model", "none",
    ]  # fmt: skip


_PYDANTIC_FLOOR = (
    "import yaml\nfrom pydantic import BaseModel, Field\nclass M(BaseModel):\n    x: int = Field(0)\nM(x=1)"
)


def _median_ms(command: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, int]:
    """(median wall ms, median CPU ms of the child, last exit code); CPU time is what load on a shared machine
    distorts least."""
    walls, cpus = [], []
    code = 0
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        code = done.returncode
    return statistics.median(walls), statistics.median(cpus), code


def _slowest_imports(command: list[str], env: dict[str, str], top: int = 10) -> list[tuple[int, str]]:
    done = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]], env=env, capture_output=True, text=True, timeout=120
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not name.startswith(" "):
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per command (default 10)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest imports of verify")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as folder:
        # an installed package has its bytecode compiled: keep the .pyc files in a scratch folder (not the
        # checkout) even where PYTHONDONTWRITEBYTECODE is set, and warm them up before timing
        env: dict[str, Any] = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(folder) / "pycache")
        verify = [python, "-m", "policyguard", *_airline_case(Path(folder))]
        subprocess.run(verify, env=env, capture_output=True, timeout=120)
        bare = _median_ms([python, "-c", "pass"], args.runs, env)
        floor = _median_ms([python, "-c", _PYDANTIC_FLOOR], args.runs, env)
        pydantic = _median_ms([python, "-c", "import pydantic"], args.runs, env)
        imports = _median_ms([python, "-c", "from policyguard import Guard, load_checklist"], args.runs, env)
        decided = _median_ms(verify, args.runs, env)
        print(
            f"medians of {args.runs} fresh processes                 wall      CPU   (target; verify exit {decided[2]})"
        )
        print(f"(a) from policyguard import Guard, load_checklist {imports[0]:7.1f}  {imports[1]:7.1f} ms  (<= 100)")
        print(f"(b) policyguard verify, airline case              {decided[0]:7.1f}  {decided[1]:7.1f} ms  (<= 300)")
        print(f"(c) python -c pass                                {bare[0]:7.1f}  {bare[1]:7.1f} ms")
        print(f"(d) import pydantic + yaml, one BaseModel         {floor[0]:7.1f}  {floor[1]:7.1f} ms  (floor of (a))")
        print(f"(e) python -c 'import pydantic'                   {pydantic[0]:7.1f}  {pydantic[1]:7.1f} ms")
        if args.importtime:
            print("slowest imports of (b), cumulative us:")
            for micros, name in _slowest_imports(verify, env):
                print(f"  {micros:9d}  {name}")


if __name__ == "__main__":
    main()
