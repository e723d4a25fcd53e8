"""What the mount does to need fewer kernel requests, and the cases that keep each shortcut right.

- FLUSH is answered with ENOSYS (the kernel then stops sending it) only for trees whose handles
  never buffer writes; a tree that buffers still gets every FLUSH, so a write-back error reaches
  ``close(2)``, also through a union.
- readdirplus answers from one ``list_info`` snapshot only while nothing changed since it was
  taken: a listing interrupted by a write (through the mount or through the tree's API) hands
  the kernel the attributes of after the write.
- The kernel attributes built for an inode are reused while the tree answers an equal FileInfo.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

import pytest
import trio

import vfs
from mountd import MountOptions, mounted
from mountd._attrs import AttrPolicy
from mountd._ops import Operations
from mountd._terms import Terms
from tests.vfs.eightverb import EightVerbTree

from . import compositions
from .mounting import mount_process, mount_root
from .syscalls import errno_of


def write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@pytest.mark.mount
@pytest.mark.timeout(120)
def test_a_write_through_tree_is_asked_to_flush_once(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_process(compositions.temp, mnt) as mounted_tree:
        for i in range(5):
            write_file(mnt / f"f{i}", b"data")
            assert (mnt / f"f{i}").read_bytes() == b"data"
        assert mounted_tree.stats()["counters"]["flush"] == 1


class FailingWrites(EightVerbTree):
    """An eight-verb tree (so mounted through posix_view's buffering handles) whose ``write``
    fails with ENOSPC for the contents ``FAIL``."""

    async def write(self, path: str, contents: str | bytes) -> None:
        if contents in ("FAIL", b"FAIL"):
            raise vfs.PathError(vfs.normalize_path(path), errno=errno.ENOSPC)
        await super().write(path, contents)


def failing_writes() -> object:
    return FailingWrites()


def union_with_failing_writes() -> object:
    return vfs.union_fs({"/": vfs.temp_fs(), "/user": FailingWrites()})


@pytest.mark.mount
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("build", "where"), [(failing_writes, ""), (union_with_failing_writes, "user")]
)
def test_a_buffering_tree_reports_write_back_errors_at_close(
    tmp_path: Path, build: object, where: str
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_process(build, mnt) as mounted_tree:  # type: ignore[arg-type]
        directory = mnt / where
        for _ in range(3):
            write_file(directory / "fine.txt", b"fine")
            fd = os.open(directory / "bad.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"FAIL")
            assert errno_of(os.close, fd) == errno.ENOSPC
        assert (directory / "fine.txt").read_bytes() == b"fine"
        assert mounted_tree.stats()["counters"]["flush"] >= 7


NAMES = [f"f{i:04}" for i in range(2000)]  # many readdir requests' worth


def list_around(directory: Path, change: object) -> list[str]:
    """List ``directory``, calling ``change()`` after the first entry came back."""
    with os.scandir(directory) as entries:
        names = [next(entries).name]
        change()  # type: ignore[operator]
        names.extend(entry.name for entry in entries)
    return names


@pytest.mark.mount
@pytest.mark.timeout(120)
@pytest.mark.parametrize("build", [compositions.temp, compositions.dir_rw])
def test_a_listing_interrupted_by_a_write_gives_the_kernel_fresh_attributes(
    tmp_path: Path, build: object
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    builder = build if build is compositions.temp else functools.partial(compositions.dir_rw, host)
    with mount_root(builder, mnt) as root:  # type: ignore[arg-type]
        directory = root / "d"
        directory.mkdir()
        for name in NAMES:
            write_file(directory / name, b"1")
        last = directory / NAMES[-1]

        def grow() -> None:
            with last.open("ab") as f:
                f.write(b"2" * 99)

        assert list_around(directory, grow) == NAMES
        assert os.stat(last).st_size == 100  # from the kernel's cache, filled by readdirplus
        assert last.read_bytes() == b"1" + b"2" * 99


@pytest.mark.mount
@pytest.mark.timeout(120)
def test_a_listing_interrupted_by_an_api_write_gives_the_kernel_fresh_attributes(
    tmp_path: Path,
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = vfs.temp_fs({f"/d/{name}": "1" for name in NAMES})
        async with mounted(tree, mnt, MountOptions()):
            token = trio.lowlevel.current_trio_token()

            def grow() -> None:
                trio.from_thread.run(
                    tree.write, f"/d/{NAMES[-1]}", "1" + "2" * 99, trio_token=token
                )

            listed = await trio.to_thread.run_sync(list_around, mnt / "d", grow)
            assert listed == NAMES
            size = await trio.to_thread.run_sync(lambda: os.stat(mnt / "d" / NAMES[-1]).st_size)
            assert size == 100

    trio.run(main)


def test_kernel_attributes_are_built_once_per_node_and_refreshed_in_place() -> None:
    ops = Operations(vfs.temp_fs(), terms=Terms(), attrs=AttrPolicy(uid=0, gid=0), origin=object())
    node = ops.inodes.remember(ops.inodes.root, "f", vfs.FileInfo("file", size=1))
    info = vfs.FileInfo("file", size=1, mtime_ns=5)
    first = ops._entry(node, info)
    assert ops._entry(node, info) is first
    assert ops._entry(node, vfs.FileInfo("file", size=1, mtime_ns=5)) is first  # equal
    grown = ops._entry(node, vfs.FileInfo("file", size=2, mtime_ns=6))
    assert grown is first and grown.st_size == 2 and grown.st_mtime_ns == 6
    chmodded = ops._entry(node, vfs.FileInfo("file", size=2, mtime_ns=6, mode=0o600))
    assert chmodded is not first and chmodded.st_mode & 0o777 == 0o600
    assert chmodded.st_ino == node.ino


@pytest.mark.mount
@pytest.mark.timeout(120)
def test_a_file_written_in_pieces_is_read_back_in_whole_requests(tmp_path: Path) -> None:
    """Through handles: the open after the writes drops the patchwork (served by inode there is
    no open to do it at, and each gap costs a read request)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    data = os.urandom(40_000)
    handles = MountOptions(files_by_inode=False)
    with mount_process(compositions.temp, mnt, handles) as mounted_tree:
        fd = os.open(mnt / "f", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for offset in range(0, len(data), 10_000):  # pages straddle the writes
                os.pwrite(fd, data[offset : offset + 10_000], offset)
        finally:
            os.close(fd)
        os.utime(mnt / "f", ns=(1, 1))  # as tar does: the kernel learns the attributes anew
        before = mounted_tree.stats()["counters"].get("read", 0)
        assert (mnt / "f").read_bytes() == data
        first = mounted_tree.stats()["counters"].get("read", 0)
        assert first - before == 1  # not one request per page the writes left partial
        assert (mnt / "f").read_bytes() == data
        assert mounted_tree.stats()["counters"].get("read", 0) == first  # then kept cached
