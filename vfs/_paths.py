"""Paths of the virtual namespace: one posix tree rooted at ``/``.

Theory of operation
-------------------
Every path that crosses the public API goes through :func:`normalize_path` first. Its result is
absolute, has no ``.``/``..``/empty segment and no trailing slash (except the root ``/``), and never
names anything above ``/``: ``..`` at the root stays at the root, exactly as the kernel resolves
``/..``. ``""`` and ``"/"`` both mean the root, and a relative path is taken relative to the root.

Prefix tests are by whole segment: ``/agent`` covers ``/agent`` and ``/agent/skills`` but not
``/agent-tools``. Nothing here does I/O.

A path is text that names bytes: it is stored as UTF-8, with ``surrogateescape`` for the bytes of
a host name that is not UTF-8 (``os.fsdecode`` spells byte ``0x80`` as ``"\udc80"``). Any other
lone surrogate (``"\ud800"``, which JSON can spell) names no bytes at all, so it is refused
with ``InvalidPathError`` like a NUL byte. :func:`printable` is how such text is shown.
"""

from __future__ import annotations

import re

from ._errors import InvalidPathError

ROOT = "/"
NAME_MAX = 255

_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` that any UTF-8 encoder takes: each surrogate-escaped byte of a host name shown as
    ``\\xNN``, any other lone surrogate as ``\\uNNNN``; other text is returned as it is."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
}


def quoted(path: str) -> str:
    """``path`` as git shows a name in its output: as it is when every character prints
    plainly, else in double quotes with C escapes (``\\n``, ``\\"``, ``\\\\``, and the
    octal UTF-8 bytes of any other character that does not print, or of a host name's byte
    that is not UTF-8), so a name can neither break a line nor move a terminal's cursor."""
    if path.isprintable() and '"' not in path and "\\" not in path:
        return path
    out = []
    for char in path:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _C_ESCAPES:
            out.append(_C_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        else:
            try:
                raw = char.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate that stands for no byte
                raw = char.encode("utf-8", "surrogatepass")
            out.append("".join(f"\\{byte:03o}" for byte in raw))
    return '"' + "".join(out) + '"'


def segment_size(segment: str, path: str) -> int:
    """How many bytes ``segment`` of ``path`` takes on disk; ``InvalidPathError`` for a lone
    surrogate that names no byte, or a segment longer than ``NAME_MAX`` bytes."""
    try:
        size = len(segment.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as error:
        code = ord(segment[error.start])
        reason = f"path holds a lone surrogate (U+{code:04X}), which names no bytes"
        raise InvalidPathError(printable(path), reason) from None
    if size > NAME_MAX:
        raise InvalidPathError(printable(path), f"path segment longer than {NAME_MAX} bytes")
    return size


_KNOWN_NORMAL: set[str] = set()
"""Paths lately found canonical: every layer of a stacked tree normalizes the same path again,
and a set lookup costs a tenth of the check. Cleared when it grows past _KNOWN_AT_MOST."""

_KNOWN_AT_MOST = 16_384


def normalize_path(path: str) -> str:
    """Return the canonical absolute form of ``path``.

    Raises :class:`InvalidPathError` for a NUL byte, a lone surrogate that names no byte, or a
    segment longer than 255 bytes (UTF-8), which no POSIX filesystem can store.
    """
    if type(path) is str and path in _KNOWN_NORMAL:
        return path
    if not isinstance(path, str):
        raise TypeError(f"path must be str, not {type(path).__name__}")
    if "\0" in path:
        raise InvalidPathError(path.replace("\0", "\\0"), "path contains a NUL byte")
    if path in ("", "/"):
        return ROOT
    if _is_normal(path):
        if len(_KNOWN_NORMAL) >= _KNOWN_AT_MOST:
            _KNOWN_NORMAL.clear()
        _KNOWN_NORMAL.add(path)
        return path
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                parts.pop()
            continue
        segment_size(segment, path)
        parts.append(segment)
    return "/" + "/".join(parts)


def _is_normal(path: str) -> bool:
    """Fast path: an ASCII path already in canonical form (the common case on every call)."""
    return (
        path[0] == "/"
        and len(path) <= NAME_MAX
        and path.isascii()
        and not path.endswith(("/", "/.", "/.."))
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
    )


def join_path(parent: str, name: str) -> str:
    """Join a normalized directory path and one segment."""
    return parent + name if parent == ROOT else parent + "/" + name


def parent_path(path: str) -> str:
    """The directory holding a normalized path (the root is its own parent)."""
    if path == ROOT:
        return ROOT
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def base_name(path: str) -> str:
    """The last segment of a normalized path (``""`` for the root)."""
    return path.rsplit("/", 1)[1] if path != ROOT else ""


def split_path(path: str) -> list[str]:
    """The segments of a normalized path (``[]`` for the root)."""
    return [] if path == ROOT else path[1:].split("/")


def is_under(path: str, prefix: str) -> bool:
    """True when ``path`` is ``prefix`` or lies beneath it, by whole segment."""
    if prefix == ROOT:
        return True
    return path == prefix or path.startswith(prefix + "/")


def is_strictly_under(path: str, prefix: str) -> bool:
    """True when ``path`` lies beneath ``prefix`` and is not ``prefix`` itself."""
    return path != prefix and is_under(path, prefix)


def strip_prefix(path: str, prefix: str) -> str:
    """``path`` relative to ``prefix``, as an absolute path of the child tree.

    ``strip_prefix("/repo/a", "/repo") == "/a"``; the caller guarantees ``is_under(path, prefix)``.
    """
    if prefix == ROOT:
        return path
    rest = path[len(prefix) :]
    return rest or ROOT


def add_prefix(path: str, prefix: str) -> str:
    """The inverse of :func:`strip_prefix`: place a child-tree path under ``prefix``."""
    if prefix == ROOT:
        return path
    return prefix if path == ROOT else prefix + path


def relative_to(path: str, directory: str) -> str:
    """``path`` relative to ``directory`` without a leading slash (``""`` for the directory itself)."""
    if directory == ROOT:
        return path[1:]
    return path[len(directory) + 1 :]
