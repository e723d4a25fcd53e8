#!/usr/bin/env python3
"""Throughput of the ``vfs`` walk verbs (a benchmark, not a test).

Theory of operation
- Corpus: ``--files`` files (default 10,000) spread over ``--dirs`` directories (default 100),
  each a few lines with exactly one ``needle`` line, written once to a host directory on a tmpfs
  (``/dev/shm`` when it exists) and loaded once into a ``temp_fs``.
- Targets: ``temp`` (``temp_fs``), ``dir`` (``dir_fs`` over the tmpfs directory) and ``union``
  (``union_fs({"/mem": temp, "/disk": dir})``, twice the entries), against the kernel baseline on
  the same host directory: ``os.scandir`` for list and glob, a plain Python open/read/regex loop
  and ripgrep (``rg``, its default threads, process start included) for grep.
- Operations: ``list`` lists every directory (entries/s); ``glob`` is ``**/*.txt`` from the root
  (entries/s); ``grep`` finds ``needle`` everywhere (files/s; every file has one hit, checked).
- Repetitions are interleaved (rep 1 of every target and operation, then rep 2, ...) so a shared
  machine's drift hits every target alike; the report gives the median of each and its ratio to
  the kernel baseline of the same operation (``x`` = times slower than the baseline).
- Each vfs measurement runs in its own ``anyio.run`` (``--backend``); only the verb's iteration
  is timed, not the event loop's start.

Usage: ``.venv/bin/python bench/vfs_bench.py [--files N] [--dirs N] [--reps N] [--backend B]``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio

import vfs

NEEDLE = "needle"
UNIT = {"list": "entries/s", "glob": "entries/s", "grep": "files/s"}
BASELINE = {"list": "scandir", "glob": "scandir", "grep": "rg"}


@dataclass(frozen=True)
class Case:
    """One timed thing: ``run()`` returns (units done, seconds spent)."""

    target: str
    op: str
    run: Callable[[], tuple[int, float]]


def corpus(files: int, dirs: int) -> dict[str, str]:
    return {
        f"/d{i % dirs:03}/f{i:06}.txt": f"file {i}\nsome text here\n{NEEDLE} {i}\nend of file\n"
        for i in range(files)
    }


@contextmanager
def host_tree(files: dict[str, str], base: str | None) -> Iterator[Path]:
    if base is None and os.path.isdir("/dev/shm"):
        base = "/dev/shm"
    root = Path(tempfile.mkdtemp(prefix="vfs-bench-", dir=base))
    try:
        for path, text in files.items():
            target = root / path[1:]
            target.parent.mkdir(exist_ok=True)
            target.write_text(text)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- vfs measurements -------------------------------------------------------------------------


async def vfs_list(fs: vfs.FileSystem, directories: list[str]) -> tuple[int, float]:
    count = 0
    start = time.perf_counter()
    for directory in directories:
        async for _ in fs.list(directory):
            count += 1
    return count, time.perf_counter() - start


async def vfs_glob(fs: vfs.FileSystem) -> tuple[int, float]:
    count = 0
    start = time.perf_counter()
    async for _ in fs.glob("**/*.txt"):
        count += 1
    return count, time.perf_counter() - start


async def vfs_grep(fs: vfs.FileSystem) -> tuple[int, float]:
    count = 0
    start = time.perf_counter()
    async for _ in fs.grep(vfs.GrepQuery(NEEDLE)):
        count += 1
    return count, time.perf_counter() - start


def in_loop(backend: str, fn: Callable[..., object], *args: object) -> tuple[int, float]:
    result = anyio.run(partial(fn, *args), backend=backend)
    assert isinstance(result, tuple)
    return result


# --- kernel baselines -------------------------------------------------------------------------


def scandir_list(directories: list[Path]) -> tuple[int, float]:
    count = 0
    start = time.perf_counter()
    for directory in directories:
        with os.scandir(directory) as entries:
            for entry in entries:
                entry.is_dir(follow_symlinks=False)
                count += 1
    return count, time.perf_counter() - start


def scandir_glob(root: Path) -> tuple[int, float]:
    count = 0
    start = time.perf_counter()
    pending = [str(root)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif fnmatch.fnmatchcase(entry.name, "*.txt"):
                    count += 1
    return count, time.perf_counter() - start


def python_grep(root: Path) -> tuple[int, float]:
    regex = re.compile(NEEDLE)
    files = 0
    start = time.perf_counter()
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
            if any(regex.search(line) for line in text.split("\n")):
                files += 1
    return files, time.perf_counter() - start


def rg_grep(rg: str, root: Path) -> tuple[int, float]:
    start = time.perf_counter()
    done = subprocess.run(
        [rg, "--no-config", "--files-with-matches", NEEDLE, str(root)],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    return len(done.stdout.splitlines()), elapsed


# --- the run ----------------------------------------------------------------------------------


def cases(args: argparse.Namespace, files: dict[str, str], root: Path) -> list[Case]:
    directories = sorted({path.rsplit("/", 1)[0] for path in files})
    temp = vfs.temp_fs(files)
    disk = vfs.dir_fs(root)
    union = vfs.union_fs({"/mem": temp, "/disk": disk})
    union_dirs = ["/", "/mem", "/disk"] + [m + d for m in ("/mem", "/disk") for d in directories]
    trees: list[tuple[str, vfs.FileSystem, list[str]]] = [
        ("temp", temp, ["/", *directories]),
        ("dir", disk, ["/", *directories]),
        ("union", union, union_dirs),
    ]
    host_dirs = [root] + [root / d[1:] for d in directories]
    found: list[Case] = [
        Case("scandir", "list", partial(scandir_list, host_dirs)),
        Case("scandir", "glob", partial(scandir_glob, root)),
        Case("python", "grep", partial(python_grep, root)),
    ]
    rg = shutil.which("rg")
    if rg is not None:
        found.append(Case("rg", "grep", partial(rg_grep, rg, root)))
    for name, fs, dirs in trees:
        found += [
            Case(name, "list", partial(in_loop, args.backend, vfs_list, fs, dirs)),
            Case(name, "glob", partial(in_loop, args.backend, vfs_glob, fs)),
            Case(name, "grep", partial(in_loop, args.backend, vfs_grep, fs)),
        ]
    return found


def measure(all_cases: list[Case], reps: int) -> dict[tuple[str, str], tuple[int, float]]:
    """Median seconds of each case, repetitions interleaved; units must not vary between reps."""
    times: dict[tuple[str, str], list[float]] = {}
    units: dict[tuple[str, str], int] = {}
    for _ in range(reps):
        for case in all_cases:
            done, seconds = case.run()
            key = (case.target, case.op)
            assert units.setdefault(key, done) == done, f"{key}: {done} != {units[key]}"
            times.setdefault(key, []).append(seconds)
    return {key: (units[key], statistics.median(times[key])) for key in times}


def report(results: dict[tuple[str, str], tuple[int, float]], args: argparse.Namespace) -> None:
    print(
        f"vfs_bench: {args.files} files in {args.dirs} dirs, {args.reps} reps, "
        f"backend {args.backend}, python {sys.version.split()[0]}"
    )
    print("cost = time per unit relative to the kernel baseline of the same op (1.0 = as fast)")
    print(f"{'op':6} {'target':8} {'units':>7} {'median ms':>10} {'rate':>20} {'cost':>7}")
    for op in ("list", "glob", "grep"):
        base = results.get((BASELINE[op], op)) or results.get(("python", op))
        rows = sorted(results.items(), key=lambda row: (row[0][0] != BASELINE[op], row[0][0]))
        for (target, kind), (done, seconds) in rows:
            if kind != op:
                continue
            rate = done / seconds if seconds else float("inf")
            ratio = ""
            if base is not None and (target, kind) != (BASELINE[op], op):
                base_rate = base[0] / base[1]
                ratio = f"{base_rate / rate:6.1f}x" if rate else ""
            print(
                f"{op:6} {target:8} {done:7d} {seconds * 1000:10.1f} "
                f"{rate:10.0f} {UNIT[op]:<9} {ratio:>7}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--base", help="directory for the host tree (default /dev/shm)")
    args = parser.parse_args(argv)
    files = corpus(args.files, args.dirs)
    with host_tree(files, args.base) as root:
        results = measure(cases(args, files, root), args.reps)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
