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

The command line's own imports (``mountd.cli``: the modules, classes and functions of trio,
pyfuse3, vfs and mountd, alive for the whole process) are made with the collector off and then
frozen (:func:`pause_for_imports`, :func:`settle_imports`, called by ``mountd._entry``, the
``mountd`` command and ``python -m mountd``): its passes over them during the imports, and the
full one at interpreter exit, free nothing and cost a ``mountd run`` about a sixth of its
start-up. Cycles left by the imports themselves are frozen with them (a few kilobytes, never
collected). A program that imports ``mountd.cli`` itself (a test) is left alone: frozen objects
are invisible to ``gc.get_referrers``, which Hypothesis relies on.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def pause_for_imports() -> bool:
    """Turn the collector off for the imports that follow; whether it was on."""
    was = gc.isenabled()
    gc.disable()
    return was


def settle_imports(was: bool) -> None:
    """After the imports: freeze what they made, and turn the collector back on if it was."""
    gc.freeze()
    if was:
        gc.enable()


def tune_for_serving() -> None:
    """Freeze what is alive now and collect young objects every 50,000 allocations."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
