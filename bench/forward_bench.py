#!/usr/bin/env python3
"""Cost of the wrappers on the verbs a mount calls for every request (a benchmark, not a test).

Theory of operation
- Trees: ``temp`` (a bare ``temp_fs``, the baseline), ``audit`` (``audited_fs`` over it),
  ``policy`` (``policy_fs`` with the repository rules), ``audit+policy`` (what ``mountd run``
  serves over a repository), and ``default`` (what ``mountd mount`` serves by default:
  ``turn_root(audited_fs(union_fs({"/": cow_fs(dir_fs(D)), "/tmp": temp_fs()})))``, D a
  ``/dev/shm`` directory), each holding the same ``/src/pkg/mod.py`` (and ``/tmp/x`` for the
  default tree's scratch).
- Verbs: ``lstat`` of a file, ``stat``, ``open`` + ``read`` + ``close`` of it, and ``list_info``
  of its directory; each is called ``--calls`` times in a row inside one ``trio.run``.
- Repetitions are interleaved (rep 1 of every tree and verb, then rep 2, ...); the report gives
  the best microseconds per call (the least disturbed by other work on a shared machine, as
  ``timeit`` reports) and the difference to the bare tree.

Usage: ``.venv/bin/python bench/forward_bench.py [--calls N] [--reps N]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

import vfs
from vfs import AuditLog, audited_fs, policy_fs, repository_policy
from vfs.lowlevel import list_info_of
from vfs.turns import turn_root

FILE = "/src/pkg/mod.py"
SCRATCH = "/tmp/x"


def trees(disk: str) -> dict[str, vfs.PosixFileSystem]:
    files = {FILE: "print('x')\n", "/.git/HEAD": "ref: refs/heads/main\n"}
    with open(f"{disk}/HEAD", "w") as handle:
        handle.write("x")
    host = vfs.dir_fs(disk)
    log = AuditLog(keep=16)
    default = turn_root(
        audited_fs(vfs.union_fs({"/": vfs.cow_fs(host), "/tmp": vfs.temp_fs()}), log)
    )
    found: dict[str, vfs.PosixFileSystem] = {
        "temp": vfs.temp_fs(files),
        "audit": audited_fs(vfs.temp_fs(files), log),
        "policy": policy_fs(vfs.temp_fs(files), repository_policy()),
        "audit+policy": audited_fs(policy_fs(vfs.temp_fs(files), repository_policy()), log),
        "default": default,
    }
    return found


async def prepare(tree: vfs.PosixFileSystem) -> None:
    if (await tree.lstat(FILE)).kind != "file":
        await tree.write(FILE, "print('x')\n")
    if isinstance(tree, vfs.turns.TurnRoot):
        await tree.write(SCRATCH, "x")


def verbs(tree: vfs.PosixFileSystem) -> dict[str, Callable[[], Awaitable[object]]]:
    listing = list_info_of(tree)

    async def open_read_close() -> None:
        file = await tree.open(FILE)
        await file.read(0, 4096)
        await file.close()

    return {
        "lstat": lambda: tree.lstat(FILE),
        "stat": lambda: tree.stat(FILE),
        "open+read+close": open_read_close,
        "list_info": lambda: listing("/src/pkg"),
    }


def measure(tree: vfs.PosixFileSystem, verb: str, calls: int) -> float:
    """Microseconds per call."""

    async def run() -> float:
        await prepare(tree)
        call = verbs(tree)[verb]
        for _ in range(100):
            await call()
        start = time.perf_counter()
        for _ in range(calls):
            await call()
        return (time.perf_counter() - start) / calls * 1e6

    return trio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    disk = tempfile.mkdtemp(prefix="forward-bench-", dir="/dev/shm")
    try:
        found = trees(disk)
        names = list(verbs(found["temp"]))
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.reps):
            for verb in names:
                for name, tree in found.items():
                    times.setdefault((name, verb), []).append(measure(tree, verb, args.calls))
        print(f"{'tree':<14}" + "".join(f"{verb:>18}" for verb in names))
        for name in found:
            cells = []
            for verb in names:
                best = min(times[(name, verb)])
                base = min(times[("temp", verb)])
                extra = "" if name == "temp" else f" ({best - base:+.2f})"
                cells.append(f"{best:.2f}{extra}".rjust(18))
            print(f"{name:<14}" + "".join(cells))
        print(f"microseconds per call, best of {args.reps} reps; (+x): over the bare temp_fs")
    finally:
        shutil.rmtree(disk, ignore_errors=True)


if __name__ == "__main__":
    main()
