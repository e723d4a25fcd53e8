#!/usr/bin/env python3
"""What one change costs through each tree's Python API, per operation (a benchmark, not a test).

Theory of operation
- Trees (``--trees``): ``temp`` (``temp_fs``), ``cow`` (``cow_fs`` over a ``dir_fs``, its upper
  in memory), ``cowdisk`` (the same with a ``dir_fs`` upper) and ``repo``: exactly the tree
  ``mountd run`` serves over a project (``default_tree``: the cow with its durable upper and
  policy, under the audit log and the turn root). Every host directory is on ``/dev/shm``.
- ``host``: the same operations as system calls on a ``/dev/shm`` directory (``os.open``,
  ``os.utime``, ``os.rename``...), the floor, measured in the same run; each tree's cost is
  reported as a ratio to it.
- Operations, ``--files`` at a time, in this order: create a file and write 1 KiB; set its
  times; ``lstat``; open and close it; 1 KiB writes to one open file; rename each; unlink each.
  Each figure is the best of ``--reps`` rounds (trees and host interleaved), per operation.

Usage: ``.venv/bin/python bench/tree_ops_bench.py [--files 2000] [--reps 5]
[--trees temp,cow,cowdisk,repo]``; ``PYTHONPATH=<other checkout>`` measures another tree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import vfs

OPS = ("create+write", "setattr", "lstat", "open+close", "write", "rename", "unlink")
DATA = b"x" * 1024


def make(kind: str, scratch: str) -> Any:
    lower = os.path.join(scratch, "lower")
    upper = os.path.join(scratch, "upper")
    os.makedirs(lower)
    os.makedirs(upper)
    if kind == "temp":
        return vfs.temp_fs()
    if kind == "cow":
        return vfs.cow_fs(vfs.dir_fs(lower))
    if kind == "cowdisk":
        return vfs.cow_fs(vfs.dir_fs(lower), vfs.dir_fs(upper))
    from mountd._run import default_tree
    from vfs.turns import turn_root

    log = vfs.AuditLog(os.path.join(scratch, "audit.jsonl"))
    return turn_root(vfs.audited_fs(default_tree(lower, Path(upper))[0], log))


async def tree_ops(kind: str, files: int) -> dict[str, float]:
    scratch = tempfile.mkdtemp(dir="/dev/shm")
    try:
        fs = make(kind, scratch)
        await fs.mkdir("/d")
        names = [f"/d/f{i}" for i in range(files)]

        async def create() -> None:
            for name in names:
                handle = await fs.open(name, write=True, create=True)
                await handle.write(0, DATA)
                await handle.close()

        async def setattr_() -> None:
            for name in names:
                await fs.setattr(name, atime_ns=5, mtime_ns=5)

        async def lstat() -> None:
            for name in names:
                await fs.lstat(name)

        async def open_close() -> None:
            for name in names:
                await (await fs.open(name)).close()

        async def write() -> None:
            handle = await fs.open(names[0], write=True)
            for i in range(files):
                await handle.write(i * len(DATA), DATA)
            await handle.close()

        async def rename() -> None:
            for name in names:
                await fs.rename(name, name.replace("/f", "/g"))

        async def unlink() -> None:
            for name in names:
                await fs.unlink(name.replace("/f", "/g"))

        steps = (create, setattr_, lstat, open_close, write, rename, unlink)
        return {op: await timed(step) for op, step in zip(OPS, steps, strict=True)}
    finally:
        shutil.rmtree(scratch)


async def timed(step: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await step()
    return time.perf_counter() - start


def host_ops(files: int) -> dict[str, float]:
    scratch = tempfile.mkdtemp(dir="/dev/shm")
    try:
        names = [os.path.join(scratch, f"f{i}") for i in range(files)]
        found: dict[str, float] = {}

        def step(op: str, body: Callable[[], None]) -> None:
            start = time.perf_counter()
            body()
            found[op] = time.perf_counter() - start

        def create() -> None:
            for name in names:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, DATA)
                os.close(fd)

        def write() -> None:
            fd = os.open(names[0], os.O_WRONLY)
            for i in range(files):
                os.pwrite(fd, DATA, i * len(DATA))
            os.close(fd)

        def each(call: Callable[[str], object]) -> Callable[[], None]:
            def body() -> None:
                for name in names:
                    call(name)

            return body

        step("create+write", create)
        step("setattr", each(lambda name: os.utime(name, ns=(5, 5))))
        step("lstat", each(os.lstat))
        step("open+close", each(lambda name: os.close(os.open(name, os.O_RDONLY))))
        step("write", write)
        step("rename", each(lambda name: os.rename(name, name + "g")))
        step("unlink", each(lambda name: os.unlink(name + "g")))
        return found
    finally:
        shutil.rmtree(scratch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--trees", default="temp,cow,cowdisk,repo")
    args = parser.parse_args()
    kinds = args.trees.split(",")
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.reps):
        rounds = {"host": host_ops(args.files)}
        for kind in kinds:
            rounds[kind] = trio.run(tree_ops, kind, args.files)
        for kind, found in rounds.items():
            for op, seconds in found.items():
                best[kind, op] = min(best.get((kind, op), float("inf")), seconds)
    print("| tree | " + " | ".join(OPS) + " |")
    print("|---|" + "---:|" * len(OPS))
    for kind in ["host", *kinds]:
        cells = []
        for op in OPS:
            per = best[kind, op] / args.files * 1e6
            ratio = best[kind, op] / best["host", op]
            cells.append(f"{per:.1f} us" + ("" if kind == "host" else f" ({ratio:.1f}x)"))
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
