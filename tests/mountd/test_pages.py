"""The page-cache policy's decisions, over a real temp_fs and inode table, without a mount.

What the kernel is told is recorded at the one boundary a test cannot have without a mount
(``KernelCache``); the mount tests (test_page_cache.py, test_files_by_inode.py) check what the
kernel then does with it."""

from __future__ import annotations

import trio

import vfs
from mountd._inodes import InodeTable, Node
from mountd._pages import PAGE_SIZE, STORE_RUNS, PageCache
from mountd._terms import Terms
from mountd._vouch import Generation

BY_INODE = Terms(
    forwards_flush=False, files_by_inode=True, kernel_drops_pages=False, complete_pages=True
)
HANDLES = Terms(forwards_flush=False, kernel_drops_pages=False)


class Told:
    """A KernelCache that records what the kernel would be told."""

    def __init__(self, generation: Generation | None = None) -> None:
        self.drops: list[int] = []
        self.awaited_drops: list[int] = []
        self.stores: list[tuple[int, list[tuple[int, bytes]]]] = []
        self._moves = generation  # a store the event loop let a change overtake

    def drop(self, ino: int) -> None:
        self.drops.append(ino)

    async def drop_and_wait(self, ino: int) -> None:
        self.awaited_drops.append(ino)

    async def store(self, ino: int, stores: list[tuple[int, bytes]]) -> None:
        self.stores.append((ino, stores))
        if self._moves is not None:
            self._moves.move()


def _cache(
    terms: Terms, told: Told | None = None, generation: Generation | None = None
) -> tuple[PageCache, InodeTable, vfs.PosixFileSystem, Told]:
    tree = vfs.temp_fs()
    told = Told() if told is None else told
    pages = PageCache(tree, terms, told, Generation() if generation is None else generation)
    return pages, InodeTable(learned=pages.learned, dropped=pages.dropped), tree, told


def _file(table: InodeTable, size: int = 10, mtime_ns: int = 1) -> Node:
    return table.remember(table.root, "f", vfs.FileInfo("file", size=size, mtime_ns=mtime_ns))


def test_a_change_the_mount_did_not_make_leaves_stale_pages() -> None:
    pages, table, _, _ = _cache(HANDLES)
    node = _file(table)
    table.learn(node, vfs.FileInfo("file", size=10, mtime_ns=1))  # nothing moved
    assert not pages.is_stale(node)
    pages.writing(node)
    table.learn(node, vfs.FileInfo("file", size=20, mtime_ns=2))  # the mount's own write
    assert not pages.is_stale(node)
    table.learn(node, vfs.FileInfo("file", size=20, mtime_ns=3))  # then someone else's
    assert pages.is_stale(node)
    table.learn(table.root, vfs.FileInfo("directory", mtime_ns=9))  # directories have no pages
    assert not pages.is_stale(table.root)


