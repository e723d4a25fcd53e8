"""The caller's terminal, given back as it was before the command in ``mountd run`` had it.

The command shares the terminal with the summary printed after it. A command can leave the
terminal in a state that hides what follows (concealed or same-colour text, a one-line scroll
region, the alternate screen, echo or output processing off) after printing a forged summary
of its own, so that the reviewer reads only that. :func:`kept_terminal` records the terminal's
line settings before the command and, when the command has ended, puts them back and resets
what escape sequences changed (DEC's soft reset, which leaves the screen's text where it is),
so the real summary is shown as printed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
from collections.abc import Iterator

# Leave the alternate screen, soft reset (character attributes, scroll region, origin and insert
# modes, cursor shown), then the same plainly for terminals without DECSTR; and the colours
# themselves back to the terminal's own (the palette, default foreground and background: a
# command could make them the same).
RESET = b"\x1b[?1049l\x1b[!p\x1b[0m\x1b[r\x1b[?25h\x1b]104\x07\x1b]110\x07\x1b]111\x07"


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
        with contextlib.suppress(termios.error, OSError):
            if saved is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(fd, RESET)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False
