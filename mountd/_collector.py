"""The garbage collector of a process that exists to serve mounts.

A mount keeps a node, a FileInfo and kernel attributes alive for every inode the kernel holds,
and every request allocates (coroutine frames, FileInfos, tuples). With CPython's default
thresholds (a young collection every 700 allocations, an older one every tenth) the collector
keeps walking that long-lived heap: in a handler loop over dir_fs (5,000 files created, written
and listed) 38 collections took 10-85 ms of a 0.4-0.6 s run, and a listing cost 3.3-6.9 us an
entry against 2.7-2.8 with collections rare. Nearly everything the daemon frees goes by
reference counting; the collector is only for cycles (an exception's traceback and its frames),
so collecting young objects every 50,000 allocations instead costs a few megabytes of cycles at
most. What is alive once the mount is up (modules, the tree as built) is frozen out of every
later collection.

Only for processes that serve (``mountd mount``, ``mountd run``, the benchmark's daemon): the
setting is the whole process's, so :func:`mountd.mounted` inside a harness's own program leaves
it alone.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def tune_for_serving() -> None:
    """Freeze what is alive now and collect young objects every 50,000 allocations."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
