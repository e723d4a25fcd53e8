"""Per-send workspace files: ``memory/`` is reserved, also after normalization.

Theory of operation
-------------------
Per-send ``workspaceFiles`` are written through the bound FileSystem. ``memory/`` is reserved
(on the host-default path it is the workspace's symlink into durable agent memory), so a
workspace file may not land at ``/memory`` or beneath it. The check runs on the *normalized* path,
so every spelling that lands there is refused: ``memory/x``, ``./memory/x``, ``foo/../memory/x``,
``/memory``, ``../memory/x`` (``..`` stops at the root). Prefixes are whole segments:
``memory-notes/x`` and ``/notes/memory/x`` are fine.

Pure: no I/O.
"""

from __future__ import annotations

from .._errors import PermissionDeniedError
from .._paths import is_under, normalize_path

RESERVED = "/memory"


class ReservedPathError(PermissionDeniedError):
    """A per-send workspace file aimed at the reserved ``memory/`` (EACCES)."""

    def _message(self) -> str:
        return f"reserved path: {self.path} (memory/ is reserved for durable agent memory)"


def check_workspace_file_path(path: str) -> str:
    """The normalized path of a per-send workspace file; raises :class:`ReservedPathError` for
    ``memory/`` and ``InvalidPathError`` for a path no tree can hold."""
    normalized = normalize_path(path)
    if is_under(normalized, RESERVED):
        raise ReservedPathError(normalized)
    return normalized
