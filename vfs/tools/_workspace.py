"""Per-send workspace files: ``memory/`` is reserved, also after resolving the path.

Theory of operation
-------------------
Per-send ``workspaceFiles`` are written through the bound FileSystem. ``memory/`` is reserved
(on the host-default path it is the workspace's symlink into durable agent memory), so a
workspace file may not land in it. The check runs on the path *as the bound tree resolves it*
(:func:`vfs.tools.path_resolver`), so every spelling that lands there is refused:

* on an authored root (a virtual tree) the reserved directory is ``/memory``: ``memory/x``,
  ``./memory/x``, ``foo/../memory/x``, ``/memory``, ``../memory/x`` (``..`` stops at the root);
* on the host default (``local_file_system(cwd)``) it is ``{cwd}/memory``: besides the relative
  spellings, ``{cwd}/memory/x`` and ``../<cwd's name>/memory/x`` resolve there. The host disk
  also has symlinks, so a path whose real location (``os.path.realpath``) lies in the real
  ``{cwd}/memory`` is refused too: the durable directory's own path, or another link to it.

Prefixes are whole segments: ``memory-notes/x`` and ``notes/memory/x`` are fine. Without a tree
the check is the virtual one. The host check asks the disk where the links point; nothing else
here does I/O.
"""

from __future__ import annotations

import os
import posixpath

from .._errors import PermissionDeniedError
from .._local import LocalFileSystem
from .._paths import is_under, normalize_path
from .._types import FileSystem

RESERVED = "/memory"


class ReservedPathError(PermissionDeniedError):
    """A per-send workspace file aimed at the reserved ``memory/`` (EACCES)."""

    def _message(self) -> str:
        return f"reserved path: {self.path} (memory/ is reserved for durable agent memory)"


def check_workspace_file_path(path: str, fs: FileSystem | None = None) -> str:
    """The path of a per-send workspace file as ``fs`` resolves it (a virtual tree's when ``fs``
    is omitted); raises :class:`ReservedPathError` for ``memory/`` and ``InvalidPathError`` for
    a path no tree can hold."""
    if isinstance(fs, LocalFileSystem):
        resolved = fs.resolve(path)
        reserved = posixpath.join(fs.cwd, RESERVED[1:])
        if is_under(resolved, reserved) or is_under(
            os.path.realpath(resolved), os.path.realpath(reserved)
        ):
            raise ReservedPathError(resolved)
        return resolved
    normalized = normalize_path(path)
    if is_under(normalized, RESERVED):
        raise ReservedPathError(normalized)
    return normalized
