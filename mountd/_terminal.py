"""The caller's terminal, given back as it was before the command in ``mountd run`` had it.

The command shares the terminal with the summary printed after it. A command can leave the
terminal in a state that hides what follows (concealed or same-colour text, a one-line scroll
region, the alternate screen, echo or output processing off) after printing a forged summary
of its own, so that the reviewer reads only that. :func:`kept_terminal` records the terminal's
line settings before the command and, when the command has ended, puts them back and resets
what escape sequences changed (DEC's soft reset, which leaves the screen's text where it is),
so the real summary is shown as printed.

What the agent wrote reaches the terminal in a diff too: a line ``curl ... | sh`` followed by
one that moves the cursor up and erases it shows the reviewer only the second. :func:`write_diff`
shows control characters visibly (``^[``, ``^M``) when it writes to a terminal, as ``less``
(git's pager) does; to a file or a pipe, the diff is written as it is, to be applied.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import termios
from collections.abc import Iterator
from typing import TextIO

# Leave the alternate screen (1047, not 1049: that one also restores a saved cursor, which
# a terminal may do on the normal screen too, printing the summary over the top line),
# soft reset (character attributes, scroll region, origin and insert modes, cursor shown), then
# attributes and cursor plainly for terminals without DECSTR (not the scroll region plainly:
# that moves the cursor home); and the colours themselves back to the terminal's own (the
# palette, default foreground and background: a command could make them the same).
RESET = b"\x1b[?1047l\x1b[!p\x1b[0m\x1b[?25h\x1b]104\x07\x1b]110\x07\x1b]111\x07"


@contextlib.contextmanager
def kept_terminal() -> Iterator[None]:
    """Around the command: the terminal (if stdin, stdout or stderr is one) is given back as
    it was, and reset (see the module docstring)."""
    fd = next((fd for fd in (2, 1, 0) if _is_terminal(fd)), None)
    if fd is None:
        yield
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        saved = None
    try:
        yield
    finally:
        # Not from the background (`mountd run ... &`): changing the terminal would stop the
        # run with SIGTTOU; the foreground process owns the terminal's state then.
        if not _in_background(fd):
            with contextlib.suppress(termios.error, OSError):
                if saved is not None:
                    termios.tcsetattr(fd, termios.TCSADRAIN, saved)
                sys.stdout.flush()
                sys.stderr.flush()
                os.write(fd, RESET)


def _in_background(fd: int) -> bool:
    """Whether this process is in a background job of the terminal ``fd`` controls."""
    try:
        return os.tcgetpgrp(fd) != os.getpgrp()
    except OSError:
        return False  # not this process's controlling terminal: no job control applies


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


# C0 controls but tab and newline, DEL, and the C1 controls (a terminal may take U+009B for CSI).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def visible(text: str) -> str:
    """``text`` with its control characters shown in caret notation (``^[`` for ESC)."""
    return _CONTROLS.sub(_caret, text)


def _caret(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    return "^?" if code == 0x7F else f"<U+{code:04X}>"


def write_diff(text: str, stream: TextIO | None = None) -> None:
    """Write the diff ``text`` (with a final newline) to ``stream`` (stdout): its control
    characters shown visibly when that is a terminal (see the module docstring)."""
    out = sys.stdout if stream is None else stream
    if out.isatty():
        text = visible(text)
    out.write(text if not text or text.endswith("\n") else text + "\n")
    out.flush()
