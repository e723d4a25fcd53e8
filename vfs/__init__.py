"""agentroot ``vfs``: the FileSystem contract in Python, and the trees it composes.

One posix namespace rooted at ``/``, eight async verbs (:class:`FileSystem`), and the helpers that
build agent roots from in-memory files, host directories and remote stores. Every tree here also
speaks :class:`PosixFileSystem`, which is what ``mountd`` serves as a real mount. Runs under trio
and asyncio alike. Two tiers, as trio has: this module for composing roots, :mod:`vfs.lowlevel`
for implementing, wrapping and serving trees.

Layout (every module but the public ones is private; its first line says what it holds):

- the contract and its values: ``_types`` (protocols, FileInfo, queries), ``_errors``, ``_paths``;
- the rules every tree shares: ``_resolve`` (symlinks), ``_match`` and ``_lines`` (glob, grep),
  ``_walk`` (walks over any tree), ``_capabilities`` (optional verbs), ``_watch`` (change
  observers), ``_clock``, ``_content``, ``_reading``, ``_merge``, ``_pushdown``, ``_lazy``
  (the host-files, S3, overlay and host-disk trees are imported on first use);
- trees: ``_temp`` (in memory, with ``_pages``), ``_dir`` (a host directory, over ``_disk``'s
  system calls and ``_mounts``'s mount table), ``_host`` (a files API with etags, ``_s3`` and
  ``_s3_cache`` its S3 one), ``_empty``, ``_local`` (the host disk as an agent's default);
- composers: ``_union`` (trees at prefixes), ``_overlay`` (stacked layers), ``_cow`` with
  ``_cow_meta`` and ``_cow_changes`` (copy-on-write, its review and apply);
- checkpoints: ``_checkpoints`` (records, retention, comparing two states), ``_frozen`` (the
  frozen nodes a ``temp_fs`` shares between them), ``_cow_checkpoints`` (a cow's, in memory) and
  ``_cow_durable`` (a cow's over a directory upper, on disk);
- wrappers, all on ``_forward``'s verb table: ``_policy``, ``_audit``, ``_posix_view`` (the POSIX
  extension for any tree);
- subpackages: :mod:`vfs.tools` (the file tools a model calls), :mod:`vfs.turns` (turns, scratch
  ``/tmp``, spills).
"""

import typing as _typing

from ._audit import AuditEntry, AuditLog, audited_fs, read_audit_file
from ._checkpoints import CheckpointNotFoundError
from ._cow import CowFileSystem, cow_fs
from ._cow_meta import CowConflictError, TreeChange
from ._dir import dir_fs
from ._empty import empty_fs
from ._errors import (
    CrossMountError,
    DeleteNotSupportedError,
    DirectoryNotEmptyError,
    EditError,
    FileExistsError,
    FileNotFoundError,
    FileTooLargeError,
    InvalidGrepPatternError,
    InvalidPathError,
    IsADirectoryError,
    NoMountError,
    NotADirectoryError,
    NotSupportedError,
    PathError,
    PermissionDeniedError,
    ReadOnlyMountError,
    WriteFailedError,
)
from ._lazy import lazy_names as _lazy_names
from ._lazy import publish as _publish_one
from ._paths import is_under, normalize_path
from ._policy import Policy, PolicyDeniedError, PolicyFileSystem, Rule, policy_fs, repository_policy
from ._posix_view import posix_view
from ._temp import temp_fs
from ._types import (
    Change,
    Checkpoint,
    Checkpoints,
    DirEntry,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    Kind,
    ListsReusing,
    MakesLinks,
    MakesNodes,
    OpenFile,
    PosixFileSystem,
    SearchQuery,
    SearchResult,
    Special,
    StatsOpenFile,
    Summary,
    Watchable,
    change_origin,
)
from ._union import union_fs
from ._walk import glob_tree, grep_tree, walk

if _typing.TYPE_CHECKING:
    from ._host import HostEntry, HostFile, HostFilesApi, InMemoryHostFiles, host_fs
    from ._local import local_file_system
    from ._overlay import overlay_fs
    from ._s3 import S3HostFiles

# Trees a short-lived process rarely builds: imported on first use (see vfs._lazy).
__getattr__ = _lazy_names(
    globals(),
    __name__,
    {
        "HostEntry": "._host",
        "HostFile": "._host",
        "HostFilesApi": "._host",
        "InMemoryHostFiles": "._host",
        "host_fs": "._host",
        "local_file_system": "._local",
        "overlay_fs": "._overlay",
        "S3HostFiles": "._s3",
    },
)

__all__ = [
    "AuditEntry",
    "AuditLog",
    "Change",
    "Checkpoint",
    "CheckpointNotFoundError",
    "Checkpoints",
    "CowConflictError",
    "CowFileSystem",
    "CrossMountError",
    "DeleteNotSupportedError",
    "DirEntry",
    "DirectoryNotEmptyError",
    "EditError",
    "FileExistsError",
    "FileInfo",
    "FileNotFoundError",
    "FileSystem",
    "FileTooLargeError",
    "GrepQuery",
    "GrepResult",
    "HostEntry",
    "HostFile",
    "HostFilesApi",
    "InMemoryHostFiles",
    "InvalidGrepPatternError",
    "InvalidPathError",
    "IsADirectoryError",
    "Kind",
    "ListsReusing",
    "MakesLinks",
    "MakesNodes",
    "NoMountError",
    "NotADirectoryError",
    "NotSupportedError",
    "OpenFile",
    "PathError",
    "PermissionDeniedError",
    "Policy",
    "PolicyDeniedError",
    "PolicyFileSystem",
    "PosixFileSystem",
    "ReadOnlyMountError",
    "Rule",
    "S3HostFiles",
    "SearchQuery",
    "SearchResult",
    "Special",
    "StatsOpenFile",
    "Summary",
    "TreeChange",
    "Watchable",
    "WriteFailedError",
    "audited_fs",
    "change_origin",
    "cow_fs",
    "dir_fs",
    "empty_fs",
    "glob_tree",
    "grep_tree",
    "host_fs",
    "is_under",
    "local_file_system",
    "normalize_path",
    "overlay_fs",
    "policy_fs",
    "posix_view",
    "read_audit_file",
    "repository_policy",
    "temp_fs",
    "union_fs",
    "walk",
]

# A star import shadows nothing of Python's: these stay attributes, out of ``__all__``.
_BUILTIN_NAMES = ("FileExistsError", "FileNotFoundError", "IsADirectoryError", "NotADirectoryError")
__all__ = [name for name in __all__ if name not in _BUILTIN_NAMES]


def _publish(namespace: dict[str, object], names: list[str], module: str) -> None:
    """Name ``module`` as where each of ``names`` lives (tracebacks, reprs, docs), as trio does;
    a lazy name when it is first used (see vfs._lazy)."""
    for name in names:
        if name in namespace:
            _publish_one(namespace[name], module)


_publish(globals(), [*__all__, *_BUILTIN_NAMES], __name__)
