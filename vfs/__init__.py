"""agentroot ``vfs``: the FileSystem contract in Python, and the trees it composes.

One posix namespace rooted at ``/``, eight async verbs (:class:`FileSystem`), and the helpers that
build agent roots from in-memory files, host directories and remote stores. Every tree here also
speaks :class:`PosixFileSystem`, which is what ``mountd`` serves as a real mount. Runs under trio
and asyncio alike.
"""

from ._audit import AuditEntry, AuditLog, audited_fs, read_audit_file
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
from ._host import HostEntry, HostFile, HostFilesApi, InMemoryHostFiles, host_fs
from ._local import local_file_system
from ._overlay import overlay_fs
from ._paths import is_under, normalize_path
from ._policy import Policy, PolicyDeniedError, PolicyFileSystem, Rule, policy_fs, repository_policy
from ._posix_view import posix_view
from ._s3 import S3HostFiles
from ._temp import temp_fs
from ._types import (
    Change,
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
    Watchable,
    change_origin,
)
from ._union import union_fs
from ._walk import glob_tree, grep_tree, walk

__all__ = [
    "AuditEntry",
    "AuditLog",
    "Change",
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