def test_an_open_keeps_the_pages_unless_stale_or_a_patchwork() -> None:
    pages, table, _, _ = _cache(HANDLES)
    node = _file(table, size=0)
    assert pages.opened(node, 7).keep_cache
    pages.writing(node)
    node.info = vfs.FileInfo("file", size=PAGE_SIZE + 10)
    pages.wrote(node, 0, PAGE_SIZE + 10)  # a last partial page at the end: still whole
    assert pages.opened(node, 7).keep_cache
    pages.wrote(node, 10, 20)  # starts inside a page: a gap before it
    opened = pages.opened(node, 7)
    assert not opened.keep_cache and opened.fh == 7 and not opened.direct_io
    assert pages.opened(node, 7).keep_cache  # dropped once, then kept
    pages.wrote(node, 0, PAGE_SIZE // 2)  # ends inside a page before the end of the file
    assert not pages.opened(node, 7).keep_cache
    table.learn(node, vfs.FileInfo("file", size=PAGE_SIZE + 10, mtime_ns=5))  # the writes
    assert pages.opened(node, 7).keep_cache
    table.learn(node, vfs.FileInfo("file", size=1, mtime_ns=6))  # then a change elsewhere
    assert not pages.opened(node, 7).keep_cache


def test_stale_pages_are_dropped_where_no_open_will() -> None:
    async def main() -> None:
        for terms, awaited, dropped, kept in [
            (BY_INODE, True, False, False),  # before the answer
            (HANDLES, False, True, False),  # open through a handle: off the request path
            (Terms(), False, False, False),  # the kernel drops them itself: never tell it
        ]:
            pages, table, _, told = _cache(terms)
            node = _file(table)
            node.opens = 1
            table.learn(node, vfs.FileInfo("file", size=11, mtime_ns=2))
            await pages.drop_stale(node)
            assert (told.awaited_drops == [node.ino]) is awaited
            assert (told.drops == [node.ino]) is dropped
            assert pages.is_stale(node) is kept
        pages, table, _, told = _cache(HANDLES)
        node = _file(table)  # not open: its next open drops them
        table.learn(node, vfs.FileInfo("file", size=11, mtime_ns=2))
        await pages.drop_stale(node)
        assert pages.is_stale(node) and not told.drops
        assert not pages.opened(node, 7).keep_cache

    trio.run(main)


def test_setting_the_times_hands_over_exactly_the_pages_writes_left_incomplete() -> None:
    async def main() -> None:
        pages, table, tree, told = _cache(BY_INODE)
        data = bytes(range(256)) * (3 * PAGE_SIZE // 256) + b"tail"
        await tree.write("/f", data)
        node = _file(table, size=0)
        for off, end in [(0, 100), (100, 2 * PAGE_SIZE + 50), (2 * PAGE_SIZE + 50, len(data))]:
            pages.writing(node)
            node.info = vfs.FileInfo("file", size=end)
            pages.wrote(node, off, end)
        assert pages.partial_pages(node) == {0, 2, 3}  # page 0 was covered by no one write
        await pages.times_set(node, "/f", len(data))
        assert told.stores == [
            (node.ino, [(0, data[:PAGE_SIZE]), (2 * PAGE_SIZE, data[2 * PAGE_SIZE :])])
        ]
        assert not told.drops and not pages.partial_pages(node)
        assert pages.opened(node, 7).keep_cache  # nothing left to drop
        await pages.times_set(node, "/f", len(data))  # nothing written since: nothing to do
        assert len(told.stores) == 1

    trio.run(main)


def test_a_file_in_too_many_pieces_or_that_will_not_read_is_dropped_instead() -> None:
    async def main() -> None:
        pages, table, tree, told = _cache(BY_INODE)
        size = (2 * STORE_RUNS + 4) * PAGE_SIZE
        await tree.write("/f", b"x" * size)
        node = _file(table, size=size)
        for page in range(0, 2 * STORE_RUNS + 4, 2):  # every other page written in part
            pages.wrote(node, page * PAGE_SIZE + 1, page * PAGE_SIZE + 2)
        await pages.times_set(node, "/f", size)
        assert told.drops == [node.ino] and not told.stores
        pages.wrote(node, 1, 2)
        await tree.write("/f", b"")  # shorter than the writes said: the tree changed
        await pages.times_set(node, "/f", size)
        assert told.drops == [node.ino, node.ino] and not told.stores

    trio.run(main)


def test_a_store_overtaken_by_a_change_is_dropped_after_it() -> None:
    async def main() -> None:
        generation = Generation()
        pages, table, tree, told = _cache(BY_INODE, Told(generation), generation)
        await tree.write("/f", b"abc")
        node = _file(table, size=3)
        pages.wrote(node, 0, 3)
        await pages.times_set(node, "/f", 3)
        assert told.stores == [(node.ino, [(0, b"abc")])] and told.drops == [node.ino]

    trio.run(main)


def test_with_handles_or_without_completing_a_patchwork_is_left_to_the_open() -> None:
    async def main() -> None:
        for terms, drops in [
            (HANDLES, []),  # the next open drops it
            (Terms(forwards_flush=False, files_by_inode=True, kernel_drops_pages=False), [2]),
        ]:
            pages, table, _, told = _cache(terms)
            node = _file(table, size=100)
            pages.wrote(node, 10, 20)
            await pages.times_set(node, "/f", 100)
            assert told.drops == drops and not told.stores
            assert pages.partial_pages(node) == set()  # tracked only to be handed over

    trio.run(main)


def test_what_is_kept_of_a_file_lives_as_long_as_its_node() -> None:
    pages, table, _, _ = _cache(BY_INODE)
    node = _file(table, size=100)
    pages.wrote(node, 10, 20)
    table.learn(node, vfs.FileInfo("file", size=5, mtime_ns=7))
    table.forget(node.ino, 1)
    assert table.find(node.ino) is None
    assert not pages.is_stale(node) and not pages.partial_pages(node)
    assert pages.opened(node, 7).keep_cache


def test_a_file_whose_pages_the_invalidator_emptied_has_no_stale_pages() -> None:
    """An API change drops the kernel's pages (``emptied``): the new size and time the next
    GETATTR learns are no reason to drop them again while it is answered (the kernel would
    discard that answer, and a held descriptor read the old size)."""
    pages, table, _, told = _cache(BY_INODE)
    node = _file(table, size=6, mtime_ns=1)
    pages.emptied(node.ino)
    table.learn(node, vfs.FileInfo("file", size=2, mtime_ns=2))
    assert not pages.is_stale(node)
    table.learn(node, vfs.FileInfo("file", size=3, mtime_ns=3))  # once only: then a writer's
    assert pages.is_stale(node)
    assert told.drops == told.awaited_drops == []
