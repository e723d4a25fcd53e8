"""``unlink_keeping`` (vfs.lowlevel.UnlinksKeeping): an unlink that hands over what the name held.

A mount serving files by inode keeps every file it unlinks open (a descriptor may still read
it); these tests pin the one-call form against what the three calls it replaces did: the name
goes, the handle reads (and, asked to, writes) the removed file, nothing is opened that is not a
regular file, a refused or failed unlink removes nothing and leaves nothing open, and the
wrappers see an unlink (the policy's check, the audit's record).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._policy import Rule, policy_fs
from vfs.lowlevel import UnlinksKeeping, unlink_keeping

from .eightverb import run

FILES = {"/d/a.txt": "alpha", "/d/b.txt": "beta"}


def _temp(tmp: Path) -> vfs.PosixFileSystem:
    return vfs.temp_fs(FILES)


def _dir(tmp: Path) -> vfs.PosixFileSystem:
    _write_files(tmp / "root")
    return vfs.dir_fs(tmp / "root")


def _cow_lower(tmp: Path) -> vfs.PosixFileSystem:
    """The files in the lower only: each unlink is a whiteout over a host file."""
    _write_files(tmp / "lower")
    return vfs.cow_fs(vfs.dir_fs(tmp / "lower", read_only=True))


def _cow_durable(tmp: Path) -> vfs.PosixFileSystem:
    """The files written through the cow: they live in its directory upper."""
    (tmp / "lower").mkdir()
    (tmp / "upper").mkdir()
    return vfs.cow_fs(vfs.dir_fs(tmp / "lower", read_only=True), vfs.dir_fs(tmp / "upper"))


def _union(tmp: Path) -> vfs.PosixFileSystem:
    return vfs.union_fs({"/": vfs.temp_fs(), "/d": vfs.temp_fs({"/a.txt": "alpha"})})


def _write_files(root: Path) -> None:
    (root / "d").mkdir(parents=True)
    for path, text in FILES.items():
        (root / path[1:]).write_text(text)


TREES: dict[str, Callable[[Path], vfs.PosixFileSystem]] = {
    "temp": _temp,
    "dir": _dir,
    "cow-lower": _cow_lower,
    "cow-durable": _cow_durable,
    "union": _union,
}


async def _filled(make: Callable[[Path], vfs.PosixFileSystem], tmp: Path) -> vfs.PosixFileSystem:
    tree = make(tmp)
    if not (await tree.lstat("/d/a.txt")).exists:
        await tree.write("/d/a.txt", "alpha")
    return tree


@pytest.mark.parametrize("kind", TREES)
def test_the_name_goes_and_the_handle_reads_the_removed_file(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = await _filled(TREES[kind], tmp_path)
        assert isinstance(tree, UnlinksKeeping)
        kept = await unlink_keeping(tree, "/d/a.txt")
        assert kept is not None
        try:
            assert not (await tree.lstat("/d/a.txt")).exists
            assert await kept.read(0, 100) == b"alpha"
        finally:
            await kept.close()
        with pytest.raises(vfs.FileNotFoundError):
            await tree.read("/d/a.txt")

    run("trio", body)


@pytest.mark.parametrize("kind", ["temp", "dir", "cow-durable", "union"])
def test_a_writable_handle_writes_the_removed_file_and_no_name(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = await _filled(TREES[kind], tmp_path)
        before = sorted([e.path async for e in tree.list("/d")])
        kept = await unlink_keeping(tree, "/d/a.txt", write=True)
        assert kept is not None
        try:
            await kept.write(5, b" and more")
            assert await kept.read(0, 100) == b"alpha and more"
        finally:
            await kept.close()
        assert not (await tree.lstat("/d/a.txt")).exists
        after = sorted([e.path async for e in tree.list("/d")])
        assert after == [path for path in before if path != "/d/a.txt"]

    run("trio", body)


def test_a_lower_file_is_kept_read_only_and_never_written(tmp_path: Path) -> None:
    async def body() -> None:
        tree = _cow_lower(tmp_path)
        kept = await unlink_keeping(tree, "/d/a.txt", write=True)
        assert kept is not None
        try:
            assert await kept.read(0, 100) == b"alpha"
            with pytest.raises(OSError) as refused:
                await kept.write(0, b"x")
            assert refused.value.errno == errno.EBADF
        finally:
            await kept.close()
        assert (tmp_path / "lower/d/a.txt").read_text() == "alpha"  # the host is unchanged
        assert not (await tree.lstat("/d/a.txt")).exists

    run("trio", body)


@pytest.mark.parametrize("kind", ["temp", "dir", "cow-durable"])
def test_what_is_not_a_regular_file_is_removed_and_nothing_kept(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = await _filled(TREES[kind], tmp_path)
        await tree.symlink("/d/link", "a.txt")
        await vfs.lowlevel.make_node(tree, "/d/fifo", "fifo")
        assert await unlink_keeping(tree, "/d/link") is None  # not the file it points at
        assert await unlink_keeping(tree, "/d/fifo") is None  # opened for I/O, it would block
        assert not (await tree.lstat("/d/link")).exists
        assert not (await tree.lstat("/d/fifo")).exists
        assert await tree.read("/d/a.txt") == "alpha"

    run("trio", body)


@pytest.mark.parametrize("kind", TREES)
def test_a_failed_unlink_removes_nothing(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = await _filled(TREES[kind], tmp_path)
        with pytest.raises(vfs.FileNotFoundError):
            await unlink_keeping(tree, "/d/missing.txt")
        with pytest.raises(vfs.PathError) as refused:
            await unlink_keeping(tree, "/d")  # a directory (a mount point: busy, in a union)
        assert refused.value.errno in (errno.EISDIR, errno.EBUSY)
        assert await tree.read("/d/a.txt") == "alpha"

    run("trio", body)


def test_the_wrappers_see_an_unlink(tmp_path: Path) -> None:
    """The policy checks it as the unlink it is; the audit records it as one."""

    async def body() -> None:
        log = AuditLog(keep=10)
        rules = [Rule("/d/a.txt", "read"), Rule("/d/b.txt", "write")]
        tree = audited_fs(policy_fs(vfs.temp_fs(FILES), rules), log)
        with pytest.raises(vfs.PolicyDeniedError):
            await unlink_keeping(tree, "/d/a.txt")
        assert await tree.read("/d/a.txt") == "alpha"
        kept = await unlink_keeping(tree, "/d/b.txt")
        assert kept is not None
        await kept.close()
        assert [(e.op, e.path, e.result) for e in log.entries()] == [
            ("unlink", "/d/a.txt", "denied"),
            ("unlink", "/d/b.txt", "ok"),
        ]

    run("trio", body)


class _WithoutIt:
    """A tree with the contract's verbs only (what the helper's fallback calls)."""

    def __init__(self, tree: vfs.PosixFileSystem) -> None:
        self.lstat = tree.lstat
        self.open = tree.open
        self.unlink = tree.unlink


def test_a_tree_without_it_is_opened_then_unlinked(tmp_path: Path) -> None:
    """The helper's three calls, for a tree that cannot do it in one."""

    async def body() -> None:
        tree: Any = _WithoutIt(vfs.temp_fs(FILES))
        assert not isinstance(tree, UnlinksKeeping)
        kept = await unlink_keeping(tree, "/d/a.txt")
        assert kept is not None
        try:
            assert await kept.read(0, 100) == b"alpha"
        finally:
            await kept.close()
        assert not (await tree.lstat("/d/a.txt")).exists

    run("trio", body)


