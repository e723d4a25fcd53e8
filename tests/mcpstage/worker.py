"""A peer for the concurrency test: stages and disposes sessions at random until a deadline.

``python -m tests.mcpstage.worker WORKTREE START DEADLINE SEED LOG`` (times since the epoch;
all peers start together at START): every completed operation is
appended to LOG as ``staged KEY`` or ``disposed KEY [cleaned]`` (after it returned), so the test can tell
which leases must be live. A busy lock is retried; any other failure ends the worker non-zero.
"""

from __future__ import annotations

import random
import sys
import time

import mcpstage


def main(argv: list[str]) -> int:
    worktree, start, deadline = argv[0], float(argv[1]), float(argv[2])
    seed, log_path = int(argv[3]), argv[4]
    time.sleep(max(0.0, start - time.time()))
    rng = random.Random(seed)
    mine: list[str] = []
    busy = 0
    with open(log_path, "a", encoding="ascii") as log:
        while time.time() < deadline:
            # Cycles of 3 s, the same for all peers: half a second leaning to staging, then
            # draining long enough for the worktree to empty even through a slow mount on a
            # loaded machine (16 disposals queue on one lock), while final cleanups still race
            # the odd fresh bootstrap.
            draining = time.time() % 3.0 >= 0.5
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
