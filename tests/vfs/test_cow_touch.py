"""cow_fs: new times for an unmodified lower file are recorded, not copied up.

git "freshens" every object and pack it would write again with ``utime``; a copy-up for that
would copy a repository's packs into the upper. The times show over the lower's while that lower
file is unchanged, travel with the file when it is copied up (renamed, chmodded, written), go
with a whiteout, survive a restart over a durable upper, and are never a change.
"""

from __future__ import annotations

import anyio
import pytest

import vfs
from vfs._cow import cow_fs
from vfs._cow_meta import CowMeta

from .eightverb import BACKENDS, run
from .test_cow import read_bytes, seeded, upper_paths

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

T1 = 1_700_000_000_123_456_789
T2 = 1_700_000_100_000_000_001


def test_touch_records_times_without_copying_up(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        before = await vfs.posix_view(lower.tree).lstat("/d/x.txt")
        await anyio.sleep(0.01)  # a tick of the (coarse) clock times are stamped with
        shown = await cow.setattr("/d/x.txt", atime_ns=T1, mtime_ns=T2)
        assert (shown.atime_ns, shown.mtime_ns, shown.size, shown.mode) == (
            T1,
            T2,
            before.size,
            before.mode,
        )
        assert shown.ctime_ns is not None and shown.ctime_ns > (before.ctime_ns or 0)
        assert await upper_paths(cow) == []  # nothing copied, not even the parents
        assert (await cow.lstat("/d/x.txt")).mtime_ns == T2
        assert (await cow.stat("/d/x.txt")).atime_ns == T1
        listed = {entry.path: info for entry, info in await cow.list_info("/d")}
        assert listed["/d/x.txt"].mtime_ns == T2
        assert listed["/d/y.txt"] == await vfs.posix_view(lower.tree).lstat("/d/y.txt")
        # Only mtime: atime stays what it showed; then only atime.
        await cow.setattr("/d/x.txt", mtime_ns=T1)
        assert ((await cow.lstat("/d/x.txt")).atime_ns, (await cow.lstat("/d/x.txt")).mtime_ns) == (
            T1,
            T1,
        )
        await cow.setattr("/d/x.txt", atime_ns=T2)
        assert ((await cow.lstat("/d/x.txt")).atime_ns, (await cow.lstat("/d/x.txt")).mtime_ns) == (
            T2,
            T1,
        )
        assert [change async for change in cow.changes()] == []  # times are never a change
        assert await cow.diff() == ""
        assert await cow.read("/d/x.txt") == "x\n"
        assert (await vfs.posix_view(lower.tree).lstat("/d/x.txt")).mtime_ns == before.mtime_ns
        await lower.untouched()

    run(backend, main)


def test_touched_times_travel_with_a_copy_up(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        for path in ("/a.txt", "/b.txt", "/d/x.txt", "/d/sub/z.txt"):
            await cow.setattr(path, atime_ns=T1, mtime_ns=T2)
        await cow.setattr("/a.txt", mode=0o600)  # chmod copies up: the times come along
        assert ((await cow.lstat("/a.txt")).mode, (await cow.lstat("/a.txt")).mtime_ns) == (
            0o600,
            T2,
        )
        await cow.rename("/b.txt", "/c.txt")  # rename keeps a file's times
        assert (await cow.lstat("/c.txt")).mtime_ns == T2
        await cow.rename("/d", "/moved")  # ... and a directory's entries'
        assert (await cow.lstat("/moved/x.txt")).mtime_ns == T2
        assert (await cow.lstat("/moved/sub/z.txt")).atime_ns == T1
        assert sorted(cow.meta.times) == []  # all copied up now
        upper = vfs.posix_view(cow.upper)
        assert (await upper.lstat("/a.txt")).mtime_ns == T2
        assert await read_bytes(upper, "/moved/x.txt") == b"x\n"
        await lower.untouched()

    run(backend, main)


def test_touched_times_go_with_the_file(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await cow.setattr("/e/keep.txt", atime_ns=T1, mtime_ns=T2)
        await cow.unlink("/e/keep.txt")
        assert cow.meta.times == {}
        await cow.write("/e/keep.txt", "new\n")  # a new file: its own times
        assert (await cow.lstat("/e/keep.txt")).mtime_ns != T2
        await cow.setattr("/a.txt", atime_ns=T1, mtime_ns=T2)
        await cow.delete("/a.txt")
        await cow.setattr("/d/y.txt", mtime_ns=T2)
        await cow.rename("/b.txt", "/d/y.txt")  # replaced by another file
        assert cow.meta.times == {}
        assert (await cow.lstat("/d/y.txt")).mtime_ns != T2
        await cow.setattr("/d/sub/z.txt", mtime_ns=T2)
        await cow.unlink("/d/sub/z.txt")
        await cow.rmdir("/d/sub")
        assert cow.meta.times == {}
        await cow.write("/d/sub/z.txt", "again\n")
        assert (await cow.lstat("/d/sub/z.txt")).mtime_ns != T2
        await cow.setattr("/img.png", mtime_ns=T2)
        await cow.write("/img.png", b"\x89PNG rewritten")  # a new version: its own times
        assert cow.meta.times == {}
        assert (await cow.lstat("/img.png")).mtime_ns != T2
        await lower.untouched()

    run(backend, main)


def test_a_changed_lower_file_shows_its_own_times(backend: str) -> None:
    async def main() -> None:
        _, cow = await seeded()
        lower = vfs.posix_view(cow.lower)
        await cow.setattr("/a.txt", atime_ns=T1, mtime_ns=T2)
        await lower.write("/a.txt", "changed underneath\n")
        now = await lower.lstat("/a.txt")
        assert (await cow.lstat("/a.txt")).mtime_ns == now.mtime_ns != T2
        assert await cow.read("/a.txt") == "changed underneath\n"

    run(backend, main)


def test_touched_times_survive_a_restart_over_a_durable_upper(backend: str) -> None:
    async def main() -> None:
        lower, _ = await seeded()
        upper = vfs.temp_fs()
        first = cow_fs(lower.tree, upper)
        await first.setattr("/d/x.txt", atime_ns=T1, mtime_ns=T2)
        again = cow_fs(lower.tree, upper)
        info = await again.lstat("/d/x.txt")
        assert (info.atime_ns, info.mtime_ns) == (T1, T2)
        assert CowMeta.loads(first.meta.dumps()).times == first.meta.times
        await lower.untouched()

    run(backend, main)
