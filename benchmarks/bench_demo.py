"""``policyguard demo`` end to end: how long a newcomer's first command takes.

Run: ``python benchmarks/bench_demo.py [--runs 5]``. Times ``--runs`` fresh
``python -m policyguard demo --out DIR`` processes (interpreter start, imports,
the three guarded calls, the SQLite store with ``synchronous=FULL``, the INV-1
audit, the narration) and prints the median wall time, the range and the median
CPU time of the child. Each run writes into a fresh temporary folder. Needs only
the core install.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_demo(runs: int) -> tuple[list[float], list[float]]:
    """Wall and child-CPU seconds of each run; raises when a run does not exit 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    walls, cpus = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "policyguard", "demo", "--out", str(Path(folder) / "out")],
                capture_output=True,
                text=True,
                env=env,
                cwd=folder,
            )
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
            if done.returncode != 0:
                raise SystemExit(f"policyguard demo exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes to time (default 5)")
    args = parser.parse_args()
    walls, cpus = time_demo(args.runs)
    print(
        f"policyguard demo, {args.runs} runs: median {statistics.median(walls):.2f} s wall "
        f"(range {min(walls):.2f}-{max(walls):.2f} s), median {statistics.median(cpus):.2f} s CPU, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
