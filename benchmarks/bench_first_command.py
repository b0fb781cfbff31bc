"""The README's first command, measured from nothing: a fresh venv, the core install, the demo.

Run: ``python benchmarks/bench_first_command.py [--python python3] [--demo-runs 5]``. It copies
nothing from the current environment: it creates a new virtual environment in a temporary
folder, runs ``pip install -c constraints.txt -e .`` there from the package registries (so it
needs PyPI, and pip's cache makes a second run faster: pass ``--no-cache`` for a cold one), then
runs ``policyguard demo`` ``--demo-runs`` times in a fresh directory. Prints the install's wall
time, the number of installed distributions, the size of site-packages, and the demo's median
wall time and exit code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3", help="the interpreter that makes the venv (default python3)")
    parser.add_argument("--demo-runs", type=int, default=5)
    parser.add_argument("--no-cache", action="store_true", help="pip --no-cache-dir: a cold download")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pg-first-") as scratch:
        venv = Path(scratch) / ".venv"
        start = time.perf_counter()
        subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", "constraints.txt", "-e", "."]
        if args.no_cache:
            pip.insert(4, "--no-cache-dir")
        subprocess.run(pip, check=True, cwd=ROOT)
        install_s = time.perf_counter() - start
        freeze = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze", "--exclude-editable"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        site = next((venv / "lib").glob("python3.*/site-packages"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        times, codes = [], []
        for run in range(args.demo_runs):
            cwd = Path(scratch) / f"run{run}"
            cwd.mkdir()
            begin = time.perf_counter()
            done = subprocess.run([str(venv / "bin" / "policyguard"), "demo"], cwd=cwd, env=env, capture_output=True)
            times.append(time.perf_counter() - begin)
            codes.append(done.returncode)
        print(
            f"install (venv + pip install -c constraints.txt -e .): {install_s:.1f} s"
            f"{' (cold, no pip cache)' if args.no_cache else ' (pip cache allowed)'}"
        )
        print(
            f"installed distributions besides policyguard-agents and pip: "
            f"{len([p for p in freeze if not p.lower().startswith(('pip==', 'setuptools=='))])}"
        )
        tooling = sum(
            _size_mb(d) for d in site.iterdir() if d.name.split("-")[0] in ("pip", "setuptools", "_distutils_hack")
        )
        print(f"site-packages: {_size_mb(site):.0f} MB ({_size_mb(site) - tooling:.0f} MB without pip and setuptools)")
        print(
            f"policyguard demo: median {statistics.median(times):.2f} s over {args.demo_runs} runs "
            f"(min {min(times):.2f}, max {max(times):.2f}); exit codes {sorted(set(codes))}"
        )
        return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
