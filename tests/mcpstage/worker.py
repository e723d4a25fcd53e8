"""A peer for the concurrency test: stages and disposes sessions at random until told to stop.

``python -m tests.mcpstage.worker WORKTREE CONTROL SEED LOG``: CONTROL is a file the test
rewrites with the phase all peers are in (``wait``, ``stage``, ``drain`` or ``stop``), so the
phases follow what happened (a drain lasts until the worktree emptied), not a clock a loaded
machine cannot keep. Every completed operation is appended to LOG as ``staged KEY`` or
``disposed KEY [cleaned]`` (after it returned), so the test can tell which leases must be live.
A busy lock is retried; any other failure ends the worker non-zero.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import mcpstage


def main(argv: list[str]) -> int:
    worktree, control, seed, log_path = argv[0], Path(argv[1]), int(argv[2]), argv[3]
    rng = random.Random(seed)
    mine: list[str] = []
    busy = 0
    with open(log_path, "a", encoding="ascii") as log:
        while (phase := control.read_text().strip()) != "stop":
            # Staging leans to two sessions each; draining disposes them, while the odd fresh
            # bootstrap still races the final cleanups.
            if phase == "wait":
                time.sleep(0.01)
                continue
            draining = phase == "drain"
            if (not draining and len(mine) < 2) or (draining and rng.random() < 0.003):
                entry = mcpstage.ServerEntry("node", (f"bridge-{seed}.js", str(rng.random())))
                try:
                    outcome = mcpstage.stage(worktree, entry, wait=20)
                except mcpstage.BusyError:
                    busy += 1
                    continue
                assert outcome.lease is not None
                mine.append(outcome.lease.key)
                log.write(f"staged {outcome.lease.key}\n")
            elif not mine:
                time.sleep(0.02)
                continue
            else:
                key = mine.pop(rng.randrange(len(mine)))
                try:
                    outcome = mcpstage.dispose(worktree, key, wait=20)
                except mcpstage.BusyError:
                    busy += 1
                    mine.append(key)
                    continue
                log.write(f"disposed {key}{' cleaned' if outcome.cleaned else ''}\n")
            log.flush()
    print(busy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
