"""StrReplace's edit: an exact, literal, non-overlapping replace, with the contract's errors.

Theory of operation
-------------------
StrReplace is not a FileSystem verb: the tool ``read``s the file, :func:`splice` computes the new
text, and the tool ``write``s it back. :func:`splice` is pure and checks, in this order:

1. ``old`` is empty -> ``EditError("oldText is empty")``;
2. ``old == new`` -> ``EditError("oldText and newText are exactly the same")``;
3. ``old`` does not occur -> ``EditError("The string to replace was not found in the file")``;
4. ``old`` occurs more than once and ``replace_all`` is false -> ``EditError("The string to
   replace was found multiple times in the file. Use replace_all to replace all occurrences, or
   include more context to only edit one occurrence.")``.

Occurrences are counted left to right without overlap (``"aaa"`` holds ``"aa"`` once), and the
splice is literal: no regular expression, no ``$&``/``\\1`` expansion in ``new``, nothing special
about any character (the contract forbids ``String.prototype.replace``; in Python we cut and join
strings, never ``re.sub``).

The splice works on the file's exact bytes (``old`` and ``new`` encoded as UTF-8), so bytes
outside the replaced spans are never changed, whatever the file holds: ``read`` would have
decoded bytes that are not UTF-8 as U+FFFD, and writing that text back would rewrite them. On
text that is UTF-8 the byte splice is the text splice (UTF-8 is self-synchronizing: an encoded
string matches only at character boundaries). Files over :data:`EDIT_MAX_BYTES` are refused
(``EditError(TOO_LARGE)``) before they are held whole.

Edits to one file are serialized (:data:`EDIT_LOCKS`): Write, StrReplace and Delete of a path
hold that path's lock while they read and write, so parallel tool calls (which models make)
cannot interleave a read-modify-write and lose an edit. A lock is per file *of the tree that
holds it*: through a tree that forwards to another (``mount_for``: a union, the tools of a turn)
the key is the tree at the end and its own path, so two sessions' turn roots over one static
root share the lock of each of its files. The registry
holds an entry only while an edit of that file is in flight (keyed by object identity, which is
unique while the tree is in use), so it never grows with the files edited; it is the one piece
of process-wide state of the tools, as it has to be: tools are bound per turn, edits of a shared
root come from many of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from .._errors import EditError
from .._types import FileSystem

AnyText = TypeVar("AnyText", str, bytes)

EMPTY = "oldText is empty"
SAME = "oldText and newText are exactly the same"
NOT_FOUND = "The string to replace was not found in the file"
MULTIPLE = (
    "The string to replace was found multiple times in the file. Use replace_all to replace all "
    "occurrences, or include more context to only edit one occurrence."
)

EDIT_MAX_BYTES = 16 << 20
"""StrReplace refuses files larger than this (it holds the file, and its edit, whole)."""
TOO_LARGE = (
    f"The file is too large to edit with StrReplace (more than {EDIT_MAX_BYTES >> 20} MiB); "
    "use Write to replace it whole"
)


def check_edit(path: str, old: str, new: str) -> None:
    """The checks that need no file contents (1 and 2 above)."""
    if not old:
        raise EditError(path, EMPTY)
    if old == new:
        raise EditError(path, SAME)


def splice(path: str, text: AnyText, old: str, new: str, replace_all: bool) -> tuple[AnyText, int]:
    """``(new text, occurrences replaced)``; raises :class:`vfs.EditError` (``path`` is what
    the error is about). ``text`` may be the file's bytes: then ``old`` and ``new`` are spliced
    in as UTF-8 and every other byte stays as it was."""
    check_edit(path, old, new)
    if isinstance(text, bytes):
        return _splice(path, text, old.encode("utf-8"), new.encode("utf-8"), replace_all)
    return _splice(path, text, old, new, replace_all)


def _splice(
    path: str, text: AnyText, old: AnyText, new: AnyText, replace_all: bool
) -> tuple[AnyText, int]:
    pieces = text.split(old)  # split is literal and non-overlapping, left to right
    occurrences = len(pieces) - 1
    if occurrences == 0:
        raise EditError(path, NOT_FOUND)
    if occurrences > 1 and not replace_all:
        raise EditError(path, MULTIPLE)
    return new.join(pieces), occurrences


@dataclass(eq=False)
class _Held:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0


class EditLocks:
    """The files being edited right now, one lock each (see the module docstring)."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, str], _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    @asynccontextmanager
    async def hold(self, fs: FileSystem, path: str) -> AsyncIterator[None]:
        """Hold the lock of the file ``path`` (resolved) of ``fs`` for the ``async with`` body."""
        tree, where = edit_target(fs, path)
        key = (id(tree), where)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]


EDIT_LOCKS = EditLocks()
"""Every tool's edits go through this one registry."""


def edit_target(fs: FileSystem, path: str) -> tuple[FileSystem, str]:
    """The tree that holds ``path`` and its path there: through a tree that forwards to
    another (a union to the mounted tree, a turn's tools to the turn's root: their
    ``mount_for``), the tree at the end."""
    for _ in range(64):  # forwarding chains are short; a cycle would be a bug, not a hang
        locate: Callable[[str], tuple[FileSystem, str] | None] | None = getattr(
            fs, "mount_for", None
        )
        found = None if locate is None else locate(path)
        if found is None or found[0] is fs:
            break
        fs, path = found
    return fs, path
