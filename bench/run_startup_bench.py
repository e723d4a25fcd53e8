#!/usr/bin/env python3
"""What ``mountd run -- true`` costs on an empty directory: mount, sandbox, summary, unmount.

Theory of operation
-------------------
Each ``--mountd`` command (a ``mountd`` executable: this checkout's ``.venv/bin/mountd``, or a
wrapper that runs another checkout's) runs ``mountd run -- true`` in one empty directory,
``--reps`` times, interleaved (rep 1 of every command, then rep 2, ...) so a shared machine's
drift hits all alike. Reported per command: the median and minimum wall time, and the median CPU
time (user + system) of the whole process tree, which another user's load moves less than the
wall time. On a busy machine, run it under ``chrt -f 10`` (root) so that the runs wait for no
other process: the wall time is then what a quiet machine would show.

The runs are timed as an installed command runs: with the project's bytecode cached. Each
command runs once, untimed, before the timed runs, and none inherits PYTHONDONTWRITEBYTECODE
(without cached bytecode every run compiles the project's modules again: about 0.1 s more).

    .venv/bin/python bench/run_startup_bench.py --reps 10 --mountd .venv/bin/mountd
    chrt -f 10 .venv/bin/python bench/run_startup_bench.py --mountd OLD/mountd --mountd .venv/bin/mountd
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mountd", action="append", required=True, help="a mountd command (repeat)")
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    args.mountd = [os.path.abspath(m) if os.sep in m else m for m in args.mountd]
    wall: dict[str, list[float]] = {m: [] for m in args.mountd}
    cpu: dict[str, list[float]] = {m: [] for m in args.mountd}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="agentroot-startup-") as empty:
        for mountd in args.mountd:  # writes the bytecode caches, untimed
            subprocess.run([mountd, "run", "--", "true"], cwd=empty, env=env, capture_output=True)
        for _ in range(args.reps):
            for mountd in args.mountd:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(
                    [mountd, "run", "--", "true"],
                    cwd=empty,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                wall[mountd].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[mountd].append(
                    after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                )
                if done.returncode != 0:
                    sys.exit(f"{mountd} run -- true failed ({done.returncode}):\n{done.stderr}")
            if os.listdir(empty):
                sys.exit(f"mountd run left something in {empty}: {os.listdir(empty)}")
    for mountd in args.mountd:
        print(
            f"{mountd}: wall median {statistics.median(wall[mountd]):.3f} s "
            f"(min {min(wall[mountd]):.3f}), CPU median {statistics.median(cpu[mountd]):.3f} s, "
            f"{args.reps} runs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
