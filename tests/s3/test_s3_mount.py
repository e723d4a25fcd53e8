"""Two mounts of one S3-backed root (two ``mountd`` daemons: two hosts), and the Python API.

Each host serves the spec of ``tests.s3.trees`` (the S3 prefix at ``/``, local scratch at
``/scratch``) with kernel cache timeouts equal to the daemons' cache validity (``trees.TTL``).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import anyio
import pytest

import vfs

from . import trees
from .conftest import Store
from .hosts import eventually, mounted_hosts, read_or_none

pytestmark = pytest.mark.mount


def test_a_write_through_one_host_is_read_through_the_other(s3: Store, tmp_path: Path) -> None:
    prefix = s3.scope("hosts")
    with mounted_hosts(s3, tmp_path, prefix, 2) as (host_a, host_b):
        a, b = host_a.path, host_b.path
        (a / "notes.txt").write_text("version 1 from A\n")
        eventually(lambda: read_or_none(b / "notes.txt") == "version 1 from A\n")
        # B's kernel now caches the file's pages; a rewrite of the same size (same second, so the
        # mtime may not move either) must still reach B: revalidation sees the new etag and the
        # daemon drops what B's kernel cached.
        (a / "notes.txt").write_text("version 2 from A\n")
        eventually(lambda: read_or_none(b / "notes.txt") == "version 2 from A\n")
        assert host_b.stats()["counters"]["InvalidateInode"] >= 1

        # The Python API is a third host.
        api = vfs.host_fs(s3.files(metadata_ttl=trees.TTL), prefix)

        async def api_rewrite() -> None:
            assert await api.read("/notes.txt") == "version 2 from A\n"
            await api.write("/notes.txt", "version 3 from API\n")

        anyio.run(api_rewrite, backend="trio")
        for root in (a, b):
            eventually(lambda root=root: read_or_none(root / "notes.txt") == "version 3 from API\n")

        # Names: created, listed and removed through one host, seen by the other.
        (a / "dir").mkdir()
        (a / "dir" / "x.txt").write_text("x")
        eventually(lambda: (b / "dir").is_dir() and os.listdir(b / "dir") == ["x.txt"])
        assert (b / "dir" / "x.txt").read_text() == "x"
        (a / "dir" / "x.txt").unlink()
        eventually(lambda: not (b / "dir" / "x.txt").exists())
        # An empty directory cannot be stored in S3: it stays on the host that emptied it (as
        # POSIX wants) and is gone for the others.
        assert (a / "dir").is_dir()
        eventually(lambda: not (b / "dir").exists())
        os.rmdir(a / "dir")
        assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == ["notes.txt", "scratch"]

        # Scratch space is each host's own.
        (a / "scratch" / "local.txt").write_text("only on A")
        time.sleep(2 * trees.TTL)
        assert not (b / "scratch" / "local.txt").exists()
        stored = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/")
        assert [item["Key"] for item in stored["Contents"]] == [f"{prefix}/notes.txt"]
        # Invalidations sent from inside requests never waited on a kernel lock.
        for host in (host_a, host_b):
            assert "still blocked" not in host.log(), host.log()


def test_creating_a_name_another_host_just_created_opens_theirs(s3: Store, tmp_path: Path) -> None:
    """B believes ``fresh.txt`` is missing (its listing is still valid) when A creates it; B's
    ``open(O_CREAT)`` must not blank A's file: the create-only write fails with ESTALE, the
    kernel looks the name up again and opens A's file, and B's bytes land over A's."""
    prefix = s3.scope("create")
    with mounted_hosts(s3, tmp_path, prefix, 2) as (host_a, host_b):
        a, b = host_a.path, host_b.path
        assert sorted(os.listdir(b)) == ["scratch"]
        (a / "fresh.txt").write_bytes(b"AAAAAAAAAA")
        fd = os.open(b / "fresh.txt", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"BB")
        os.close(fd)
        stored = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/fresh.txt")["Body"]
        assert stored.read() == b"BBAAAAAAAA"


ROUNDS = 4
SIZE = 48


def payload(round_: int, writer: str) -> bytes:
    """What ``writer`` writes in a round: the same length for everyone, so a torn or mixed
    write would show in the content."""
    return f"round {round_} by {writer} ".encode().ljust(SIZE - 1, b"=") + b"\n"


def test_concurrent_writers_exactly_one_wins_each_round(s3: Store, tmp_path: Path) -> None:
    """Two mounts and the API read the same version, then all write at once: one compare-and-swap
    wins, the others fail with ESTALE (close(2) through a mount, WriteFailedError through the
    API), and the store holds exactly the winner's bytes."""
    prefix = s3.scope("race")
    current = payload(0, "seed")
    s3.client.put_object(Bucket=s3.bucket, Key=f"{prefix}/race.txt", Body=current)
    api = vfs.host_fs(s3.files(metadata_ttl=trees.TTL), prefix)
    with mounted_hosts(s3, tmp_path, prefix, 2) as (host_a, host_b):
        mounts = {"A": host_a.path, "B": host_b.path}
        wins: dict[str, int] = {"A": 0, "B": 0, "API": 0}
        for round_ in range(1, ROUNDS + 1):
            time.sleep(trees.TTL + 0.1)  # every host's cached answers are past validity
            outcomes = race(round_, mounts, api)
            assert {seen for _, seen in outcomes.values()} == {current}, outcomes
            winners = [name for name, (result, _) in outcomes.items() if result == "won"]
            assert len(winners) == 1, outcomes
            losers = {result for name, (result, _) in outcomes.items() if name not in winners}
            assert losers == {"ESTALE"}, outcomes
            stored = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/race.txt")
            current = stored["Body"].read()
            assert current == payload(round_, winners[0])
            wins[winners[0]] += 1
        assert sum(wins.values()) == ROUNDS
        # After the last round every host reads the last winner's bytes.
        time.sleep(trees.TTL + 0.1)
        for root in mounts.values():
            assert (root / "race.txt").read_bytes() == current
        for host in (host_a, host_b):
            assert "still blocked" not in host.log(), host.log()


def race(
    round_: int, mounts: dict[str, Path], api: vfs.HostFileSystem
) -> dict[str, tuple[str, bytes]]:
    """One round: every writer reads, then all write at the same moment. Per writer: ``won`` or
    the errno name, and the bytes it read."""
    barrier = threading.Barrier(len(mounts) + 1, timeout=20)
    outcomes: dict[str, tuple[str, bytes]] = {}

    def through_mount(name: str, root: Path) -> None:
        fd = os.open(root / "race.txt", os.O_RDWR)
        seen = b""
        try:
            seen = os.pread(fd, 4096, 0)
            os.pwrite(fd, payload(round_, name), 0)  # buffered by the daemon until close
            barrier.wait()
        finally:
            try:
                os.close(fd)  # the write-back: a compare-and-swap on what open read
            except OSError as error:
                outcomes[name] = (errno.errorcode[error.errno], seen)
            else:
                outcomes[name] = ("won", seen)

    def through_api() -> None:
        async def write() -> None:
            seen = str(await api.read("/race.txt")).encode()
            barrier.wait()
            try:
                await api.write("/race.txt", payload(round_, "API").decode())
            except vfs.WriteFailedError as error:
                outcomes["API"] = (errno.errorcode[error.errno], seen)
            else:
                outcomes["API"] = ("won", seen)

        anyio.run(write, backend="asyncio")

    threads = [threading.Thread(target=through_mount, args=item) for item in mounts.items()]
    threads.append(threading.Thread(target=through_api))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(outcomes) == len(threads), outcomes
    return outcomes
