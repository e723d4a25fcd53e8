"""What a truncation through the mount cut off, for the reads that raced it.

Theory of operation
-------------------
A shrinking truncate reaches the daemon as a SETATTR with a size, and the kernel keeps the
inode's size *unstable* while it waits for the answer (``FUSE_I_SIZE_UNSTABLE``; an
``O_TRUNC`` open served by inode comes this way too, as the kernel sends no OPEN). A READ the
kernel sent before it took that answer in, asking for pages below the old end, may be answered
after the tree truncated the file: short. The kernel zero-fills the rest of its pages and marks
them valid, but does not shrink its size while the truncation is unstable, so the reader copies
zeros up to the old end: bytes the file never held (``fs/fuse/file.c``, ``fuse_short_read``
and ``fuse_read_update_size``; an OPEN carrying ``O_TRUNC`` sets no such state, which is why a
mount with handles shows it only for ``ftruncate``).

Such a READ is concurrent with the truncation: the old bytes are a true answer. So before a
SETATTR shrinks a file to ``size`` the mount keeps what it cuts off (:class:`Cut`: the bytes from
``size`` up to the old end, at most :data:`CUT_MAX` of them), and a READ of that inode answered
meanwhile gets them where it asks for a page only a reader that still saw the old size would
ask for (:meth:`Cut.answer`): the kernel asks only for pages below its own size, so once the
truncation is done it never asks past the page holding the new last byte (for a size of zero,
for nothing at all). A READ inside that page could be either: it gets the file as it is now,
and a racing reader of it may still see zeros up to the old end within that page. An
``O_DIRECT`` read is the other exception: the kernel sends it as asked, so one that starts below
a new size greater than zero and reaches past its page, made while a cut is kept, gets the old
bytes past the new end (bytes the file held, never zeros). After a raced answer ``mountd._ops``
drops the inode's pages, in case the READ filled them after the truncation dropped its own.

A cut is dropped when the file changes again (a WRITE, another SETATTR with a size: a second
shrink keeps the first cut's bytes behind its own), when the tree reports a change from
elsewhere (the API, the host: every cut), when the inode table drops the node, and
:data:`CUT_LIFE` seconds after it was made: the reads that raced were sent before the answer
and are long answered by then. At most :data:`CUTS_BUDGET` bytes are kept over all cuts, the
oldest dropped first. Nothing here does I/O; ``mountd._ops`` reads the bytes and asks.
"""

from __future__ import annotations

import mmap
import time
from collections import OrderedDict
from collections.abc import Callable

PAGE_SIZE = mmap.PAGESIZE
# The most bytes kept of one cut: a reader racing a truncation has at most its read-ahead
# window in flight (``MountOptions.read_ahead_kb``); one further out sees the file end there.
CUT_MAX = 1 << 20
# The most bytes kept over all cuts at once.
CUTS_BUDGET = 16 << 20
# Seconds a cut is kept at most.
CUT_LIFE = 1.0


class Cut:
    """The bytes a truncation to ``size`` cut off the file (``tail``: from ``size`` on)."""

    __slots__ = ("made", "size", "tail")

    def __init__(self, size: int, tail: bytes, made: float) -> None:
        self.size = size
        self.tail = tail
        self.made = made

    @property
    def end(self) -> int:
        """Where the kept bytes end (the old end of the file, or :data:`CUT_MAX` past ``size``)."""
        return self.size + len(self.tail)

    def answer(self, off: int, length: int, data: bytes) -> bytes | None:
        """What a READ of ``length`` bytes at ``off``, which read ``data`` from the file now,
        answers: the file before the truncation when the READ asks for a page past the one
        holding the new last byte (and the file is still as the truncation left it); ``None``
        to answer ``data``."""
        size = self.size
        if off + length <= -(-size // PAGE_SIZE) * PAGE_SIZE or off >= self.end:
            return None
        if len(data) != max(0, min(length, size - off)):
            return None  # read before the truncation, or changed since
        if off >= size:
            return self.tail[off - size : off - size + length]
        return data + self.tail[: length - len(data)]


class Cuts:
    """The cuts of one mount, by inode number (see the module docstring)."""

    __slots__ = ("_bytes", "_clock", "_cuts")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cuts: OrderedDict[int, Cut] = OrderedDict()
        self._bytes = 0
        self._clock = clock

    def __len__(self) -> int:
        return len(self._cuts)

    def reach(self, ino: int) -> int | None:
        """Where the bytes kept for ``ino`` end, if a cut is kept for it."""
        cut = self._cuts.get(ino)
        return None if cut is None else cut.end

    def cut(self, ino: int, size: int, tail: bytes) -> None:
        """The file of ``ino`` is being truncated to ``size`` and ``tail`` is what follows
        ``size`` now. A cut already kept that begins where ``tail`` ends stays behind it (a
        reader that raced the first truncation may still see the first old end)."""
        now = self._now()
        previous = self._pop(ino)
        if (
            previous is not None
            and previous.size == size + len(tail)
            and now - previous.made < CUT_LIFE
        ):
            tail = (tail + previous.tail)[:CUT_MAX]
        if tail:
            self._cuts[ino] = Cut(size, tail, now)
            self._bytes += len(tail)
        self._sweep(now)

    def find(self, ino: int) -> Cut | None:
        """The cut kept for ``ino``, unless it expired."""
        cut = self._cuts.get(ino)
        if cut is not None and self._now() - cut.made >= CUT_LIFE:
            self._pop(ino)
            return None
        return cut

    def end(self, ino: int) -> None:
        """The file of ``ino`` changed again (written, truncated, dropped): forget its cut."""
        if self._cuts:
            self._pop(ino)

    def forget_all(self) -> None:
        """The tree changed from elsewhere: no cut still says what a file held."""
        self._cuts.clear()
        self._bytes = 0

    def _pop(self, ino: int) -> Cut | None:
        cut = self._cuts.pop(ino, None)
        if cut is not None:
            self._bytes -= len(cut.tail)
        return cut

    def _sweep(self, now: float) -> None:
        cuts = self._cuts
        while cuts:
            ino, oldest = next(iter(cuts.items()))
            if self._bytes <= CUTS_BUDGET and now - oldest.made < CUT_LIFE:
                return
            self._pop(ino)

    def _now(self) -> float:
        return self._clock()
