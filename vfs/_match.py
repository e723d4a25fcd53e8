"""Pure matching for ``glob`` and ``grep``: no I/O, no event loop.

Glob patterns are matched against the path *relative to the directory searched*
(``*.ts`` under ``/src`` matches ``/src/a.ts``, not ``/src/nested/c.ts``). ``*`` and ``?`` stay
within one segment, ``**`` spans any number of segments, ``[...]`` and ``{a,b}`` work as in a
shell, and dotfiles are matched like any other name. Matching is delegated to ``wcmatch``.

Grep patterns are Python regular expressions, matched per line with ``search`` semantics, over
the lines ``vfs._lines`` defines; a block of lines is searched at once first where that cannot
change the answer (:func:`grep_block`). :class:`LineGrep` does it for a file read as a stream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._content import looks_binary
from ._errors import InvalidGrepPatternError
from ._lines import LineBlocks, last_line, normalized, split_lines


@functools.cache
def _wcglob() -> tuple[Any, int]:
    """wcmatch's glob module and our flags, imported at the first glob (a process that never
    matches one, ``mountd run``'s, does not pay for the import)."""
    from wcmatch import glob

    return glob, glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB | glob.NOUNIQUE


@dataclass(frozen=True, slots=True)
class GlobPlan:
    """A compiled glob and what a walk may prune with it.

    ``literal_prefix``: leading segments without wildcards, so the walk starts there.
    ``max_depth``: the deepest relative depth that can match (``None`` with ``**``).
    """

    match: Callable[[str], bool]
    literal_prefix: tuple[str, ...]
    max_depth: int | None


def compile_glob(pattern: str) -> GlobPlan:
    """Compile a glob for relative paths (a leading ``/`` or ``./`` is ignored)."""
    pattern = pattern.lstrip("/")
    while pattern.startswith("./"):
        pattern = pattern[2:]
    wcglob, flags = _wcglob()
    matcher = wcglob.compile(pattern, flags=flags)
    segments = [s for s in pattern.split("/") if s]
    literal: list[str] = []
    for segment in segments:
        if wcglob.is_magic(segment, flags=flags):
            break
        literal.append(segment)
    unbounded = any("**" in segment for segment in segments) or "{" in pattern
    return GlobPlan(
        match=matcher.match,
        literal_prefix=tuple(literal[:-1] if len(literal) == len(segments) else literal),
        max_depth=None if unbounded else len(segments),
    )


def compile_grep_glob(glob: str | None) -> Callable[[str], bool] | None:
    """The file filter of a grep: takes the path relative to the grep root.

    A slash-free glob matches the basename at any depth; one with a slash matches the whole
    relative path.
    """
    if not glob:
        return None
    if "/" not in glob.strip("/"):
        wcglob, flags = _wcglob()
        name_match = wcglob.compile(glob.strip("/"), flags=flags).match
        return lambda rel: name_match(rel.rsplit("/", 1)[-1])
    return compile_glob(glob).match


def compile_grep(pattern: str, *, case_insensitive: bool, path: str) -> re.Pattern[str]:
    """Compile a grep pattern; a bad one raises ``InvalidGrepPatternError`` about ``path``."""
    try:
        return re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
    except (re.error, RecursionError, OverflowError) as error:
        raise InvalidGrepPatternError(path, pattern) from error


# Constructs whose answer depends on text outside the line: anchors at the ends of the whole
# text, lookarounds (which see the neighbouring lines), atomic groups and possessive
# quantifiers (which keep what they consumed, and across lines they can consume more). The test
# is on the pattern's spelling and errs only towards "unsound" (an escaped "\\A" counts too).
_LINE_BOUND_ONLY = (
    "\\A",
    "\\Z",
    "\\z",
    "(?=",
    "(?!",
    "(?<=",
    "(?<!",
    "(?>",
    "*+",
    "++",
    "?+",
    "}+",
)


