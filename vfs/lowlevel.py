"""The second tier of ``vfs``: what tree authors and ``mountd`` build with.

``vfs`` is for people who compose agent roots; this module is for code that implements a tree,
wraps one, or serves one (``mountd``): path helpers, the resolver every tree drives, the verb table
and the forwarding bases, capability helpers, the concrete tree classes the factories return, the
copy-on-write tree's review and apply pieces, the host mount table and the mountpoint guard. Like
``trio.lowlevel``, it is public and kept stable, but it speaks in the project's internals. Nothing
outside ``vfs`` imports ``vfs._*`` (ruff's banned-API rule holds ``mountd``, ``mcpstage`` and
``bench`` to it).
"""

import typing as _typing

from ._audit import AuditedFileSystem
from ._capabilities import (
    ListReusing,
    buffers_writes,
    list_info_of,
    list_reusing_of,
    make_link,
    make_node,
    open_file_info,
    unlink_keeping,
)
from ._cow_changes import SET_ID_BITS, unsafe_paths, without_set_id, writer_view
from ._cow_changes import read_bytes as read_file_bytes
from ._cow_changes import select as select_changes
from ._cow_meta import RESERVED as COW_RESERVED
from ._cow_meta import CowRefusedError
from ._dir import DirFileSystem
from ._disk import guard_mountpoint, release_mountpoint
from ._empty import EmptyFileSystem
from ._forward import FILE_VERBS, TREE_VERBS, ForwardingFile, ForwardingTree, PathArg, Verb
from ._frozen import FrozenDir, page_space
from ._lazy import lazy_names as _lazy_names
from ._mounts import MountEntry, parse_mountinfo, read_mountinfo
from ._pages import NoSpace, Pages, Usage
from ._paths import (
    NAME_MAX,
    ROOT,
    add_prefix,
    base_name,
    is_strictly_under,
    join_path,
    parent_path,
    quoted,
    split_path,
    strip_prefix,
)
from ._posix_view import PosixView
from ._resolve import SYMLOOP_MAX, Lstat, Readlink, Resolved, drive, drive_sync, resolution
from ._temp import TempFileSystem, TempOpenFile
from ._types import (
    SPECIAL_OF_TYPE_BITS,
    SPECIAL_TYPE_BITS,
    ChangeCallback,
    DirListing,
    NamedListing,
    UnlinksKeeping,
    resized,
)
from ._union import UnionFileSystem
from ._watch import Observers

if _typing.TYPE_CHECKING:
    from ._cow_fork import write_fork
    from ._host import HostFileSystem
    from ._local import LocalFileSystem
    from ._overlay import OverlayFileSystem
    from ._s3 import DEFAULT_PART_SIZE

# Imported on first use, as in vfs (see vfs._lazy).
__getattr__ = _lazy_names(
    globals(),
    __name__,
    {
        "HostFileSystem": "._host",
        "write_fork": "._cow_fork",
        "LocalFileSystem": "._local",
        "OverlayFileSystem": "._overlay",
        "DEFAULT_PART_SIZE": "._s3",
    },
)

__all__ = [
    "COW_RESERVED",
    "DEFAULT_PART_SIZE",
    "FILE_VERBS",
    "NAME_MAX",
    "ROOT",
    "SET_ID_BITS",
    "SPECIAL_OF_TYPE_BITS",
    "SPECIAL_TYPE_BITS",
    "SYMLOOP_MAX",
    "TREE_VERBS",
    "AuditedFileSystem",
    "ChangeCallback",
    "CowRefusedError",
    "DirFileSystem",
    "DirListing",
    "EmptyFileSystem",
    "ForwardingFile",
    "ForwardingTree",
    "FrozenDir",
    "HostFileSystem",
    "ListReusing",
    "LocalFileSystem",
    "Lstat",
    "MountEntry",
    "NamedListing",
    "NoSpace",
    "Observers",
    "OverlayFileSystem",
    "Pages",
    "PathArg",
    "PosixView",
    "Readlink",
    "Resolved",
    "TempFileSystem",
    "TempOpenFile",
    "UnionFileSystem",
    "UnlinksKeeping",
    "Usage",
    "Verb",
    "add_prefix",
    "base_name",
    "buffers_writes",
    "drive",
    "drive_sync",
    "guard_mountpoint",
    "is_strictly_under",
    "join_path",
    "list_info_of",
    "list_reusing_of",
    "make_link",
    "make_node",
    "open_file_info",
    "page_space",
    "parent_path",
    "parse_mountinfo",
    "quoted",
    "read_file_bytes",
    "read_mountinfo",
    "release_mountpoint",
    "resized",
    "resolution",
    "select_changes",
    "split_path",
    "strip_prefix",
    "unlink_keeping",
    "unsafe_paths",
    "without_set_id",
    "write_fork",
    "writer_view",
]

from . import _publish

_publish(globals(), __all__, __name__)
