#!/usr/bin/env python3
"""What checkpoints cost, as ratios against the same tree's own work (a benchmark, not a test).

Theory of operation
- Trees (``--trees``): ``temp`` (a ``temp_fs`` holding the corpus), ``cow`` (a ``cow_fs`` over a
  ``dir_fs`` of the corpus on a tmpfs, its upper in memory: ``mountd mount --ephemeral``'s root)
  and ``durable`` (the same with a ``dir_fs`` upper on that tmpfs: ``mountd mount``'s default,
  whose checkpoints are files beside its record).
- Corpus: ``--files`` files (default 50,000) of ``--size`` bytes (default 1 KiB) in 500
  directories.
- A *turn* rewrites N files (N in ``--changed``, default 10, 1,000 and 10,000) through the API;
  its time is the baseline. Then, timed: a checkpoint after the turn, a rewind to the checkpoint
  before the turn (over those N changes), and a fork of the checkpoint. Each is reported as its
  time and as a percentage of the turn's. Every tree takes one checkpoint first (a first
  checkpoint freezes every node once: O(tree), not measured).
- Space: 100 turns, each rewriting the same 1% of the files with new bytes, each followed by a
  checkpoint. Reported: the bytes the checkpoints hold beyond the live tree (memory trees: the
  distinct file pages of all the checkpoints that the first one did not hold; durable: the
  size of the packs, blobs and checkpoint files), against the bytes the turns wrote.
- Each timed step runs after a full garbage collection, with the collector off (its pauses are
  the process's, not the step's).
- ``--mount``: the same trees served by a real mount (``mountd.mounted``, in this process), the
  turn made through it (a worker thread opens, writes and closes each file, as a tool would) and
  the checkpoint, rewind and fork asked of the daemon's control channel (``Controller``: what
  ``mountd checkpoint`` does; the mount gives keepers to what a rewind replaces). The baseline is then
  the turn an agent's tools make; the space table is the API's.
- Targets (issue 20): a checkpoint after a 1,000-file turn under 5% of the turn; 100
  checkpoints under 2x the changed bytes.

Usage: ``.venv/bin/python bench/checkpoint_bench.py [--files N] [--size B] [--changed 10,1000]
[--trees temp,cow,durable] [--reps N] [--mount]``. Needs a tmpfs (``/dev/shm``) for the host
trees, and root (or FUSE access) with ``--mount``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

import vfs
from vfs.lowlevel import page_space

DIRS = 500


def corpus_paths(files: int) -> list[str]:
    return [f"/d{index % DIRS:03d}/f{index:06d}.txt" for index in range(files)]


def content(index: int, generation: int, size: int) -> bytes:
    head = f"{index} {generation}\n".encode()
    return (head * (size // len(head) + 1))[:size]


def write_host(root: Path, paths: list[str], size: int) -> None:
    for index, path in enumerate(paths):
        target = root / path[1:]
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(content(index, 0, size))


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    box: list[Any] = []

    async def body() -> None:
        box.append(await fn())

    anyio.run(body, backend="trio")
    return box[0]


def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    # The cyclic collector's pauses (a full pass over every node of a 50,000-file tree) would
    # land on whichever step runs then: collect before, and not during, each timed step.
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        value = run(fn)
        return time.perf_counter() - start, value
    finally:
        gc.enable()


class Bench:
    def __init__(self, kind: str, files: int, size: int, scratch: Path) -> None:
        self.kind = kind
        self.size = size
        self.paths = corpus_paths(files)
        self.scratch = scratch
        self.generation = 0
        if kind == "temp":
            self.tree: Any = vfs.temp_fs(
                {path: content(i, 0, size) for i, path in enumerate(self.paths)}
            )
        else:
            lower = scratch / f"{kind}-lower"
            lower.mkdir()
            write_host(lower, self.paths, size)
            upper = None
            if kind == "durable":
                (scratch / f"{kind}-upper").mkdir()
                upper = vfs.dir_fs(str(scratch / f"{kind}-upper"))
            self.tree = vfs.cow_fs(vfs.dir_fs(str(lower)), upper)

    def turn(self, count: int) -> float:
        self.generation += 1
        chosen = self.paths[:count]
        generation = self.generation

        async def body() -> None:
            for index, path in enumerate(chosen):
                await self.tree.write(path, content(index, generation, self.size))

        return timed(body)[0]

    def checkpoint(self) -> tuple[float, vfs.Checkpoint]:
        return timed(lambda: self.tree.checkpoint())  # type: ignore[no-any-return]

    def space(self) -> int:
        if self.kind == "durable":
            reserved = self.scratch / f"{self.kind}-upper" / ".agentroot-cow"
            return sum(
                p.stat().st_size
                for sub in ("blobs", "packs", "checkpoints")
                if (reserved / sub).is_dir()
                for p in (reserved / sub).iterdir()
            )
        history = self.tree._history
        states = history.states()
        roots = [s if self.kind == "temp" else s.upper for s in states]
        return page_space(roots) - page_space(roots[:1])


def measure(kind: str, args: argparse.Namespace, scratch: Path) -> list[str]:
    lines = []
    bench = Bench(kind, args.files, args.size, scratch)
    bench.checkpoint()  # the first freezes every node once
    for count in args.changed:
        turns, checkpoints, rewinds, forks = [], [], [], []
        for _ in range(args.reps):
            turns.append(bench.turn(count))
            seconds, record = bench.checkpoint()
            checkpoints.append(seconds)
            before = record.number - 1
            rewinds.append(timed(lambda n=before: bench.tree.rewind(n))[0])
            forks.append(timed(lambda n=record.number: bench.tree.fork(n))[0])
            run(lambda n=record.number: bench.tree.rewind(n))  # back to the turn's state
        turn = statistics.median(turns)
        for name, values in (("checkpoint", checkpoints), ("rewind", rewinds), ("fork", forks)):
            value = statistics.median(values)
            lines.append(
                f"| {kind} | {count:,} | {name} | {value * 1000:.1f} ms | {turn * 1000:.1f} ms "
                f"| {100 * value / turn:.1f}% |"
            )
    return lines


def measure_mounted(kind: str, args: argparse.Namespace, scratch: Path) -> list[str]:
    import trio

    from mountd import mounted
    from mountd._control import Controller

    bench = Bench(kind, args.files, args.size, scratch)
    mnt = scratch / "mnt"
    mnt.mkdir()
    lines: list[str] = []

    def write_through(count: int, generation: int) -> None:
        for index, path in enumerate(bench.paths[:count]):
            with open(f"{mnt}{path}", "wb") as file:
                file.write(content(index, generation, bench.size))

    async def body() -> None:
        async with mounted(bench.tree, mnt):
            control = Controller(bench.tree, str(mnt))  # (the mount keeps what a rewind replaces)

            async def ask(**request: Any) -> dict[str, Any]:
                reply = await control.handle({"op": "checkpoint", **request})
                assert reply["ok"], reply
                return reply

            async def step(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
                gc.collect()
                gc.disable()
                try:
                    start = time.perf_counter()
                    value = await fn()
                    return time.perf_counter() - start, value
                finally:
                    gc.enable()

            await ask()  # the first freezes every node once
            for count in args.changed:
                turns, checkpoints, rewinds, forks = [], [], [], []
                for _ in range(args.reps):
                    bench.generation += 1
                    generation = bench.generation
                    seconds, _ = await step(
                        lambda c=count, g=generation: trio.to_thread.run_sync(write_through, c, g)
                    )
                    turns.append(seconds)
                    seconds, reply = await step(ask)
                    checkpoints.append(seconds)
                    number = reply["checkpoint"]["number"]
                    rewind = await step(lambda n=number - 1: ask(action="rewind", number=n))
                    rewinds.append(rewind[0])
                    forks.append((await step(lambda n=number: bench.tree.fork(n)))[0])
                    await ask(action="rewind", number=number)  # back to the turn's state
                turn = statistics.median(turns)
                for name, values in (
                    ("checkpoint", checkpoints),
                    ("rewind", rewinds),
                    ("fork", forks),
                ):
                    value = statistics.median(values)
                    lines.append(
                        f"| {kind} (mount) | {count:,} | {name} | {value * 1000:.1f} ms "
                        f"| {turn * 1000:.1f} ms | {100 * value / turn:.1f}% |"
                    )

    trio.run(body)
    return lines


def measure_space(kind: str, args: argparse.Namespace, scratch: Path) -> str:
    bench = Bench(kind, args.files, args.size, scratch)
    bench.checkpoint()
    before = bench.space()
    count = max(1, args.files // 100)
    for _ in range(100):
        bench.turn(count)
        bench.checkpoint()
    held = bench.space() - before
    written = 100 * count * args.size
    return (
        f"| {kind} | {count:,} files x 100 | {written:,} B | {held:,} B | {held / written:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--changed", type=lambda t: [int(x) for x in t.split(",")], default=[10, 1000, 10000]
    )
    parser.add_argument("--trees", default="temp,cow,durable")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-space", action="store_true")
    parser.add_argument("--mount", action="store_true", help="turns through a real mount")
    args = parser.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    kinds = args.trees.split(",")
    print(f"corpus: {args.files:,} files of {args.size} B in {DIRS} directories; {args.reps} reps")
    print("\n| tree | files changed | step | time | the turn's | ratio |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        scratch = Path(tempfile.mkdtemp(prefix="checkpoint-bench-", dir=base))
        try:
            for line in (measure_mounted if args.mount else measure)(kind, args, scratch):
                print(line, flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.no_space:
        return
    print("\n| tree | turns | bytes written | checkpoints hold | ratio |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        scratch = Path(tempfile.mkdtemp(prefix="checkpoint-bench-", dir=base))
        try:
            print(measure_space(kind, args, scratch), flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
