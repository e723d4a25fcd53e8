"""The file a CREATE left open for the WRITEs that follow it (files served by inode).

Theory of operation
-------------------
Served by inode (``Terms.files_by_inode``) the kernel sends no RELEASE, not even for a created
file, and names the file of each WRITE by its inode only, so each WRITE would open the file by
its path for that request (on ``dir_fs`` an ``openat2``, an ``fstat`` and a ``close``). Instead
:class:`CreatedFile` holds the file the last CREATE opened, as the creator's descriptor would,
and the WRITEs of that inode go through it. It holds one file at most.

The held file is let go of (:meth:`CreatedFile.let_go`)

- before any changing request but a WRITE (of any file) and a SETATTR of the held file itself
  (:meth:`CreatedFile.lets_go_before`): tar sets each file's times right after writing it, and
  the file is let go of, and learned, once, after that;
- when the kernel forgets its inode (:meth:`CreatedFile.forgotten`);
- after a change reported from elsewhere (the API, the host: :meth:`CreatedFile.changed_elsewhere`):
  the held file is then *stale*; WRITEs open the file by its name again, as before it was held,
  so the API's bytes and the writer's meet, and the next request by inode lets go of it;
- at unmount.

A WRITE may await inside the held file, and another request run meanwhile and let go of it: a
WRITE borrows the file (:meth:`CreatedFile.borrow`) and gives it back
(:meth:`Held.give_back`), and a file let go of while borrowed is closed by its last
borrower, never under a write. A file let go of while no one borrows it is handed to the caller,
which learns what the file is now and closes it (:func:`close_logged`). Closing is the only I/O
here; every decision is a plain method on the slot's own state.
"""

from __future__ import annotations

import logging

from vfs import OpenFile

from ._inodes import Node

log = logging.getLogger("mountd")


class Held:
    """The created file being held, and who is writing through it right now."""

    __slots__ = ("detached", "file", "node", "users")

    def __init__(self, node: Node, file: OpenFile) -> None:
        self.node = node
        self.file = file
        self.users = 0  # WRITEs borrowing it right now
        self.detached = False  # let go of: its last borrower closes it

    async def give_back(self) -> None:
        """The WRITE that borrowed the file is done; the last one closes it if it was let go of."""
        self.users -= 1
        if self.detached and not self.users:
            await close_logged(self)


class CreatedFile:
    """The slot for the file the last CREATE opened (see the module docstring)."""

    __slots__ = ("_held", "_stale")

    def __init__(self) -> None:
        self._held: Held | None = None
        self._stale = False

    @property
    def held(self) -> Held | None:
        return self._held

    @property
    def stale(self) -> bool:
        """Whether the tree changed elsewhere since the held file was created."""
        return self._stale

    def holds_stale(self) -> bool:
        """Whether a file is held that the tree changed elsewhere since (to be let go of)."""
        return self._stale and self._held is not None

    def hold(self, node: Node, file: OpenFile) -> Held | None:
        """Hold ``file``, just created as ``node``; return what was held before, let go of
        (only when two CREATEs ran at once: each changing request lets go first)."""
        previous = self.let_go()
        self._held = Held(node, file)
        self._stale = False
        return previous

    def lets_go_before(self, op: str, ino: int) -> bool:
        """Whether the changing request ``op`` on inode (or handle) ``ino`` must let go of the
        held file before it runs."""
        held = self._held
        return held is not None and not (
            op == "write" or (op == "setattr" and ino == held.node.ino)
        )

    def forgotten(self, ino: int) -> bool:
        """Whether the kernel forgot the held file's inode ``ino`` (the file must be let go of)."""
        held = self._held
        return held is not None and held.node.ino == ino and held.node.lookups == 0

    def changed_elsewhere(self) -> None:
        """The tree changed from elsewhere: the held file is reopened by name from now on."""
        self._stale = True

    def borrow(self, ino: int) -> Held | None:
        """The held file, for a WRITE of inode ``ino``, unless it is another file or stale;
        give it back with :meth:`Held.give_back`."""
        held = self._held
        if held is None or held.node.ino != ino or self._stale:
            return None
        held.users += 1
        return held

    def let_go(self) -> Held | None:
        """Stop holding the file. Returns it when no WRITE is using it: the caller learns it and
        closes it; otherwise its last borrower closes it."""
        held = self._held
        self._held = None
        if held is None:
            return None
        held.detached = True
        return None if held.users else held

    def at_unmount(self) -> OpenFile | None:
        """The file still held when the session ended, to be closed with the other open files."""
        held = self._held
        self._held = None
        return None if held is None else held.file


async def close_logged(held: Held) -> None:
    """Close the file; a failure is logged, never put on whichever request came next (the trees
    served by inode buffer nothing that could be lost)."""
    try:
        await held.file.close()
    except Exception:
        log.exception("closing the created file of inode %d failed", held.node.ino)
