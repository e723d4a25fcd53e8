"""A file's bytes in pages: what ``temp_fs`` keeps of a file, holes never stored.

Theory of operation
-------------------
A :class:`Pages` holds a file of ``size`` bytes as pages of :data:`PAGE_SIZE` bytes, by index:
page ``i`` covers bytes ``i * PAGE_SIZE`` onwards. A page that was never written is absent (a
*hole*) and reads as zeros, so a one-byte write at a 5 GB offset stores one page, not 5 GB, as on
tmpfs. A stored page holds only the bytes up to the last one written in it (a 10-byte file keeps
10 bytes, not a page), and reads past its end up to the file's size are zeros too.
:meth:`Pages.blocks` counts what is stored in 512-byte units of whole pages, as ``st_blocks`` of
tmpfs does.

Truncation drops the pages past the new size and cuts the last one, so growing the file again
reads zeros there. Nothing here knows about paths or locks; the tree that owns a ``Pages`` does.

Every ``Pages`` of a tree counts what it stores in the tree's :class:`Usage`; a write that would
take the total past its ``limit`` raises :class:`NoSpace` before it changes anything, and a
``Pages`` the tree lets go of (a file removed and closed, or rewritten whole) gives its bytes back
when it is freed.

Sharing (checkpoints): :meth:`Pages.freeze` answers a frozen copy that shares every page with
this one; from then on both treat those pages as shared (``_owned`` says which pages this
``Pages`` may change in place), so the first write to a shared page copies that one page, never
the file. :meth:`Pages.thaw` makes a live ``Pages`` of a frozen one the same way. A frozen
``Pages`` is never written and counts in no usage.
"""

from __future__ import annotations

from collections.abc import Iterator

PAGE_SIZE = 4096
_BLOCKS_PER_PAGE = PAGE_SIZE // 512


class NoSpace(Exception):
    """The tree's limit on stored bytes would be passed (``ENOSPC``)."""


class Usage:
    """The bytes every ``Pages`` of one tree stores, and the most they may (``None``: no limit)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.used = 0


class Pages:
    """The bytes of one file (see the module docstring)."""

    __slots__ = ("_owned", "_pages", "_stored", "_usage", "size")

    def __init__(
        self, data: bytes | bytearray | memoryview = b"", usage: Usage | None = None
    ) -> None:
        self._pages: dict[int, bytearray] = {}
        self._stored = 0
        self._usage = usage
        self.size = 0
        # The pages this one may change in place; None: all of them (it never shared any).
        self._owned: set[int] | None = None
        if data:
            self.write(0, data)

    def __del__(self) -> None:
        if self._usage is not None:
            self._usage.used -= self._stored

    def __len__(self) -> int:
        return self.size

    def freeze(self) -> Pages:
        """A frozen copy sharing every page (see the module docstring): O(pages), no bytes."""
        frozen = Pages.__new__(Pages)
        frozen._pages = dict(self._pages)
        frozen._stored = self._stored
        frozen._usage = None
        frozen.size = self.size
        frozen._owned = set()
        self._owned = set()
        return frozen

    def thaw(self, usage: Usage | None) -> Pages:
        """A live copy of this frozen ``Pages`` sharing its pages, counted in ``usage`` (past
        its limit too: the pages are in memory already, held by the frozen one)."""
        live = self.freeze()
        live._usage = usage
        if usage is not None:
            usage.used += live._stored
        return live

    def page_ids(self) -> Iterator[tuple[int, int]]:
        """``(id, bytes)`` of every stored page (what a checkpoint shares, by identity)."""
        for page in self._pages.values():
            yield id(page), len(page)

    def blocks(self) -> int:
        """512-byte blocks of the pages stored (holes cost none)."""
        return len(self._pages) * _BLOCKS_PER_PAGE

    def stored(self) -> int:
        """Bytes held in memory."""
        return self._stored

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` (fewer at the end of the file)."""
        end = min(self.size, offset + size)
        if offset >= end:
            return b""
        first, last = offset // PAGE_SIZE, (end - 1) // PAGE_SIZE
        if first == last:
            return self._slice(first, offset - first * PAGE_SIZE, end - first * PAGE_SIZE)
        parts = []
        for index in range(first, last + 1):
            start = offset - index * PAGE_SIZE if index == first else 0
            stop = end - index * PAGE_SIZE if index == last else PAGE_SIZE
            parts.append(self._slice(index, start, stop))
        return b"".join(parts)

    def _slice(self, index: int, start: int, stop: int) -> bytes:
        page = self._pages.get(index)
        if page is None:
            return bytes(stop - start)
        got = bytes(page[start:stop])
        return got if len(got) == stop - start else got + bytes(stop - start - len(got))

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset``, growing the file (a gap reads as zeros); raises
        :class:`NoSpace`, writing nothing, past the usage's limit."""
        view = memoryview(data).cast("B")
        length = len(view)
        if not length:
            return
        end = offset + length
        pages = self._pages
        usage = self._usage
        growth = self._growth(offset, end)
        if usage is not None:
            if usage.limit is not None and growth > 0 and usage.used + growth > usage.limit:
                raise NoSpace
            usage.used += growth
        self._stored += growth
        done = 0
        index = offset // PAGE_SIZE
        owned = self._owned
        while done < length:
            start = (offset + done) - index * PAGE_SIZE
            take = min(PAGE_SIZE - start, length - done)
            page = pages.get(index)
            if owned is not None and index not in owned:
                owned.add(index)
                if page is not None:  # shared with a checkpoint: copy this page only
                    page = pages[index] = bytearray(page)
            if page is None:
                page = pages[index] = bytearray(start) if start else bytearray()
            elif len(page) < start:
                page.extend(bytes(start - len(page)))
            page[start : start + take] = view[done : done + take]
            done += take
            index += 1
        if end > self.size:
            self.size = end

    def _growth(self, offset: int, end: int) -> int:
        """The bytes a write of ``offset`` to ``end`` adds to what is stored."""
        growth = 0
        for index in range(offset // PAGE_SIZE, (end - 1) // PAGE_SIZE + 1):
            page = self._pages.get(index)
            reach = min(PAGE_SIZE, end - index * PAGE_SIZE)
            growth += max(0, reach - (0 if page is None else len(page)))
        return growth

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes, or grow it with a hole."""
        if size < self.size:
            before = self._stored
            keep = (size + PAGE_SIZE - 1) // PAGE_SIZE  # pages 0 .. keep-1 may hold bytes
            for index in [i for i in self._pages if i >= keep]:
                self._stored -= len(self._pages.pop(index))
            tail = size - (keep - 1) * PAGE_SIZE if size else 0
            page = self._pages.get(keep - 1) if size else None
            if page is not None and len(page) > tail:
                self._stored -= len(page) - tail
                owned = self._owned
                if owned is not None and keep - 1 not in owned:
                    owned.add(keep - 1)
                    page = self._pages[keep - 1] = bytearray(page)
                del page[tail:]
            if self._usage is not None:
                self._usage.used -= before - self._stored
        self.size = size

    def tobytes(self) -> bytes:
        return self.read(0, self.size)

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in pieces of ``size`` (the last may be shorter)."""
        for offset in range(0, self.size, size):
            yield self.read(offset, size)
