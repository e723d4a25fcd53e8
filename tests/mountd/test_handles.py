"""The handle table, the errno mapping and attribute conversion, without a mount."""

from __future__ import annotations

import errno
import logging
import os
import stat

import pytest

import vfs
from mountd._attrs import AttrPolicy
from mountd._errno import errno_for
from mountd._handles import HandleTable, Offsets
from mountd._inodes import InodeTable
from vfs import FileInfo


class NullFile:
    async def read(self, offset: int, size: int) -> bytes:
        return b""

    async def write(self, offset: int, data: bytes) -> int:
        return len(data)

    async def truncate(self, size: int) -> None:
        pass

    async def flush(self) -> None:
        pass

    async def fsync(self, datasync: bool = False) -> None:
        pass

    async def close(self) -> None:
        pass


def test_handles_are_numbered_and_never_reused() -> None:
    inodes = InodeTable()
    node = inodes.remember(inodes.root, "f", vfs.FileInfo("file"))
    table = HandleTable()
    first = table.add_file(node, NullFile(), os.O_RDONLY)
    directory = table.add_dir(inodes.root)
    assert first.fh != directory.fh
    assert table.file(first.fh) is first
    assert table.dir(directory.fh) is directory
    assert len(table) == 2
    assert table.pop_file(first.fh) is first
    second = table.add_file(node, NullFile(), os.O_WRONLY | os.O_APPEND)
    assert second.fh > directory.fh
    assert table.files_of(node) == [second]
    with pytest.raises(KeyError):
        table.file(first.fh)
    with pytest.raises(KeyError):
        table.dir(second.fh)  # file and directory handles do not mix
    assert table.pop_dir(directory.fh).listing is None
    assert len(table) == 1


def test_writable_follows_the_access_mode() -> None:
    inodes = InodeTable()
    table = HandleTable()
    for flags, writable in [
        (os.O_RDONLY, False),
        (os.O_WRONLY, True),
        (os.O_RDWR, True),
        (os.O_RDONLY | os.O_NONBLOCK, False),
    ]:
        assert table.add_file(inodes.root, NullFile(), flags).writable is writable


def test_errno_for_path_errors_and_oserrors() -> None:
    assert errno_for(vfs.FileNotFoundError("/a")) == errno.ENOENT
    assert errno_for(vfs.DirectoryNotEmptyError("/d")) == errno.ENOTEMPTY
    assert errno_for(vfs.ReadOnlyMountError("/a"), write=True) == errno.EROFS
    assert errno_for(vfs.FileTooLargeError("/a")) == errno.EFBIG
    assert errno_for(vfs.NoMountError("/x")) == errno.ENOENT
    assert errno_for(vfs.NoMountError("/x"), write=True) == errno.EROFS
    assert errno_for(PermissionError(errno.EACCES, "no")) == errno.EACCES
    # ENOSYS would make the kernel stop asking for the whole mount.
    assert errno_for(OSError(errno.ENOSYS, "nope")) == errno.EOPNOTSUPP


def test_errno_for_anything_else_is_eio_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="mountd"):
        try:
            raise RuntimeError("tree bug")
        except RuntimeError as error:
            assert errno_for(error, op="read") == errno.EIO
    assert "unexpected error in read" in caplog.text
    assert "RuntimeError: tree bug" in caplog.text  # with the traceback
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="mountd"):
        assert errno_for(OSError("no errno")) == errno.EIO
    assert "unexpected error" in caplog.text


def test_attributes_fill_what_the_tree_leaves_out() -> None:
    policy = AttrPolicy(uid=1000, gid=100, entry_timeout=7, attr_timeout=9)
    attrs = policy.entry(5, vfs.FileInfo("file", size=1000, mtime_ns=1_500_000_000_123))
    assert attrs.st_ino == 5
    assert attrs.st_mode == stat.S_IFREG | 0o644
    assert (attrs.st_uid, attrs.st_gid, attrs.st_nlink) == (1000, 100, 1)
    assert attrs.st_size == 1000 and attrs.st_blocks == 2 and attrs.st_blksize == 4096
    assert attrs.st_mtime_ns == attrs.st_atime_ns == attrs.st_ctime_ns == 1_500_000_000_123
    assert (attrs.entry_timeout, attrs.attr_timeout) == (7, 9)
    directory = policy.entry(6, vfs.FileInfo("directory"))
    assert directory.st_mode == stat.S_IFDIR | 0o755 and directory.st_nlink == 2
    link = policy.entry(7, vfs.FileInfo("symlink", size=3))
    assert link.st_mode == stat.S_IFLNK | 0o777


def test_attributes_keep_what_the_tree_reports() -> None:
    policy = AttrPolicy(uid=1000, gid=100)
    info = vfs.FileInfo(
        "file", mode=0o4750, uid=0, gid=0, mtime_ns=5, atime_ns=3, ctime_ns=9, nlink=1
    )
    attrs = policy.entry(8, info)
    assert attrs.st_mode == stat.S_IFREG | 0o4750
    assert (attrs.st_uid, attrs.st_gid) == (0, 0)
    assert (attrs.st_atime_ns, attrs.st_mtime_ns, attrs.st_ctime_ns) == (3, 5, 9)
    assert policy.entry(8, info, detached=True).st_nlink == 0
    assert policy.negative().st_ino == 0
    with pytest.raises(ValueError):
        policy.entry(9, vfs.FileInfo("missing"))


def test_offsets_stay_with_names_across_snapshots() -> None:
    """A listing resumed against a newer snapshot neither skips nor repeats a name that stayed:
    offsets belong to names, and new names come after every offset handed out."""
    offsets = Offsets()
    dots: list[tuple[str, FileInfo | None]] = [(".", None), ("..", None)]
    first = offsets.number([*dots, ("b", None), ("a", None), ("c", None)], 0)
    assert [name for _, name, _ in first.entries] == [".", "..", "b", "a", "c"]
    resume_at = first.entries[3][0]  # the kernel has had ".", "..", "b", "a"
    second = offsets.number([*dots, ("new", None), ("c", None), ("b", None)], 1)  # "a" removed
    assert [name for _, name, _ in second.entries] == [".", "..", "b", "c", "new"]
    assert [name for _, name, _ in second.entries[second.after(resume_at) :]] == ["c", "new"]
    assert second.after(0) == 0
    assert second.after(second.entries[-1][0]) == len(second.entries)
