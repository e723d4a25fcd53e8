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
"""

from __future__ import annotations

from .._errors import EditError

EMPTY = "oldText is empty"
SAME = "oldText and newText are exactly the same"
NOT_FOUND = "The string to replace was not found in the file"
MULTIPLE = (
    "The string to replace was found multiple times in the file. Use replace_all to replace all "
    "occurrences, or include more context to only edit one occurrence."
)


def check_edit(path: str, old: str, new: str) -> None:
    """The checks that need no file contents (1 and 2 above)."""
    if not old:
        raise EditError(path, EMPTY)
    if old == new:
        raise EditError(path, SAME)


def splice(path: str, text: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """``(new text, occurrences replaced)``; raises :class:`vfs.EditError` (``path`` is what
    the error is about)."""
    check_edit(path, old, new)
    pieces = text.split(old)  # str.split is literal and non-overlapping, left to right
    occurrences = len(pieces) - 1
    if occurrences == 0:
        raise EditError(path, NOT_FOUND)
    if occurrences > 1 and not replace_all:
        raise EditError(path, MULTIPLE)
    return new.join(pieces), occurrences