def block_precheck(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """The pattern that searches a block of lines at once, or ``None`` when that could miss a
    line the pattern matches alone (see :func:`grep_block`)."""
    if any(token in regex.pattern for token in _LINE_BOUND_ONLY):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


def grep_block(
    text: str,
    regex: re.Pattern[str],
    precheck: re.Pattern[str] | None,
    first: int,
) -> list[tuple[int, str]]:
    """``(line_number, line)`` of each line of ``text`` that ``regex`` matches (``search``, one
    line at a time), numbered from ``first``. ``text`` is whole lines, each ended by ``"\\n"``,
    with no ``"\\r"`` left at a line's end.

    ``precheck`` (:func:`block_precheck`) first searches the whole block with ``MULTILINE`` at C
    speed and skips it when nothing matches. That never drops a hit: where a line matches alone,
    the same characters match inside the block, because the pattern has no construct that looks
    past the line (``^``/``$`` are line anchors there, ``\\b`` sees ``"\\n"`` as a non-word
    character like the line's edge). It may let a block through that has no hit (a pattern
    matching across lines); the line-by-line search decides.
    """
    if precheck is not None and precheck.search(text) is None:
        return []
    lines = text.split("\n")
    lines.pop()  # after the last "\n"
    search = regex.search
    return [
        (number, line) for number, line in enumerate(lines, start=first) if search(line) is not None
    ]


def grep_lines(text: str, regex: re.Pattern[str]) -> list[tuple[int, str]]:
    """``(line_number, line)`` of each matching line of ``text``, 1-based, without line
    terminators (lines as ``vfs._lines`` splits them)."""
    if not text:
        return []  # an empty file has no lines at all
    lines = split_lines(text)
    return grep_block("\n".join(lines) + "\n", regex, block_precheck(regex), 1)


def grep_bytes(data: bytes, regex: re.Pattern[str]) -> list[tuple[int, str]]:
    """The hits in a file held whole as ``data``: what :class:`LineGrep` answers for it."""
    grep = LineGrep(regex)
    return grep.feed(data) + grep.end()


class LineGrep:
    """``grep`` of one file fed as chunks of bytes: hits come out as the lines complete, so
    a file is never held whole (only one chunk and the line in progress).

    With ``skip_binary`` (ripgrep's default), a file with a NUL byte in its first 8 KiB is not
    searched, and a NUL byte later ends the search (the hits in the lines before its line
    stand): :attr:`binary` then turns true and nothing more is answered, so the caller can stop
    reading. So a sparse file, whose holes read as NULs, is never scanned to its end. Without a
    NUL the hits are :func:`grep_lines`'s for the whole file, decoded; memory is one chunk and
    the longest line.
    """

    __slots__ = ("_blocks", "_head", "_next", "_precheck", "_regex", "_skip_binary", "binary")

    SNIFF = 8192

    def __init__(self, regex: re.Pattern[str], *, skip_binary: bool = True) -> None:
        self._regex = regex
        self._precheck = block_precheck(regex)
        self._blocks = LineBlocks()
        self._next = 1
        self._head: bytearray | None = bytearray() if skip_binary else None
        self._skip_binary = skip_binary
        self.binary = False

    def feed(self, chunk: bytes) -> list[tuple[int, str]]:
        """The hits in the lines ``chunk`` completes."""
        if self.binary:
            return []
        if self._head is not None:
            self._head += chunk
            if len(self._head) < self.SNIFF:
                return []
            chunk = self._sniffed()
            if self.binary:
                return []
        return self._lines_of(chunk)

    def end(self) -> list[tuple[int, str]]:
        """The hits in what is left once every chunk was fed."""
        if self._head is not None:
            chunk = self._sniffed()
            if self.binary:
                return []
            hits = self._lines_of(chunk)
        else:
            hits = []
        rest = self._blocks.end()
        if rest and not self.binary:  # the line a NUL was in is not searched
            hits += grep_block(last_line(rest) + "\n", self._regex, self._precheck, self._next)
        return hits

    def _lines_of(self, chunk: bytes) -> list[tuple[int, str]]:
        if self._skip_binary:
            nul = chunk.find(b"\0")
            if nul >= 0:
                self.binary = True  # the lines completed before the NUL are still searched
                chunk = chunk[:nul]
        return self._block(self._blocks.feed(chunk))

    def _sniffed(self) -> bytes:
        head = bytes(self._head or b"")
        self._head = None
        self.binary = looks_binary(head)
        return head

    def _block(self, block: bytes) -> list[tuple[int, str]]:
        if not block:
            return []
        first = self._next
        self._next += block.count(b"\n")
        return grep_block(normalized(block), self._regex, self._precheck, first)
