"""Pure matching for ``glob`` and ``grep``: no I/O, no event loop.

Glob patterns are matched against the path *relative to the directory searched*
(``*.ts`` under ``/src`` matches ``/src/a.ts``, not ``/src/nested/c.ts``). ``*`` and ``?`` stay
within one segment, ``**`` spans any number of segments, ``[...]`` and ``{a,b}`` work as in a
shell, and dotfiles are matched like any other name. Matching is delegated to ``wcmatch``.

Grep patterns are Python regular expressions, matched per line with ``search`` semantics.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from wcmatch import glob as _wcglob

from ._errors import InvalidGrepPatternError

_GLOB_FLAGS = _wcglob.GLOBSTAR | _wcglob.BRACE | _wcglob.DOTGLOB | _wcglob.NOUNIQUE


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
    matcher = _wcglob.compile(pattern, flags=_GLOB_FLAGS)
    segments = [s for s in pattern.split("/") if s]
    literal: list[str] = []
    for segment in segments:
        if _wcglob.is_magic(segment, flags=_GLOB_FLAGS):
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
        name_match = _wcglob.compile(glob.strip("/"), flags=_GLOB_FLAGS).match
        return lambda rel: name_match(rel.rsplit("/", 1)[-1])
    return compile_glob(glob).match


def compile_grep(pattern: str, *, case_insensitive: bool, path: str) -> re.Pattern[str]:
    """Compile a grep pattern; a bad one raises ``InvalidGrepPatternError`` about ``path``."""
    try:
        return re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
    except (re.error, RecursionError, OverflowError) as error:
        raise InvalidGrepPatternError(path, pattern) from error


def grep_lines(text: str, regex: re.Pattern[str]) -> list[tuple[int, str]]:
    """``(line_number, line)`` of each matching line, 1-based, without line terminators."""
    # One search over the whole text rejects most files at C speed. MULTILINE keeps ``^``/``$``
    # anchoring at line boundaries, so a line that matches alone also matches here (re caches
    # the compiled variant).
    if not text or re.compile(regex.pattern, regex.flags | re.MULTILINE).search(text) is None:
        return []  # an empty file has no lines at all
    hits = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if regex.search(line) is not None:
            hits.append((number, line))
    if hits and text.endswith("\n") and hits[-1][0] == text.count("\n") + 1:
        hits.pop()  # the empty "line" after a final newline is not a line
    return hits
