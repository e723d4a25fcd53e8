"""Planning kernel invalidations from tree changes, without a mount."""

from __future__ import annotations

import threading

import trio

from mountd._inodes import ROOT_INODE, InodeTable
from mountd._invalidate import InvalidateEntry, InvalidateInode, Invalidator, Notice, plan
from vfs import Change, FileInfo

FILE = FileInfo("file")
DIR = FileInfo("directory")


def table_with_a_file() -> tuple[InodeTable, int, int]:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    f = table.remember(d, "f.txt", FILE)
    return table, d.ino, f.ino


def test_unknown_paths_need_nothing() -> None:
    table, _, _ = table_with_a_file()
    assert plan(table, Change("/elsewhere/x", "content")) == []
    assert plan(table, Change("/d/new.txt", "metadata")) == []


def test_a_new_name_under_unknown_directories_drops_the_first_unknown_name() -> None:
    """The tree made ``/elsewhere`` (and ``/d/sub``) for this change: the kernel may list the
    nearest directory it knows without it, or remember the name as missing."""
    table, d, _ = table_with_a_file()
    assert plan(table, Change("/elsewhere/x", "entry")) == [
        InvalidateEntry(ROOT_INODE, b"elsewhere"),
        InvalidateInode(ROOT_INODE, attr_only=False),
    ]
    assert plan(table, Change("/d/sub/deeper/x", "entry")) == [
        InvalidateEntry(d, b"sub"),
        InvalidateInode(d, attr_only=False),
    ]
    # Told once: more changes beneath cost nothing until the kernel asks about the name again.
    assert plan(table, Change("/elsewhere/y", "entry")) == []
    assert plan(table, Change("/d/sub/z", "entry")) == []
    table.root.told = None  # as a listing of the root does
    assert plan(table, Change("/elsewhere/z", "entry")) == [
        InvalidateEntry(ROOT_INODE, b"elsewhere"),
        InvalidateInode(ROOT_INODE, attr_only=False),
    ]


def test_content_and_metadata_invalidate_the_inode() -> None:
    table, _, f = table_with_a_file()
    assert plan(table, Change("/d/f.txt", "content")) == [InvalidateInode(f, attr_only=False)]
    assert plan(table, Change("/d/f.txt", "metadata")) == [InvalidateInode(f, attr_only=True)]
    assert table.resolve("/d/f.txt") is not None  # still the same inode


def test_an_entry_change_invalidates_the_dentry_and_detaches_the_node() -> None:
    table, d, f = table_with_a_file()
    notices = plan(table, Change("/d/f.txt", "entry"))
    assert notices == [
        InvalidateEntry(d, b"f.txt"),
        InvalidateInode(d, attr_only=False),
        InvalidateInode(f, attr_only=False),
    ]
    assert table.resolve("/d/f.txt") is None
    assert table.find(f) is not None  # the kernel still holds it until forget


def test_a_detached_directory_drops_the_attributes_of_what_is_known_beneath_it() -> None:
    """A file beneath a directory that names nothing any more has no name either: a held
    descriptor's ``fstat`` must not answer its old link count from the kernel's cache."""
    table, d, f = table_with_a_file()
    directory = table.find(d)
    assert directory is not None
    e = table.remember(directory, "e", DIR)
    g = table.remember(e, "g.txt", FILE)
    notices = plan(table, Change("/d", "entry"))
    beneath = {InvalidateInode(ino, attr_only=True) for ino in (f, e.ino, g.ino)}
    assert beneath <= set(notices)
    assert InvalidateInode(d, attr_only=False) in notices
    assert table.resolve("/d/e/g.txt") is None


def test_a_new_name_in_a_known_directory_drops_a_cached_negative_entry() -> None:
    table, d, _ = table_with_a_file()
    assert plan(table, Change("/d/new.txt", "entry")) == [
        InvalidateEntry(d, b"new.txt"),
        InvalidateInode(d, attr_only=False),
    ]


def test_an_entry_change_at_the_root_forgets_every_name() -> None:
    table, d, _ = table_with_a_file()
    notices = plan(table, Change("/", "entry"))
    assert InvalidateEntry(1, b"d") in notices
    assert InvalidateInode(d) in notices and InvalidateInode(1) in notices
    assert table.resolve("/d") is None and table.resolve("/d/f.txt") is None


def test_writeback_turns_content_into_entry() -> None:
    table, d, _ = table_with_a_file()
    notices = plan(table, Change("/d/f.txt", "content"), writeback=True)
    assert InvalidateEntry(d, b"f.txt") in notices
    assert table.resolve("/d/f.txt") is None


def test_the_invalidator_ignores_its_own_origin_and_delivers_the_rest() -> None:
    sent: list[Notice] = []
    threads: set[int] = set()

    def send(notice: Notice) -> None:
        threads.add(threading.get_ident())
        sent.append(notice)

    async def main() -> None:
        table, _, f = table_with_a_file()
        me = object()
        invalidator = Invalidator(table, me, send=send)
        assert invalidator(Change("/d/f.txt", "content", origin=me)) is None
        assert invalidator(Change("/unknown", "content", origin=None)) is None
        pending = invalidator(Change("/d/f.txt", "content", origin=None))
        assert pending is not None
        await pending
        assert sent == [InvalidateInode(f)]
        assert threading.get_ident() not in threads  # delivered off the event loop
        # From another thread, the planning hops onto the loop first.
        # (Wrapped in a list: trio refuses a thread function that returns a coroutine.)
        [other] = await trio.to_thread.run_sync(
            lambda: [invalidator(Change("/d/f.txt", "metadata", origin=None))]
        )
        assert other is not None
        await other
        assert sent[-1] == InvalidateInode(f, attr_only=True)
        assert await trio.to_thread.run_sync(invalidator.close, 1.0)
        assert invalidator(Change("/d/f.txt", "content", origin=None)) is None

    trio.run(main)


def test_a_blocked_invalidation_does_not_block_the_writer_forever() -> None:
    release = threading.Event()

    def send(notice: Notice) -> None:
        release.wait(5)

    async def main() -> None:
        table, _, _ = table_with_a_file()
        invalidator = Invalidator(table, object(), send=send, timeout=0.2)
        pending = invalidator(Change("/d/f.txt", "content", origin=None))
        assert pending is not None
        with trio.fail_after(3):
            await pending
        release.set()
        assert await trio.to_thread.run_sync(invalidator.close, 5.0)

    trio.run(main)
