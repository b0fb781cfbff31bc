"""Wall time of `policyguard bench replay` per domain, median of N runs (issue 12's replay target: airline <= 6 s).

    python benchmarks/bench_replay.py [--runs 3] [--domain airline --domain retail]

Each run is a fresh process (imports, tau2 data load, the whole suite), as a user would time it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per domain (default 3)")
    parser.add_argument("--domain", action="append", help="airline and/or retail (default both)")
    args = parser.parse_args()
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    for domain in args.domain or ["airline", "retail"]:
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "policyguard", "bench", "replay", "--domain", domain],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
                return 1
        print(f"bench replay --domain {domain}: median {statistics.median(walls):.2f} s over {len(walls)} runs "
              f"(min {min(walls):.2f}, max {max(walls):.2f}); load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