def test_a_tree_without_it_keeps_nothing_open_when_the_unlink_fails(tmp_path: Path) -> None:
    closed: list[str] = []

    async def refuse(path: str) -> None:
        raise vfs.PermissionDeniedError(path)

    async def body() -> None:
        inner = vfs.temp_fs(FILES)
        tree: Any = _WithoutIt(inner)
        tree.unlink = refuse
        original = inner.open

        class Noted:
            def __init__(self, file: vfs.OpenFile, path: str) -> None:
                self.file, self.path = file, path

            async def close(self) -> None:
                closed.append(self.path)
                await self.file.close()

        async def tracked(path: str, **how: bool) -> Any:
            return Noted(await original(path, **how), path)

        tree.open = tracked
        with pytest.raises(vfs.PermissionDeniedError):
            await unlink_keeping(tree, "/d/a.txt")
        assert closed == ["/d/a.txt"]

    run("trio", body)


def test_dir_fs_keeps_only_the_file_it_examined(tmp_path: Path) -> None:
    """A host program that swaps the name for a FIFO is never opened for I/O (a FIFO open
    would block): the descriptor must be of the regular file seen through O_PATH."""

    async def body() -> None:
        root = tmp_path / "root"
        root.mkdir()
        os.mkfifo(root / "p")
        tree = vfs.dir_fs(root)
        assert await unlink_keeping(tree, "/p") is None
        assert not (root / "p").exists()

    run("trio", body)
