#!/usr/bin/env python3
"""Throughput of ``host_fs(S3HostFiles)`` against boto3 used directly, on the same store, same run.

Theory of operation
- Store: a SeaweedFS server started for the run (``tests/s3/weed.py``: ``weed server -s3`` on
  loopback, a temporary data directory), or ``--endpoint URL`` with credentials in the environment
  and ``--bucket``. Each repetition works in a fresh key prefix.
- Operations, each done by both sides one request at a time (as a mount's requests for one file
  are), on ``--files`` files of ``--size`` bytes in one directory, plus one ``--big-mib`` file:
  ``write`` creates every file (``put_object`` / ``write``: for the tree that includes the checks
  that a new name is not a directory and has no file as a parent, from the cache once the
  directory is known); ``overwrite`` replaces each once more (the tree's write is a
  compare-and-swap, ``If-Match``); ``list`` lists the directory (``list_objects_v2`` pages /
  ``list``) from a cold cache; ``read`` reads every file from a cold cache (a ``GET`` each on
  both sides); ``read_warm`` reads them again: boto3 GETs again, the tree answers from its cache
  while ``metadata_ttl`` lasts and with conditional GETs (304, no body) after; ``big_write`` / ``big_read`` move the big
  file (multipart upload above 8 MiB on both sides: boto3's ``upload_fileobj`` with the same
  threshold and part size).
- Reporting: repetitions are interleaved; the median of each (files/s, entries/s or MiB/s) and the
  ratio of boto3 to the tree (``x`` = how many times slower the tree is; below 1, faster).

Usage: ``.venv/bin/python bench/s3_bench.py [--files N] [--size BYTES] [--big-mib N] [--reps N]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vfs
from tests.s3.weed import WeedServer
from vfs import S3HostFiles
from vfs.lowlevel import DEFAULT_PART_SIZE

OPS = ("write", "overwrite", "list", "read", "read_warm", "big_write", "big_read")
UNIT = {"list": "entries/s", "big_write": "MiB/s", "big_read": "MiB/s"}


@contextmanager
def store(args: argparse.Namespace) -> Iterator[tuple[Any, str]]:
    """A boto3 client and a bucket: the given endpoint's, or a weed server's for this run."""
    if args.endpoint:
        import boto3

        yield boto3.client("s3", endpoint_url=args.endpoint), args.bucket
        return
    with tempfile.TemporaryDirectory(prefix="s3-bench-") as root:
        server = WeedServer(Path(root))
        server.start()
        try:
            client = server.client()
            client.create_bucket(Bucket=args.bucket)
            yield client, args.bucket
        finally:
            server.stop()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def boto3_side(
    client: Any, bucket: str, prefix: str, names: list[str], data: bytes, big: bytes
) -> dict[str, float]:
    from boto3.s3.transfer import TransferConfig

    transfer = TransferConfig(
        multipart_threshold=DEFAULT_PART_SIZE, multipart_chunksize=DEFAULT_PART_SIZE
    )
    seconds: dict[str, float] = {}

    def write() -> None:
        for name in names:
            client.put_object(Bucket=bucket, Key=f"{prefix}/d/{name}", Body=data)

    def listing() -> None:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{prefix}/d/", Delimiter="/"
        )
        count = sum(len(page.get("Contents", [])) for page in pages)
        assert count == len(names), count

    def read() -> None:
        for name in names:
            body = client.get_object(Bucket=bucket, Key=f"{prefix}/d/{name}")["Body"].read()
            assert len(body) == len(data)

    def big_write() -> None:
        client.upload_fileobj(io.BytesIO(big), bucket, f"{prefix}/big.bin", Config=transfer)

    def big_read() -> None:
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/big.bin")["Body"].read()
        assert len(body) == len(big)

    seconds["write"] = timed(write)
    seconds["overwrite"] = timed(write)
    seconds["list"] = timed(listing)
    seconds["read"] = timed(read)
    seconds["read_warm"] = timed(read)
    seconds["big_write"] = timed(big_write)
    seconds["big_read"] = timed(big_read)
    return seconds


def tree_side(
    client: Any,
    bucket: str,
    prefix: str,
    names: list[str],
    data: bytes,
    big: bytes,
    ttl: float,
    backend: str,
) -> dict[str, float]:
    text = data.decode()
    seconds: dict[str, float] = {}

    def fresh_tree() -> vfs.HostFileSystem:
        return vfs.host_fs(S3HostFiles(bucket, client=client, metadata_ttl=ttl), prefix)

    writer = fresh_tree()
    reader = fresh_tree()

    async def timed_async(fn: Callable[[], Awaitable[None]]) -> float:
        start = time.perf_counter()
        await fn()
        return time.perf_counter() - start

    async def write() -> None:
        for name in names:
            await writer.write(f"/d/{name}", text)

    async def listing() -> None:
        found = [entry async for entry in fresh_tree().list("/d")]
        assert len(found) == len(names), len(found)

    async def read() -> None:
        for name in names:
            assert len(await reader.read(f"/d/{name}")) == len(data)

    async def big_write() -> None:
        await writer.write("/big.bin", big.decode())

    async def big_read() -> None:
        assert len(await fresh_tree().read("/big.bin")) == len(big)

    async def main() -> None:
        seconds["write"] = await timed_async(write)
        seconds["overwrite"] = await timed_async(write)
        seconds["list"] = await timed_async(listing)
        seconds["read"] = await timed_async(read)
        seconds["read_warm"] = await timed_async(read)
        seconds["big_write"] = await timed_async(big_write)
        seconds["big_read"] = await timed_async(big_read)

    anyio.run(main, backend=backend)
    return seconds


def rate(op: str, seconds: float, files: int, big_mib: int) -> float:
    if op.startswith("big_"):
        return big_mib / seconds
    return files / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--big-mib", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=1.0, help="metadata_ttl of the tree")
    parser.add_argument("--backend", default="trio", choices=["trio", "asyncio"])
    parser.add_argument("--endpoint", help="an existing S3 endpoint (default: start weed)")
    parser.add_argument("--bucket", default="agentroot-bench")
    args = parser.parse_args()

    names = [f"f{i:05d}.txt" for i in range(args.files)]
    data = (b"0123456789abcdef" * (args.size // 16 + 1))[: args.size]
    big = b"b" * (args.big_mib << 20)
    results: dict[tuple[str, str], list[float]] = {}
    with store(args) as (client, bucket):
        client.put_object(Bucket=bucket, Key="warmup", Body=b"x")  # first write grows volumes
        for rep in range(args.reps):
            for side in ("boto3", "tree"):
                prefix = f"bench-{rep}-{side}-{uuid.uuid4().hex[:8]}"
                if side == "boto3":
                    seconds = boto3_side(client, bucket, prefix, names, data, big)
                else:
                    seconds = tree_side(
                        client, bucket, prefix, names, data, big, args.ttl, args.backend
                    )
                for op, spent in seconds.items():
                    results.setdefault((side, op), []).append(spent)
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)

    print(
        f"{args.files} files of {args.size} B, one {args.big_mib} MiB file; median of "
        f"{args.reps}; tree = host_fs(S3HostFiles(metadata_ttl={args.ttl})), {args.backend}"
    )
    print(f"{'operation':<11} {'boto3':>14} {'tree':>14}  {'unit':<10} {'tree vs boto3':>13}")
    for op in OPS:
        direct = statistics.median(results[("boto3", op)])
        ours = statistics.median(results[("tree", op)])
        unit = UNIT.get(op, "files/s")
        print(
            f"{op:<11} {rate(op, direct, args.files, args.big_mib):>14.1f} "
            f"{rate(op, ours, args.files, args.big_mib):>14.1f}  {unit:<10} "
            f"{ours / direct:>12.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
