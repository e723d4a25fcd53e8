"""What a truncation cut off, and which READs get it (``mountd._cuts``), without a mount.

The rule a READ is judged by: the kernel asks only for pages below its own size, so a READ that
reaches past the page holding the new last byte was sent while the kernel still saw the old
size, and gets the file as it was; any other READ gets the file as it is. The mounted race is in
``test_torn_reads.py``; the handlers' side (what is kept, when it ends) is tested here through
:class:`mountd._ops.Operations` over a ``temp_fs``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import vfs
from mountd._attrs import AttrPolicy
from mountd._cuts import CUT_LIFE, CUT_MAX, CUTS_BUDGET, PAGE_SIZE, Cut, Cuts
from mountd._inodes import ROOT_INODE
from mountd._ops import Operations
from mountd._terms import Terms


def _old(length: int) -> bytes:
    return bytes(i % 251 + 1 for i in range(length))  # no NULs: a zero would be a torn byte


@given(
    st.integers(0, 3 * PAGE_SIZE),
    st.integers(1, 3 * PAGE_SIZE),
    st.integers(0, 4 * PAGE_SIZE),
    st.sampled_from([PAGE_SIZE, 2 * PAGE_SIZE, 32 * PAGE_SIZE, 100, 1]),
)
def test_a_read_gets_the_old_bytes_only_where_only_a_racing_read_asks(
    size: int, cut_off: int, off: int, length: int
) -> None:
    old = _old(size + cut_off)
    cut = Cut(size, old[size:], made=0.0)
    now = old[:size]
    answer = cut.answer(off, length, now[off : off + length])
    page_end = -(-size // PAGE_SIZE) * PAGE_SIZE
    if off + length <= page_end or off >= len(old):
        assert answer is None  # a READ the kernel sends after the truncation too
    else:
        assert answer == old[off : off + length]  # a whole version: as before the truncation


def test_a_truncation_to_zero_answers_every_read_with_the_old_bytes() -> None:
    cut = Cut(0, b"B" * 1000, made=0.0)
    assert cut.answer(0, 4096, b"") == b"B" * 1000
    assert cut.answer(512, 131072, b"") == b"B" * 488
    assert cut.answer(4096, 4096, b"") is None  # past the old end: nothing was there


def test_a_read_that_saw_other_bytes_than_the_truncation_left_is_answered_as_read() -> None:
    cut = Cut(0, b"B" * 1000, made=0.0)
    assert cut.answer(0, 4096, b"B" * 1000) is None  # read before the tree truncated
    assert cut.answer(0, 4096, b"A" * 500) is None  # written since
    cut = Cut(4096, b"B" * 4096, made=0.0)
    assert cut.answer(0, 8192, b"C" * 100) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_cut_expires_and_ends_when_the_file_changes() -> None:
    clock = _Clock()
    cuts = Cuts(clock)
    cuts.cut(7, 0, b"old")
    found = cuts.find(7)
    assert found is not None and found.tail == b"old" and cuts.reach(7) == 3
    cuts.end(7)
    assert cuts.find(7) is None and not cuts
    cuts.cut(7, 0, b"old")
    clock.now += CUT_LIFE
    assert cuts.find(7) is None and not cuts
    cuts.cut(7, 0, b"old")
    cuts.cut(8, 0, b"other")
    cuts.forget_all()
    assert cuts.find(7) is None and cuts.find(8) is None


def test_nothing_cut_off_keeps_nothing() -> None:
    cuts = Cuts(_Clock())
    cuts.cut(7, 10, b"")
    assert not cuts and cuts.reach(7) is None


def test_a_second_shrink_keeps_the_first_old_end_behind_its_own() -> None:
    clock = _Clock()
    cuts = Cuts(clock)
    cuts.cut(7, 1000, b"c" * 1000)  # 2000 -> 1000
    cuts.cut(7, 10, b"b" * 990)  # 1000 -> 10: a reader may still see 2000
    cut = cuts.find(7)
    assert cut is not None and (cut.size, cut.tail) == (10, b"b" * 990 + b"c" * 1000)
    cuts.cut(7, 5, b"x" * 3)  # the file was not 10 long any more: the old cut says nothing
    cut = cuts.find(7)
    assert cut is not None and cut.tail == b"x" * 3


def test_the_oldest_cuts_go_first_past_the_budget() -> None:
    cuts = Cuts(_Clock())
    count = CUTS_BUDGET // CUT_MAX
    for ino in range(count + 2):
        cuts.cut(ino, 0, bytes(CUT_MAX))
    assert len(cuts) == count
    assert cuts.find(0) is None and cuts.find(1) is None and cuts.find(count + 1) is not None


# --- the handlers ------------------------------------------------------------------------


def _operations(fs: vfs.PosixFileSystem) -> Operations:
    return Operations(
        fs,
        terms=Terms(files_by_inode=True),
        attrs=AttrPolicy(uid=0, gid=0, entry_timeout=1, attr_timeout=1, negative_timeout=1),
        origin=object(),
    )


_CTX: Any = SimpleNamespace(uid=0, gid=0, pid=0, umask=0o022)


async def _truncate(ops: Operations, ino: int, size: int) -> None:
    attr = pyfuse3.EntryAttributes()
    attr.st_size = size
    fields: Any = SimpleNamespace(
        update_size=True,
        update_mode=False,
        update_uid=False,
        update_gid=False,
        update_atime=False,
        update_mtime=False,
    )
    await ops.setattr(ino, attr, fields, None, _CTX)


async def _content(fs: vfs.PosixFileSystem) -> bytes:
    file = await fs.open("/f")
    try:
        return await file.read(0, 1 << 20)
    finally:
        await file.close()


@pytest.mark.parametrize("size", [0, PAGE_SIZE])
def test_a_read_after_a_truncation_is_answered_by_the_rule(size: int) -> None:
    old = _old(3 * PAGE_SIZE)
    fs = vfs.temp_fs({"/f": old})
    ops = _operations(fs)

    async def main() -> None:
        ino = (await ops.lookup(ROOT_INODE, b"f", _CTX)).st_ino
        await _truncate(ops, ino, size)
        assert await _content(fs) == old[:size]  # the tree is truncated at once
        # A READ reaching past the new last page: only one the kernel sent before the truncation.
        assert await ops.read(ino, 0, 2 * PAGE_SIZE) == old[: 2 * PAGE_SIZE]
        assert ops.counters["read_raced_truncate"] == 1
        if size:
            assert await ops.read(ino, 0, size) == old[:size]  # also sent after: as it is now
        await ops.write(ino, size, b"new")  # the file changed again: the cut is gone
        assert await ops.read(ino, 0, 2 * PAGE_SIZE) == old[:size] + b"new"

    trio.run(main)


def test_a_truncation_that_cuts_nothing_keeps_nothing() -> None:
    fs = vfs.temp_fs({"/f": b"short"})
    ops = _operations(fs)

    async def main() -> None:
        ino = (await ops.lookup(ROOT_INODE, b"f", _CTX)).st_ino
        await _truncate(ops, ino, 10)  # grows
        assert not ops.cuts
        await _truncate(ops, ino, 0)
        assert ops.cuts.reach(ino) == 10
        await fs.write("/f", b"from the API")  # a change from elsewhere
        ops.tree_changed(vfs.Change("/f", "content", origin=None))
        assert not ops.cuts

    trio.run(main)
