#!/usr/bin/env python3
"""A real project's test suite on the host and inside ``mountd run`` (a benchmark, not a test).

Theory of operation
- The project: networkx's source distribution from PyPI (about 5,800 tests), unpacked into a
  cache directory with pytest installed beside it (``.bench-deps``, on ``PYTHONPATH``), run by the
  host's ``/usr/bin/python3``, the interpreter the sandbox shows. ``--project DIR`` and
  ``--command`` run another project instead.
- Targets: ``host`` (the suite in the directory itself) and one ``mountd run`` per ``--mountd``
  executable (default: this checkout's), so two versions of mountd (a checkout before a change and
  one after) are measured in one run. The suite's environment reaches the sandbox through
  ``--env`` where that mountd has it (and is simply inherited where it does not).
- Repetitions are interleaved (rep 1 on every target, then rep 2, ...), so a shared machine's
  drift hits every target alike; the report gives each target's median wall time and its ratio
  to the host's, and checks that every run passed the same number of tests.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MOUNTD = HERE.parent / ".venv" / "bin" / "mountd"
PROJECT = "networkx==3.6.1"
COMMAND = "python3 -m pytest -q -p no:cacheprovider networkx"
ENV = {"PYTHONPATH": ".bench-deps", "PYTHONDONTWRITEBYTECODE": "1"}


def prepare(cache: Path) -> Path:
    """networkx's sdist unpacked under ``cache``, with pytest beside it (done once)."""
    name = PROJECT.replace("==", "-")
    root = cache / name
    if (root / ".bench-deps").is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(
        [*pip, "download", "--no-deps", "--no-binary", ":all:", PROJECT, "-d", str(cache)],
        check=True,
    )
    with tarfile.open(cache / f"{name}.tar.gz") as archive:
        archive.extractall(cache, filter="data")
    subprocess.run([*pip, "install", "--target", str(root / ".bench-deps"), "pytest"], check=True)
    return root


def passed(output: str) -> str:
    found = re.findall(r"(\d+ passed[^\n]*?) in [\d.]+s", output)
    return found[-1] if found else "?"


def run_once(target: str, project: Path, command: str) -> tuple[float, str]:
    env = {**os.environ, **ENV}
    if target == "host":
        argv = ["sh", "-c", command.replace("python3", "/usr/bin/python3", 1)]
    else:
        has_env = (
            "--env"
            in subprocess.run(
                [target, "run", "--help"], capture_output=True, text=True, check=False
            ).stdout
        )
        flags = [arg for name in ENV for arg in ("--env", name)] if has_env else []
        argv = [target, "run", *flags, "--", "sh", "-c", command]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{target}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, passed(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mountd", action="append", help="a mountd executable (repeatable)")
    parser.add_argument("--project", type=Path, help="the project's directory (default: networkx)")
    parser.add_argument("--command", default=COMMAND, help="the test command, run with sh -c")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "agentroot-bench", help="downloads"
    )
    args = parser.parse_args()
    project = args.project.resolve() if args.project else prepare(args.cache)
    targets = ["host", *(args.mountd or [str(DEFAULT_MOUNTD)])]
    times: dict[str, list[float]] = {target: [] for target in targets}
    results: set[str] = set()
    for rep in range(1, args.reps + 1):
        for target in targets:
            elapsed, result = run_once(target, project, args.command)
            times[target].append(elapsed)
            results.add(result)
            print(f"rep {rep} {target}: {elapsed:.2f} s ({result})", flush=True)
    host = statistics.median(times["host"])
    print(f"\n{'target':<60} {'median s':>9} {'x host':>7}")
    for target in targets:
        median = statistics.median(times[target])
        print(f"{target:<60} {median:>9.2f} {median / host:>7.3f}")
    if len(results) != 1:
        print(f"\nthe runs disagree on the result: {sorted(results)}")
        return 1
    print(f"\nevery run: {results.pop()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
