"""Trees the mcpstage mount tests serve: module-level, picklable, importing ``vfs`` lazily."""

from __future__ import annotations


def cow_over(host: str) -> object:
    """A copy-on-write root over ``host`` (which holds the template repository): every write
    through the mount lands in the in-memory upper, the host directory is never written."""
    from vfs import dir_fs
    from vfs._cow import cow_fs

    return cow_fs(dir_fs(host))
