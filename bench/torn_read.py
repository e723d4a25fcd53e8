"""How often a read racing a truncation sees bytes the file never held, and what keeping the cut
bytes costs the daemon (results: bench/results/torn-read.md).

The race is ``tests/mountd/test_torn_reads.py``'s (a saver truncating a file in place, a renamer
renaming a new version over it and reading it back with one ``read(2)``), run longer here::

    .venv/bin/python bench/torn_read.py race --seconds 20                    # temp, cow, tmpfs
    .venv/bin/python bench/torn_read.py race --trees temp --how ftruncate --handles
    .venv/bin/python bench/torn_read.py cost                                 # handler CPU

``cost`` times a SETATTR that truncates a 500-byte file plus the WRITE that follows (an in-place
save), in this process through ``mountd._ops.Operations`` (no kernel), in CPU time, best of 7.
Run it from the repository root (it imports the test suite's helpers). Needs root for ``race``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyfuse3
import trio

import vfs
from mountd import MountOptions
from mountd._attrs import AttrPolicy
from mountd._inodes import ROOT_INODE
from mountd._ops import Operations
from mountd._terms import Terms
from tests.mountd import compositions
from tests.mountd.mounting import mount_process
from tests.mountd.test_torn_reads import builder, race


def run_race(trees: list[str], how: str, seconds: float, handles: bool) -> None:
    for tree in trees:
        base = Path(tempfile.mkdtemp(dir="/dev/shm"))
        if tree == "tmpfs":
            (base / "x").mkdir()
            print(tree, how, race(base / "x", how, seconds), flush=True)
            continue
        mnt = base / "mnt"
        mnt.mkdir()
        options = MountOptions(files_by_inode=not handles)
        with mount_process(builder(tree, base), mnt, options) as mounted:
            (mnt / "x").mkdir()
            result = race(mnt / "x", how, seconds)
            raced = mounted.stats()["counters"].get("read_raced_truncate", 0)
        mode = "handles" if handles else "by inode"
        print(tree, how, mode, result, "reads that raced a truncation:", raced, flush=True)


def run_cost(count: int) -> None:
    ctx: Any = SimpleNamespace(uid=0, gid=0, pid=0, umask=0o022)
    fields: Any = SimpleNamespace(
        update_size=True,
        update_mode=False,
        update_uid=False,
        update_gid=False,
        update_atime=False,
        update_mtime=False,
    )
    attr = pyfuse3.EntryAttributes()
    attr.st_size = 0

    async def one(tree: str) -> None:
        if tree == "temp":
            fs: Any = vfs.temp_fs({"/f": b"A" * 500})
        else:
            base = Path(tempfile.mkdtemp(dir="/dev/shm"))
            (base / "lower").mkdir()
            (base / "upper").mkdir()
            (base / "lower" / "f").write_bytes(b"A" * 500)
            fs = compositions.cow_durable(base / "lower", base / "upper")
        ops = Operations(
            fs,
            terms=Terms(files_by_inode=True, kernel_drops_pages=False),
            attrs=AttrPolicy(
                uid=0, gid=0, entry_timeout=300, attr_timeout=300, negative_timeout=300
            ),
            origin=object(),
        )
        ino = (await ops.lookup(ROOT_INODE, b"f", ctx)).st_ino
        best = float("inf")
        for _ in range(7):
            start = time.process_time()
            for _ in range(count):
                await ops.setattr(ino, attr, fields, None, ctx)
                await ops.write(ino, 0, b"A" * 500)
            best = min(best, (time.process_time() - start) / count)
        print(f"{tree}: {best * 1e6:.1f} us CPU per truncating SETATTR + WRITE", flush=True)

    for tree in ("temp", "cow"):
        trio.run(functools.partial(one, tree))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    racing = sub.add_parser("race")
    racing.add_argument("--trees", default="temp,cow,tmpfs")
    racing.add_argument("--how", choices=("o_trunc", "ftruncate"), default="o_trunc")
    racing.add_argument("--seconds", type=float, default=10.0)
    racing.add_argument("--handles", action="store_true", help="MountOptions(files_by_inode=False)")
    costing = sub.add_parser("cost")
    costing.add_argument("--count", type=int, default=3000)
    args = parser.parse_args()
    if args.what == "race":
        run_race(args.trees.split(","), args.how, args.seconds, args.handles)
    else:
        run_cost(args.count)


if __name__ == "__main__":
    main()
